"""004 Table 2 sigma, CKS20 discrete Gaussian facts, exact samplers (chi-square), field noise."""

from __future__ import annotations

import math
import random
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from shared.dp import samplers
from shared.dp.aggregator_noise import add_discrete_gaussian, add_noise, decode_signed
from shared.dp.gaussian import (
    analytic_gaussian_sigma,
    discrete_gaussian_delta,
    discrete_gaussian_logpmf,
    discrete_gaussian_normalizer,
    discrete_gaussian_variance,
    gaussian_delta,
)
from shared.vdaf.field import Field64, Field128
from tests.dp.oracles import balle_wang_delta

# 004 §6.1.2 Table 2 rows: (EPSILON, DELTA, std with c = 2 honest aggregators, std (OAOC)).
TABLE_2 = [
    (0.317, 1e-9, 33.0788, 23.3903),
    (0.906, 1e-9, 12.0777, 8.5402),
    (1.528, 1e-9, 7.3403, 5.1904),
]
#: The [AGM] reference code stops its bisection once |delta(sigma) - delta| <= 1e-12.
AGM_ATOL = 1e-12


@pytest.mark.parametrize(("eps", "delta", "std_two", "sigma_pub"), TABLE_2)
def test_004_table_2_discrete_gaussian_sigma(eps, delta, std_two, sigma_pub):
    d = math.sqrt(2)
    sigma = analytic_gaussian_sigma(eps, delta, d)
    # Ours is the exact solution of the Balle-Wang condition (evaluated here with math.erfc):
    # feasible, and 1e-9 relative smaller is not.
    assert balle_wang_delta(sigma, eps, d) <= delta
    assert balle_wang_delta(sigma * (1 - 1e-9), eps, d) > delta
    # The published sigma is the reference's stopping point: within its delta tolerance, and
    # within 2e-5 relative of the exact sigma (23.3907 / 8.5401 / 5.1903 here).
    assert abs(balle_wang_delta(sigma_pub, eps, d) - delta) <= AGM_ATOL
    assert sigma == pytest.approx(sigma_pub, rel=2e-5)
    # c = 2 honest aggregators each adding it: total std sigma sqrt(2).
    assert sigma * math.sqrt(2) == pytest.approx(std_two, rel=3e-5)
    assert sigma_pub * math.sqrt(2) == pytest.approx(std_two, abs=1e-4)


@pytest.mark.parametrize(
    ("eps", "expected"), [(0.317, 1.0016e-9), (0.906, 9.881e-10), (1.528, 9.836e-10)]
)
def test_discrete_histogram_delta_at_published_sigma(eps, expected):
    # dp-notes A.5: the exact delta of the discrete 2-coordinate mechanism at 004's sigma.
    sigma = {r[0]: r[3] for r in TABLE_2}[eps]
    assert discrete_gaussian_delta(sigma**2, eps, [1, -1]) == pytest.approx(expected, rel=5e-4)


@pytest.mark.parametrize(
    ("sigma2", "eps", "dg", "cg"),
    [
        (1, 1, 0.14135133940562192, 0.12693673750664390),
        (4, 0.5, 0.05400722369415441, 0.05244032328766962),
        (100, 0.2, 0.0009399225473451718, 0.0009374459593285839),
        (25, 1, 1.8293360248727757e-08, 1.754633331896146e-08),
    ],
)
def test_cks20_theorem_7_delta_matches_ibm(sigma2, eps, dg, cg):
    assert balle_wang_delta(math.sqrt(sigma2), eps, 1.0) == pytest.approx(cg, rel=1e-9)
    assert discrete_gaussian_delta(sigma2, eps, [1]) == pytest.approx(dg, rel=1e-9)
    assert gaussian_delta(math.sqrt(sigma2), eps, 1.0) == pytest.approx(cg, rel=1e-9)


@pytest.mark.parametrize(
    ("sigma2", "z", "var"),
    [
        (0.25, 1.2713415221890152, 0.21501267508813848),
        (1, 2.506628288042905, 0.9999997887677282),
        (2, 3.5449077018110318, 1.9999999999999978),
        (10, None, 10.0),
        (100, None, 100.0),
    ],
)
def test_discrete_gaussian_normalizer_and_variance(sigma2, z, var):
    if z is not None:
        assert discrete_gaussian_normalizer(sigma2) == pytest.approx(z, rel=1e-13)
    assert discrete_gaussian_variance(sigma2) == pytest.approx(var, rel=1e-12)


def _chi2_pvalue(draws: list[int], support: np.ndarray, pmf: np.ndarray) -> float:
    """Chi-square over the values with expected count >= 5, the rest pooled in one bin."""
    draws_arr = np.asarray(draws)
    n = draws_arr.size
    big = pmf * n >= 5
    observed = [int(np.sum(draws_arr == v)) for v in support[big]]
    observed.append(n - sum(observed))
    expected = list(pmf[big] * n)
    expected.append(n - sum(expected))
    return float(stats.chisquare(observed, expected).pvalue)


