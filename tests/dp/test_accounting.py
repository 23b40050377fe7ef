"""Accounting against published values: 000 Thm 3.1 / Fig. 1, 001 Examples 4 and 6, 004 Table 1."""

from __future__ import annotations

import math

import pytest

from shared.dp import amplification as amp
from shared.dp.composition import (
    advanced_composition,
    basic_composition,
    cdp_eps,
    cdp_rho,
    compose_rdp,
    gaussian_rdp,
    pure_dp_rdp,
    rdp_to_dp,
)
from shared.dp.gaussian import analytic_gaussian_sigma, gaussian_epsilon

N_004 = 100_000
DELTA_004 = 1e-9


def test_001_example_4_and_6_stronger_clones_then_sampling():
    # 001 Example 4: eps0 = 4, B = 10,000 aggregated reports are (0.61, 1e-10)-DP "by the
    # numerical bounds of [70]". The stronger-clone analysis gives 0.6053 (rounds to 0.61);
    # the 2021 clone bound gives 0.894, so [70]'s numbers are the stronger-clone ones.
    eps_strong = amp.shuffle_epsilon(4.0, 10_000, 1e-10, "stronger_clones")
    eps_clones = amp.shuffle_epsilon(4.0, 10_000, 1e-10, "clones")
    assert round(eps_strong, 2) == 0.61
    assert eps_strong == pytest.approx(0.6053, abs=5e-4)
    assert eps_clones == pytest.approx(0.8939, abs=5e-4)
    # Example 6: Poisson sampling at q = 0.02 of the 0.61 guarantee gives eps < 0.02.
    eps_q, delta_q = amp.poisson_sampling(0.61, 1e-10, 0.02)
    assert eps_q < 0.02
    assert eps_q == pytest.approx(math.log(1 + 0.02 * (math.exp(0.61) - 1)))
    assert delta_q == pytest.approx(2e-12)
    assert amp.poisson_sampling(eps_strong, 1e-10, 0.02)[0] < 0.02


def test_001_examples_3_and_5_gaussian_per_step():
    # Example 3: with the analytic Gaussian bounds [10], sigma = 5.1 gives (1, 1e-8) for unit
    # L2 sensitivity (exact: sigma 5.1001 for eps 1; eps 1.00006 at sigma 5.1).
    assert round(analytic_gaussian_sigma(1.0, 1e-8, 1.0), 1) == 5.1
    eps = gaussian_epsilon(5.1, 1e-8)
    assert eps == pytest.approx(1.0, abs=1e-4)
    # Example 5: sampled at q = 0.02 that step is (0.034, 1e-8)-DP (delta becomes 2e-10).
    eps_step, delta_step = amp.poisson_sampling(eps, 1e-8, 0.02)
    assert round(eps_step, 3) == 0.034
    assert delta_step <= 1e-8


def test_000_figure_1_eps0_3_reaches_1_near_n_1000():
    # 000 Fig. 1: with eps0 = 3 the aggregate is (1, 1e-6)-DP "once n > 1,000". The stronger
    # clones give that from n = 736 on; the 2021 clone bound only from n = 1405.
    assert amp.min_batch_size(3.0, 1.0, 1e-6, "stronger_clones") == 736
    assert amp.min_batch_size(3.0, 1.0, 1e-6, "clones") == 1405
    assert amp.shuffle_epsilon(3.0, 1001, 1e-6, "stronger_clones") <= 1.0


def test_000_theorem_3_1_closed_form():
    eps0, n, delta = 1.0, 100_000, 1e-6
    e0 = math.exp(eps0)
    by_hand = math.log(
        1 + (e0 - 1) * (4 * math.sqrt(2 * math.log(4 / delta)) / math.sqrt((e0 + 1) * n) + 4 / n)
    )
    assert amp.closed_form_epsilon(eps0, n, delta) == pytest.approx(by_hand, rel=1e-12)
    # The regime bound: ln(n / (8 ln(2/delta)) - 1) = 6.7576 here.
    assert amp.closed_form_valid(6.757, n, delta)
    assert not amp.closed_form_valid(6.758, n, delta)
    with pytest.raises(ValueError):
        amp.closed_form_epsilon(4.0, 10_000, 1e-10)
    # The numerical procedure of the same theorem is never looser than its closed form.
    for e, m in ((1.0, 100_000), (2.0, 50_000), (0.5, 10_000), (3.0, 1_000_000)):
        closed = amp.closed_form_epsilon(e, m, delta)
        assert amp.shuffle_epsilon(e, m, delta, "clones") <= closed
        assert amp.shuffle_epsilon(e, m, delta, "stronger_clones") <= closed


