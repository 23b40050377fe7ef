"""VDAF mappings (004 §6.1), the DP policy's trust models (004 §3.3, §5), the CLI functions."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from deploy import warmup
from deploy.demo.new_words import sfp_randomizer
from shared.dp import api
from shared.dp import vdaf_mapping as vm
from shared.dp.aggregator_noise import vdaf_shifts
from shared.dp.policy import (
    DpPolicy,
    TrustModel,
    aggregator_randomization,
    client_randomization,
)
from shared.dp.randomizers.bitpushing import BitPushing, weighted_probabilities
from shared.dp.randomizers.cms import CountMeanSketch, HadamardCountMeanSketch, item_keys
from shared.dp.randomizers.onehot import asymmetric_one_hot, symmetric_rappor
from shared.dp.randomizers.sfp import SequenceFragmentPuzzle
from shared.vdaf.spec import VdafSpec
from tests.dp import oracles


@pytest.mark.parametrize(("d", "eps0"), [(1000, 5.0), (1000, 6.5), (1000, 7.0), (64, 1.0)])
def test_multihot_bound_matches_004_poc_formula(d, eps0):
    # 004's proof-of-concept: m = round(binom.isf(p_fp, d-1, q)) + 1.
    q = 1 / (math.exp(eps0) + 1)
    expected = round(stats.binom.isf(vm.DEFAULT_P_FAIL, d - 1, q)) + 1
    spec = vm.one_hot_spec(symmetric_rappor(eps0, d))
    assert spec.type == "Prio3MultiHotHistogram"
    m = spec.max_count
    assert m is not None
    assert m == min(expected, d)
    # Honest clients exceed the bound with probability <= p_fail, and m - 1 would not do.
    assert stats.binom.sf(m - 1, d - 1, q) <= vm.DEFAULT_P_FAIL
    assert stats.binom.sf(m - 2, d - 1, q) > vm.DEFAULT_P_FAIL


def test_one_hot_reports_encode_into_their_vdaf():
    rng = np.random.default_rng(1)
    for rand in (symmetric_rappor(3.0, 40), asymmetric_one_hot(3.0, 40)):
        spec = vm.one_hot_spec(rand, p_fail=1e-6)
        vdaf = spec.instance()
        reports = rand.randomize(rng.integers(0, 40, 50), rng)
        for meas in vm.encode_one_hot(reports):
            assert len(vdaf.valid.encode(meas)) == vdaf.flp.MEAS_LEN
        size = vm.report_size(spec)
        assert size.leader_input_share == vdaf.input_share_len(0)
        assert size.total > size.leader_input_share


def test_plain_histogram_spec_and_size():
    spec = vm.histogram_spec(100)
    assert spec.describe() == "Prio3Histogram(length=100, chunk_length=10)"
    assert vm.report_size(spec).helper_input_share == spec.instance().input_share_len(1)


def test_cms_round_trip_through_the_aggregate():
    rng = np.random.default_rng(2)
    cms = CountMeanSketch(3.0, 4, 16)
    keys = item_keys(rng.integers(0, 30, 300))
    reports = cms.randomize(keys, rng)
    measurements = vm.encode_cms(cms, reports)
    spec = vm.cms_spec(cms, p_fail=1e-9)
    vdaf = spec.instance()
    for meas in measurements[:20]:
        vdaf.valid.encode(meas)
    aggregate = np.sum(measurements, axis=0)
    assert np.allclose(vm.cms_sketch_from_aggregate(cms, aggregate), cms.sketch(reports))


def test_hcms_and_bit_pushing_round_trip():
    rng = np.random.default_rng(3)
    hcms = HadamardCountMeanSketch(3.0, 4, 16)
    reports = hcms.randomize(item_keys(rng.integers(0, 30, 500)), rng)
    idx = vm.encode_hcms(hcms, reports)
    spec = vm.hcms_spec(hcms)
    assert spec.length == 2 * 4 * 16
    agg = np.bincount(idx, minlength=spec.length)
    assert np.allclose(vm.hcms_sketch_from_aggregate(hcms, agg), hcms.sketch(reports))

    bp = BitPushing(12, eps=1.0)
    reports_b = bp.randomize(rng.integers(0, 4096, 500), weighted_probabilities(12, 0.5), rng)
    idx_b = vm.encode_bit_pushing(reports_b)
    spec_b = vm.bit_pushing_spec(bp)
    tallies = vm.bit_tallies_from_aggregate(bp, np.bincount(idx_b, minlength=2 * 12))
    assert spec_b.length == 2 * 12
    direct = bp.tally(reports_b)
    assert np.array_equal(tallies.reports, direct.reports)
    assert np.array_equal(tallies.ones, direct.ones)


def test_policy_guarantees_per_trust_model():
    policy = DpPolicy(
        client_randomization(5.0, 0.317, 1e-9, "sym_rappor_rdp"),
        aggregator_randomization(0.317, 1e-9),
    )
    oc = policy.guarantee(TrustModel.OC)
    assert oc is not None and oc.eps == 10.0  # per-bit 5.0 is 10.0 under replacement
    oamc = policy.guarantee(TrustModel.OAMC)
    assert oamc is not None and oamc.eps <= 0.317
    assert policy.client is not None and policy.client.min_batch <= 100_000
    oaoc = policy.guarantee(TrustModel.OAOC)
    assert oaoc is not None and oaoc.basis == "aggregator noise"
    # The discrete mechanism at the continuous AGM sigma: dp-notes' 1.0016e-9 order.
    assert oaoc.delta == pytest.approx(1.0e-9, rel=2e-3)
    assert policy.aggregator is not None
    assert policy.aggregator.total_std(2) == pytest.approx(33.0788, rel=5e-5)

    client_only = DpPolicy(client=client_randomization(2.0, 1.0, 1e-8))
    only = client_only.guarantee(TrustModel.OAOC)
    assert only is not None and only.eps == 2.0
    assert DpPolicy().guarantee(TrustModel.OAMC) is None


def test_cli_functions_return_numbers():
    res = api.amplification(4.0, 10_000, 1e-10)
    assert round(res.eps, 2) == 0.61 and res.closed_form is None
    res_cf = api.amplification(1.0, 100_000, 1e-6, "clones")
    assert res_cf.closed_form is not None and res_cf.eps <= res_cf.closed_form
    b = api.batch_size(3.0, 1.0, 1e-6)
    # The threshold of the stronger-clone pair, enumerated outcome by outcome.
    p_clone = 2 / (math.exp(3.0) + 1)
    assert oracles.clone_pair_delta(3.0, b, 1.0, p_clone) <= 1e-6
    assert oracles.clone_pair_delta(3.0, b - 1, 1.0, p_clone) > 1e-6
    e0 = api.max_eps0(b, 1.0, 1e-6)
    assert 3.0 <= e0 < 3.01
    assert api.sampling(0.61, 1e-10, 0.02)[0] < 0.02
    g = api.gaussian_sigma(0.906, 1e-9, honest_aggregators=2)
    assert g.sigma == pytest.approx(8.5402, rel=2e-5)
    assert g.total_std == pytest.approx(12.0777, rel=3e-5)
    assert g.discrete_delta == pytest.approx(9.88e-10, rel=1e-3)
    assert api.gaussian_sigma(1.0, 1e-6, sensitivity=3.0).discrete_delta is None


def _sfp(length: int = 6) -> SequenceFragmentPuzzle:
    return SequenceFragmentPuzzle(
        "abcdefgh ",
        word_sketch=CountMeanSketch(3.0, 4, 16, seed=1),
        fragment_sketch=CountMeanSketch(5.0, 3, 8, seed=2),
        length=length,
    )


def test_sfp_round_trip_through_the_aggregate():
    """Word block then the position-major fragment block; the sum decodes to the sketches the
    reports themselves give, per position, with each position's report count."""
    rng = np.random.default_rng(4)
    sfp = _sfp()
    words = ["".join(rng.choice(list("abcdefgh"), rng.integers(1, 7))) for _ in range(400)]
    reports = sfp.randomize(words, rng)
    measurements = vm.encode_sfp_array(sfp, reports)
    assert measurements.shape == (400, vm.sfp_length(sfp)) == (400, 4 * 16 + 4 + 3 * (3 * 8 + 3))
    # Exactly one word row indicator and one fragment row indicator (in its position) each.
    assert (measurements[:, 64:68].sum(axis=1) == 1).all()
    frag_rows = measurements[:, 68 + 3 * 24 :].reshape(400, 3, 3)
    assert (frag_rows.sum(axis=(1, 2)) == 1).all()
    assert (frag_rows.sum(axis=2).argmax(axis=1) == reports.position).all()
    spec = vm.sfp_spec(sfp, p_fail=1e-9)
    vdaf = spec.instance()
    for meas in vm.encode_sfp(sfp, reports)[:20]:
        vdaf.valid.encode(meas)
    decoded = vm.sfp_sketches_from_aggregate(sfp, measurements.sum(axis=0))
    direct = sfp.sketches(reports)
    assert decoded.n == direct.n == 400
    assert np.allclose(decoded.word, direct.word)
    for (a, na), (b, nb) in zip(decoded.fragments, direct.fragments, strict=True):
        assert na == nb and np.allclose(a, b)
    assert sum(n for _, n in decoded.fragments) == 400
    with pytest.raises(ValueError, match="coordinates"):
        vm.sfp_sketches_from_aggregate(sfp, measurements.sum(axis=0)[:-1])