def _dg_pmf(sigma2: float) -> tuple[np.ndarray, np.ndarray]:
    x, log_pmf = discrete_gaussian_logpmf(sigma2)
    return x.astype(np.int64), np.exp(log_pmf)


def _dlaplace_pmf(t: float) -> tuple[np.ndarray, np.ndarray]:
    x = np.arange(-60 * int(t) - 60, 60 * int(t) + 61)
    return x, (math.exp(1 / t) - 1) / (math.exp(1 / t) + 1) * np.exp(-np.abs(x) / t)


def test_discrete_gaussian_sampler_chi_square():
    rng = random.Random(20260601).getrandbits
    draws = samplers.discrete_gaussian_vector(Fraction(10), 15_000, rng)
    support, pmf = _dg_pmf(10)
    assert _chi2_pvalue(draws, support, pmf) > 1e-3
    assert np.var(draws) == pytest.approx(discrete_gaussian_variance(10), rel=0.05)
    # Power check: the same draws are rejected against sigma^2 = 12.
    support12, pmf12 = _dg_pmf(12)
    assert _chi2_pvalue(draws, support12, pmf12) < 1e-6


def test_discrete_gaussian_sampler_small_and_fractional_sigma():
    rng = random.Random(7).getrandbits
    draws = samplers.discrete_gaussian_vector(0.25, 8_000, rng)
    support, pmf = _dg_pmf(0.25)
    assert _chi2_pvalue(draws, support, pmf) > 1e-3
    draws = samplers.discrete_gaussian_vector(Fraction(9, 4), 8_000, rng)
    support, pmf = _dg_pmf(2.25)
    assert _chi2_pvalue(draws, support, pmf) > 1e-3


def test_discrete_laplace_sampler_chi_square():
    rng = random.Random(99).getrandbits
    draws = samplers.discrete_laplace_vector(3, 15_000, rng)
    support, pmf = _dlaplace_pmf(3)
    assert _chi2_pvalue(draws, support, pmf) > 1e-3
    q = math.exp(-1 / 3)
    assert np.var(draws) == pytest.approx(2 * q / (1 - q) ** 2, rel=0.06)
    support4, pmf4 = _dlaplace_pmf(4)
    assert _chi2_pvalue(draws, support4, pmf4) < 1e-6


def test_bernoulli_exp_frequency():
    rng = random.Random(3).getrandbits
    for gamma in (Fraction(1, 3), Fraction(5, 2)):
        hits = sum(samplers.bernoulli_exp(gamma, rng) for _ in range(20_000))
        p = math.exp(-float(gamma))
        assert stats.binomtest(hits, 20_000, p).pvalue > 1e-3


def test_uniform_below_rejects_out_of_range_draws():
    calls: list[int] = []
    feed = iter([6, 7, 3])

    def bits(k: int) -> int:
        calls.append(k)
        return next(feed)

    # n = 5 needs 3 bits; 6 and 7 are rejected, 3 accepted.
    assert samplers.uniform_below(5, bits) == 3
    assert calls == [3, 3, 3]
    with pytest.raises(ValueError):
        samplers.uniform_below(0)


def test_default_source_is_secrets():
    # No seed: draws come from `secrets`; just check the range and that it runs.
    x = samplers.discrete_gaussian(Fraction(4))
    assert isinstance(x, int)


@pytest.mark.parametrize("field", [Field64, Field128])
def test_noise_in_the_field_decodes_signed(field):
    rng = np.random.default_rng(5)
    true = [3, 0, 7, 1, 0]
    leader = field.random(len(true), rng)
    helper = field.sub(field.from_ints(true), leader)
    noise_l = [-5, -1, 2, -30, 0]
    noise_h = [1, -2, -20, 4, -1]
    noisy_l = add_noise(field, leader, noise_l)
    noisy_h = add_noise(field, helper, noise_h)
    total = field.to_ints(field.add(noisy_l, noisy_h))
    expected = [t + a + b for t, a, b in zip(true, noise_l, noise_h, strict=True)]
    assert decode_signed(field, total) == expected
    assert decode_signed(field, [field.MODULUS - 1, 0, field.MODULUS // 2]) == [
        -1,
        0,
        field.MODULUS // 2,
    ]
    with pytest.raises(ValueError):
        add_noise(field, leader, [1, 2])


def test_add_discrete_gaussian_is_reproducible_with_a_seeded_source():
    share = Field128.from_ints([10, 20, 30])
    a = add_discrete_gaussian(Field128, share, 4.0, random.Random(1).getrandbits)
    b = add_discrete_gaussian(Field128, share, 4.0, random.Random(1).getrandbits)
    assert Field128.to_ints(a) == Field128.to_ints(b)
    diff = decode_signed(Field128, Field128.to_ints(Field128.sub(a, share)))
    assert all(abs(v) < 40 for v in diff)