@pytest.mark.parametrize(
    ("eps0", "published", "rdp_int", "rdp_free", "exact", "deletion", "strong", "clones"),
    [
        (5.0, 0.317, 0.3160, 0.3160, 0.2847, 0.2120, 0.2837, 0.4089),
        (6.5, 0.906, 0.9057, 0.9056, 0.6452, 0.5150, 0.6447, 0.9700),
        (7.0, 1.528, 1.5280, 1.5190, 0.8638, 0.7148, 0.8633, 1.3605),
    ],
)
def test_004_table_1_symmetric_rappor(
    eps0, published, rdp_int, rdp_free, exact, deletion, strong, clones
):
    """004 Table 1 (n = 1e5, delta = 1e-9) does not state its method. What each analysis gives:

    * 000 Theorem C.3 (2 rho_2RR, converted with 001 Theorem 1) over the integer Renyi orders
      2..256 reproduces 0.906 and 1.528 to the published 3 decimals; for eps0 = 5 it gives
      0.3160 (at alpha = 95) where 004 prints 0.317 -- the value at alpha = 100 (0.3165), so
      the draft's order grid was coarser there. Free (non-integer) orders give less at eps0 = 7.
    * The exact symmetric-RAPPOR hockey-stick (replacement: two coordinates move) is much
      smaller; the deletion (one coordinate) smaller still; the stronger clones with the per-bit
      eps0 are slightly below the exact value (optimistic, as dp-notes says); the 2021 clones
      with per-bit eps0 match none.
    """
    rdp = amp.sym_rappor_rdp_epsilon(eps0, N_004, DELTA_004, orders=range(2, 257))
    assert rdp == pytest.approx(rdp_int, abs=5e-5)
    if eps0 != 5.0:
        assert rdp == pytest.approx(published, abs=5e-4)
    else:
        assert published - rdp == pytest.approx(0.001, abs=1e-4)
        at_100 = amp.sym_rappor_rdp_epsilon(eps0, N_004, DELTA_004, orders=[100])
        assert round(at_100, 3) == published
    assert amp.shuffle_epsilon(eps0, N_004, DELTA_004, "sym_rappor_rdp") == pytest.approx(
        rdp_free, abs=5e-5
    )
    checks: list[tuple[amp.Analysis, float]] = [
        ("sym_rappor_exact", exact),
        ("sym_rappor_deletion_exact", deletion),
        ("stronger_clones", strong),
        ("clones", clones),
    ]
    for analysis, value in checks:
        assert amp.shuffle_epsilon(eps0, N_004, DELTA_004, analysis) == pytest.approx(
            value, abs=5e-5
        ), analysis
    assert strong < exact
    # The generic bound with the replacement eps (2 eps0) must cover the exact value.
    assert exact <= amp.shuffle_epsilon(2 * eps0, N_004, DELTA_004, "stronger_clones")


def test_rr_sum_worst_split_is_all_others_equal():
    # 000 C.1.3's rho_2RR is a max over the other clients' bits; the code evaluates all-zero.
    for n, eps0, alpha in ((40, 2.0, 3.0), (25, 3.0, 2.0), (60, 1.0, 8.0)):
        at_zero = amp.rr_sum_rdp(eps0, n, alpha)
        worst = max(amp.rr_sum_rdp(eps0, n, alpha, k) for k in range(n))
        assert worst <= at_zero * (1 + 1e-9)


def test_clone_delta_tail_truncation_is_conservative():
    for eps in (0.2, 0.5, 1.0):
        full = amp.clone_delta(4.0, 5_000, eps, math.exp(-4.0))
        cut = amp.clone_delta(4.0, 5_000, eps, math.exp(-4.0), tail=1e-12)
        assert full <= cut <= full + 1e-11


def test_shuffle_delta_matches_bisection():
    eps = amp.shuffle_epsilon(2.0, 20_000, 1e-8, "stronger_clones")
    assert amp.shuffle_delta(2.0, 20_000, eps, "stronger_clones") <= 1e-8
    assert amp.shuffle_delta(2.0, 20_000, eps - 2 * amp.EPS_TOL, "stronger_clones") > 1e-8


@pytest.mark.parametrize("analysis", ["clones", "stronger_clones", "closed_form"])
def test_min_batch_size_is_the_threshold(analysis):
    b = amp.min_batch_size(2.0, 0.5, 1e-8, analysis)
    assert amp.shuffle_epsilon(2.0, b, 1e-8, analysis) <= 0.5
    before = b - 1
    if analysis == "closed_form" and not amp.closed_form_valid(2.0, before, 1e-8):
        return
    assert amp.shuffle_epsilon(2.0, before, 1e-8, analysis) > 0.5


@pytest.mark.parametrize("analysis", ["clones", "stronger_clones", "sym_rappor_exact"])
def test_max_local_epsilon_is_the_threshold(analysis):
    e0 = amp.max_local_epsilon(20_000, 0.5, 1e-8, analysis)
    assert amp.shuffle_epsilon(e0, 20_000, 1e-8, analysis) <= 0.5
    assert amp.shuffle_epsilon(e0 + 1e-4, 20_000, 1e-8, analysis) > 0.5


def test_basic_and_advanced_composition():
    assert basic_composition([(0.5, 1e-9), (0.3, 0.0), (1.0, 1e-8)]) == pytest.approx((1.8, 1.1e-8))
    eps, delta = advanced_composition(0.1, 1e-9, 100, 1e-6)
    assert eps == pytest.approx(0.1 * math.sqrt(200 * math.log(1e6)) + 100 * 0.1 * math.expm1(0.1))
    assert delta == pytest.approx(100 * 1e-9 + 1e-6)


def test_zcdp_conversions_match_ibm_cdp2adp():
    # dp-notes Part A.5 reference values (IBM cdp2adp).
    assert cdp_rho(1.0, 1e-6) == pytest.approx(0.024355970359538372, rel=1e-9)
    assert cdp_eps(0.5, 1e-6) == pytest.approx(5.221534444530169, rel=1e-9)
    # The generic RDP conversion over a free order agrees with the zCDP one.
    assert rdp_to_dp(lambda a: a * 0.5, 1e-6) == pytest.approx(5.221534444530169, rel=1e-7)


def test_rdp_composition_beats_basic_for_many_gaussians():
    one = gaussian_rdp(sigma=5.0)
    many = compose_rdp([one], counts=[100])
    assert many(3.0) == pytest.approx(100 * 3.0 / 50)
    eps = rdp_to_dp(many, 1e-6)
    per_step = rdp_to_dp(one, 1e-8)
    assert eps < 100 * per_step
    # Pure eps-DP: the RDP curve is capped by eps itself.
    assert pure_dp_rdp(1.0)(1.5) == pytest.approx(0.75)
    assert pure_dp_rdp(1.0)(10.0) == pytest.approx(1.0)