def test_sfp_weight_bound_is_the_convolved_tail_and_binds_a_cheater():
    sfp = _sfp()
    rng = np.random.default_rng(5)
    reports = sfp.randomize(["abc"] * 20_000, rng)
    weights = vm.encode_sfp_array(sfp, reports).sum(axis=1)
    p_fail = 0.01
    bound = vm.sfp_max_count(sfp, p_fail)
    # Smallest w with P(W > w) <= p_fail: the empirical tail agrees within sampling error.
    assert np.mean(weights > bound) <= p_fail + 0.003
    assert np.mean(weights > bound - 1) > p_fail - 0.003
    spec = vm.sfp_spec(sfp)
    assert spec.type == "Prio3MultiHotHistogram" and spec.length == vm.sfp_length(sfp)
    assert spec.max_count is not None and weights.max() <= spec.max_count
    cheat = [1] * (spec.max_count + 1) + [0] * (spec.length - spec.max_count - 1)
    with pytest.raises(ValueError):
        spec.instance().valid.encode(cheat)


def _full_convolution_bound(sfp: SequenceFragmentPuzzle, p_fail: float) -> int:
    """The smallest w with P(W > w) <= p_fail, W the report's weight: the word and fragment
    sketch rows' weights (1 for the row indicator, plus Bin(m-1, flip) + Bern(1 - flip))
    convolved over their full supports."""

    def pmf(cms: CountMeanSketch) -> np.ndarray:
        b = stats.binom.pmf(np.arange(cms.m), cms.m - 1, cms.flip_probability)
        out = np.zeros(cms.m + 2)
        out[2:] += (1 - cms.flip_probability) * b
        out[1:-1] += cms.flip_probability * b
        return out

    full = np.convolve(pmf(sfp.word_sketch), pmf(sfp.fragment_sketch))
    at_least = np.append(full[::-1].cumsum()[::-1], 0.0)  # P(W >= i)
    return next(w for w in range(1, full.size) if at_least[w + 1] <= p_fail)


def test_sfp_weight_bound_on_trimmed_supports_matches_the_full_convolution():
    """The bound convolves only the pmfs' non-negligible supports: the same answer as the
    full convolution, and fast for m = 65536 (a recipe may ask for it)."""
    for word, frag in [((1.0, 300), (6.0, 50)), ((8.0, 64), (0.5, 512))]:
        sfp = SequenceFragmentPuzzle(
            "ab",
            CountMeanSketch(word[0], 2, word[1]),
            CountMeanSketch(frag[0], 2, frag[1]),
            2,
            1,
            "a",
        )
        for p_fail in (1e-3, 1e-9, vm.DEFAULT_P_FAIL):
            assert vm.sfp_max_count(sfp, p_fail) == _full_convolution_bound(sfp, p_fail)
    huge = SequenceFragmentPuzzle(
        "ab", CountMeanSketch(1.0, 1, 65536), CountMeanSketch(1.0, 1, 65536), 1, 1, "a"
    )
    assert 2 * 65536 * 0.37 < vm.sfp_max_count(huge) < 2 * 65536 * 0.4


def test_sfp_lengths_stated_in_the_docstring():
    deployed = SequenceFragmentPuzzle(
        "abcdefghijklmnopqrstuvwxyz ",
        CountMeanSketch(2.0, 2048, 1024),
        CountMeanSketch(6.0, 2048, 1024),
        length=10,
    )
    assert vm.sfp_length(deployed) == 6 * (2048 * 1024 + 2048) == 12_595_200
    assert vm.sfp_max_count(deployed) == 442 == _full_convolution_bound(deployed, vm.DEFAULT_P_FAIL)
    # The demo's own parameters (deploy.demo.new_words), whatever its seed.
    puzzle = sfp_randomizer(7).puzzle()
    spec = vm.sfp_spec(puzzle)
    assert (spec.length, spec.max_count, vm.report_size(spec).total) == (2624, 46, 45_840)
    assert spec.max_count == _full_convolution_bound(puzzle, vm.DEFAULT_P_FAIL)


def test_vdaf_20_specs_are_the_vdaf_08_shapes_under_their_new_names():
    # VDAF-20 §7.4.5: MultihotCountVec(length, max_weight) is VDAF-08's MultiHotHistogram
    # (length, max_count); Histogram keeps its parameters. Same bound, same chunking.
    rand = symmetric_rappor(3.0, 40)
    old, new = vm.one_hot_spec(rand), vm.one_hot_spec(rand, draft="VDAF-20")
    assert (new.version, new.type) == ("VDAF-20", "Prio3MultihotCountVec")
    assert (new.length, new.max_weight, new.chunk_length) == (
        old.length,
        old.max_count,
        old.chunk_length,
    )
    assert new.instance().flp.MEAS_LEN == old.instance().flp.MEAS_LEN
    bp = vm.bit_pushing_spec(BitPushing(4, 1.0), "VDAF-20")
    assert bp.describe() == "Prio3Histogram(length=8, chunk_length=2) [VDAF-20]"
    cms = CountMeanSketch(2.0, 4, 8, 7)
    assert vm.cms_spec(cms, draft="VDAF-20").max_weight == vm.cms_spec(cms).max_count
    reports = rand.randomize(np.random.default_rng(2).integers(0, 40, 20), np.random.default_rng(3))
    vdaf = new.instance()
    for meas in vm.encode_one_hot(reports):
        assert len(vdaf.valid.encode(meas)) == vdaf.flp.MEAS_LEN


@pytest.mark.parametrize(
    ("vdaf", "shifts"),
    [
        ({"type": "Prio3Sum", "bits": 3}, (7,)),
        ({"version": "VDAF-20", "type": "Prio3Sum", "max_measurement": 100}, (100,)),
        (
            {
                "version": "VDAF-20",
                "type": "Prio3SumVec",
                "length": 2,
                "max_measurement": 9,
                "chunk_length": 1,
            },
            (9, 9),
        ),
        (
            {
                "version": "VDAF-20",
                "type": "Prio3MultihotCountVec",
                "length": 10,
                "max_weight": 3,
                "chunk_length": 3,
            },
            (1,) * 6,
        ),
        ({"version": "VDAF-20", "type": "Prio3Histogram", "length": 4, "chunk_length": 2}, (1, -1)),
    ],
)
def test_sensitivity_shifts_of_both_drafts(vdaf, shifts):
    # The largest valid change of one report: the bound by hand, 2^bits - 1 or max_measurement
    # per coordinate, 2 x the weight bound of moved ones, one bucket moved for a histogram.
    assert vdaf_shifts(VdafSpec.model_validate(vdaf)) == shifts


def test_warm_up_runs_every_vdaf_20_circuit():
    drafts = {(spec.draft, spec.type) for spec in warmup.SPECS}
    assert {t for d, t in drafts if d == "VDAF-20"} == {
        "Prio3Count",
        "Prio3Sum",
        "Prio3Histogram",
        "Prio3SumVec",
        "Prio3MultihotCountVec",
    }
    for spec in warmup.SPECS:
        if spec.draft == "VDAF-20":
            warmup.warm(spec)  # raises unless unshard gives a result
