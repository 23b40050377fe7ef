"""Randomizers: unbiasedness and stated variance by seeded simulation on Zipf data."""

from __future__ import annotations

import math
import random
from collections.abc import Callable

import numpy as np
import pytest
from scipy import stats

from shared.dap.task import AggregatorNoise
from shared.dp import vdaf_mapping as vm
from shared.dp.estimators import Estimate, one_sided_z, z_value
from shared.dp.randomizers.bitpushing import (
    BitPushing,
    adaptive_mean,
    adaptive_probabilities,
    centred_squares,
    weighted_mean,
    weighted_probabilities,
)
from shared.dp.randomizers.cms import (
    CountMeanSketch,
    HadamardCountMeanSketch,
    HashFamily,
    fwht,
    item_keys,
)
from shared.dp.randomizers.noise import GaussianVector, LaplaceVector
from shared.dp.randomizers.onehot import OneHotRandomizer, asymmetric_one_hot, symmetric_rappor
from shared.dp.samplers import discrete_gaussian_vector, discrete_laplace_vector


def zipf_items(rng: np.random.Generator, universe: int, n: int, s: float = 1.1) -> np.ndarray:
    p = 1 / np.arange(1, universe + 1) ** s
    return rng.choice(universe, size=n, p=p / p.sum())


def check_standardised(z: np.ndarray, var_tol: float = 0.15) -> None:
    """Standardised errors: mean 0 (within 4 standard errors), variance 1, 95% coverage."""
    z = z.ravel()
    assert abs(z.mean()) < 4 / math.sqrt(z.size)
    assert abs(z.var() - 1) < var_tol
    covered = int(np.sum(np.abs(z) <= 1.959964))
    assert stats.binomtest(covered, z.size, 0.95).pvalue > 1e-4


@pytest.mark.parametrize("make", [asymmetric_one_hot, symmetric_rappor])
def test_one_hot_unbiased_with_stated_variance(make):
    rng = np.random.default_rng(11)
    universe, n = 100, 5_000
    items = zipf_items(rng, universe, n)
    f = np.bincount(items, minlength=universe)
    rand = make(2.0, universe)
    z = []
    for _ in range(20):
        reports = rand.randomize(items, rng)
        assert reports.shape == (n, universe)
        est = rand.debias(reports.sum(axis=0), n)
        z.append((est - f) / np.sqrt(rand.variance(n, f)))
    check_standardised(np.array(z))


def test_one_hot_matches_000_and_004_formulas():
    e = math.exp(3.0)
    asym = asymmetric_one_hot(3.0, 10)
    # 000 appendix A: Var = n 4 e/(e-1)^2 + f; offset 2n/(e-1).
    assert asym.variance(1000, 7.0) == pytest.approx(1000 * 4 * e / (e - 1) ** 2 + 7)
    assert asym.debias(np.array([0.0]), 1000)[0] == pytest.approx(-2 * 1000 / (e - 1))
    # 004 Table 1 standard deviations of symmetric RAPPOR at n = 1e5: 26.13364, 12.27999,
    # 9.55798 here; the draft's 26.1337 is 6e-5 above (one unit in its last place).
    for eps0, std in ((5.0, 26.1337), (6.5, 12.2800), (7.0, 9.5580)):
        rappor = symmetric_rappor(eps0, 10)
        assert math.sqrt(rappor.variance(100_000)) == pytest.approx(std, abs=1e-4)
        assert rappor.replacement_eps == 2 * eps0


def simulate_sums(
    rand: OneHotRandomizer, true_counts: np.ndarray, rng: np.random.Generator
) -> np.ndarray:
    """Report sums drawn directly: Bin(f, p_true) + Bin(n - f, p_false) per bucket."""
    n = int(true_counts.sum())
    return rng.binomial(true_counts, rand.p_true) + rng.binomial(n - true_counts, rand.p_false)


def test_one_hot_simulated_sums_match_report_sums_in_distribution():
    rng = np.random.default_rng(3)
    rand = symmetric_rappor(1.0, 5)
    f = np.array([400, 300, 200, 100, 0])
    items = np.repeat(np.arange(5), f)
    direct = np.array([rand.randomize(items, rng).sum(axis=0) for _ in range(300)])
    simulated = np.array([simulate_sums(rand, f, rng) for _ in range(300)])
    for col in range(5):
        assert stats.ks_2samp(direct[:, col], simulated[:, col]).pvalue > 1e-3


def test_one_hot_estimate_thresholding():
    rng = np.random.default_rng(5)
    rand = symmetric_rappor(2.0, 50)
    f = np.zeros(50, dtype=np.int64)
    f[:3] = [5_000, 3_000, 2_000]
    f[3:] = 20
    est = rand.estimate(simulate_sums(rand, f, rng), int(f.sum()))
    kept = est.thresholded(level=0.999).value
    assert np.all(kept[:3] > 0)
    # Counts of 20 are far below the noise (sd ~ 110): nearly all are zeroed.
    assert np.count_nonzero(kept[3:]) <= 2


def test_normal_quantiles_match_tables_and_scipy():
    # Published values (Abramowitz and Stegun 26.2): the 95% two-sided and one-sided z.
    assert z_value(0.95) == pytest.approx(1.959963984540054, rel=1e-15)
    assert one_sided_z(0.95) == pytest.approx(1.6448536269514722, rel=1e-15)
    levels = [1e-12, 1e-6, 0.01, 0.3, 0.5, 0.77, 0.999, 1 - 1e-9]
    for level in levels:
        assert one_sided_z(level) == pytest.approx(stats.norm.ppf(level), rel=1e-12, abs=1e-15)
    for bad in (0.0, 1.0, -0.5, 1.5):
        with pytest.raises(ValueError, match="confidence level"):
            one_sided_z(bad)
        with pytest.raises(ValueError, match="confidence level"):
            z_value(bad)


@pytest.mark.parametrize("cls", [CountMeanSketch, HadamardCountMeanSketch])
@pytest.mark.parametrize("eps", [1.0, 4.0])
def test_sketches_unbiased_with_stated_variance(cls, eps):
    """The variance formula averages over the hash family, so each repetition draws one."""
    rng = np.random.default_rng(int(eps * 10) + (cls is CountMeanSketch))
    universe, n = 200, 10_000
    items = zipf_items(rng, universe, n)
    f = np.bincount(items, minlength=universe)
    keys = item_keys(range(universe))
    z = []
    for rep in range(25):
        sk = cls(eps, 16, 128, seed=rep)
        est = sk.estimate_counts(sk.sketch(sk.randomize(keys[items], rng)), n, keys)
        z.append((est - f) / np.sqrt(sk.variance(n, f)))
    check_standardised(np.array(z))


def test_cms_client_flip_rates():
    rng = np.random.default_rng(8)
    cms = CountMeanSketch(2.0, 8, 64)
    keys = item_keys(["a"] * 4_000)
    rep = cms.randomize(keys, rng)
    true_bucket = cms.family.bucket_of(rep.j, keys)
    at_true = rep.signs[np.arange(keys.size), true_bucket]
    flips = int(np.sum(at_true == -1))
    assert stats.binomtest(flips, keys.size, cms.flip_probability).pvalue > 1e-3
    others = int(np.sum(rep.signs == 1)) - int(np.sum(at_true == 1))
    trials = keys.size * (cms.m - 1)
    assert stats.binomtest(others, trials, cms.flip_probability).pvalue > 1e-3
    assert cms.report_bits == 3 + 64


def test_hcms_matches_hadamard_definition_and_is_one_bit():
    h = fwht(np.eye(8))
    sylvester = np.array([[(-1) ** bin(i & j).count("1") for j in range(8)] for i in range(8)])
    assert np.array_equal(h, sylvester)
    with pytest.raises(ValueError):
        HadamardCountMeanSketch(1.0, 4, 24)
    assert HadamardCountMeanSketch(4.0, 1024, 32768).report_bits == 1 + 10 + 15


def test_hash_family_is_deterministic_and_spread():
    fam = HashFamily(4, 16, seed=1)
    keys = item_keys(range(2_000))
    b = fam.buckets(keys)
    assert np.array_equal(b, HashFamily(4, 16, seed=1).buckets(keys))
    assert not np.array_equal(b, HashFamily(4, 16, seed=2).buckets(keys))
    assert np.array_equal(fam.bucket_of(np.full(keys.size, 2), keys), b[2])
    counts = np.bincount(b[0], minlength=16)
    assert stats.chisquare(counts).pvalue > 1e-3


def _lognormal_values(rng: np.random.Generator, n: int, bits: int) -> np.ndarray:
    return np.clip(rng.lognormal(6.0, 0.8, n), 0, 2**bits - 1).astype(np.int64)


@pytest.mark.parametrize(("alpha", "eps"), [(0.5, None), (1.0, None), (1.0, 2.0), (0.5, 1.0)])
def test_weighted_bit_pushing_unbiased_with_stated_variance(alpha, eps):
    rng = np.random.default_rng(21)
    z = []
    for _ in range(60):
        x = _lognormal_values(rng, 5_000, 14)
        est = weighted_mean(x, 14, rng, alpha=alpha, eps=eps)
        z.append((est.value[0] - x.mean()) / est.stderr[0])
    check_standardised(np.array(z), var_tol=0.4)


def test_adaptive_bit_pushing_beats_weighted_on_loose_bounds():
    # 003 §4: with a loose bit depth, adaptive bit pushing discards the vacuous high bits.
    rng = np.random.default_rng(4)
    bits = 16
    err_w, err_a = [], []
    for _ in range(20):
        x = _lognormal_values(rng, 20_000, 12)
        err_w.append(weighted_mean(x, bits, rng, alpha=1.0).value[0] - x.mean())
        err_a.append(adaptive_mean(x, bits, rng).value[0] - x.mean())
    rmse_w, rmse_a = np.sqrt(np.mean(np.square(err_w))), np.sqrt(np.mean(np.square(err_a)))
    assert rmse_a < rmse_w / 3
    assert abs(np.mean(err_a)) < 3 * rmse_a / math.sqrt(20)


def test_bit_squashing_under_dp():
    # 003 §5: with DP noise on vacuous high bits, squashing at 1 noise sd cuts the error a lot
    # (about 5x on these seeds; 003 reports up to two orders of magnitude on its data).
    rng = np.random.default_rng(9)
    bits = 16
    plain, squashed = [], []
    for _ in range(20):
        x = _lognormal_values(rng, 20_000, 12)
        plain.append(adaptive_mean(x, bits, rng, eps=2.0).value[0] - x.mean())
        squashed.append(adaptive_mean(x, bits, rng, eps=2.0, squash=1.0).value[0] - x.mean())
    assert np.sqrt(np.mean(np.square(squashed))) < np.sqrt(np.mean(np.square(plain))) / 3


def test_bit_pushing_variance_estimate():
    rng = np.random.default_rng(12)
    x = _lognormal_values(rng, 40_000, 12)
    centre = weighted_mean(x[:10_000], 12, rng).value[0]
    sq = centred_squares(x[10_000:], centre, rng)
    est = adaptive_mean(sq, 24, rng)
    target = np.mean((x[10_000:] - centre) ** 2)
    assert abs(est.value[0] - target) < 4 * est.stderr[0]
    assert abs(est.value[0] - x.var()) / x.var() < 0.1


def test_bit_pushing_probabilities_and_debiasing():
    assert weighted_probabilities(3, 1.0) == pytest.approx([1 / 7, 2 / 7, 4 / 7])
    p = adaptive_probabilities(np.array([0.5, 0.0, 0.5]))
    assert p == pytest.approx([1 / 5, 0, 4 / 5])
    assert adaptive_probabilities(np.zeros(3)) == pytest.approx(weighted_probabilities(3, 1.0))
    bp = BitPushing(4, eps=1.0)
    with pytest.raises(ValueError):
        bp.randomize([16], weighted_probabilities(4, 1.0), np.random.default_rng(0))


@pytest.mark.parametrize(
    "mech", [LaplaceVector(1.0, 2.0), GaussianVector.calibrated(1.0, 1e-6, 1.0)]
)
def test_noise_vectors_have_stated_variance(mech):
    rng = np.random.default_rng(2)
    x = np.zeros((500, 1_000))
    noisy_sum = mech.randomize(x, rng).sum(axis=0)
    est: Estimate = mech.estimate_sum(noisy_sum, 500)
    check_standardised(est.value / est.stderr, var_tol=0.2)


def test_bit_pushing_sparse_bits_have_honest_standard_errors() -> None:
    """A bit with a handful of reports (a low bit under p_j ~ 2^j) gets a standard error that
    covers its truth: the raw plug-in m (1 - m) is 0 when noise pushes the mean to 0 or 1."""
    bp = BitPushing(10, 3.0)
    p = weighted_probabilities(10, 1.0)
    rng = np.random.default_rng(17)
    x = rng.integers(0, 1024, 450)
    truth = np.array([((x >> j) & 1).mean() for j in range(10)])
    z = 1.96
    covered = total = 0
    for _ in range(400):
        tallies = bp.tally(bp.randomize(x, p, rng))
        means = bp.bit_means(tallies)
        se = np.sqrt(bp.bit_variances(tallies, means))
        sparse = (tallies.reports > 0) & (tallies.reports <= 6)
        covered += int(np.sum((np.abs(means - truth) <= z * se) & sparse))
        total += int(np.sum(sparse))
    assert total > 300
    assert covered / total >= 0.93, covered / total


def _sketch_aggregate(sk: CountMeanSketch | HadamardCountMeanSketch, keys, rng) -> np.ndarray:
    """The VDAF aggregate of one batch of reports (`shared.dp.vdaf_mapping` encodings, summed)."""
    if isinstance(sk, CountMeanSketch):
        rep = sk.randomize(keys, rng)
        ones = np.zeros((sk.k, sk.m), dtype=np.int64)
        np.add.at(ones, rep.j, (rep.signs.astype(np.int64) + 1) // 2)
        return np.concatenate([ones.ravel(), np.bincount(rep.j, minlength=sk.k)])
    index = vm.encode_hcms(sk, sk.randomize(keys, rng))
    return np.bincount(index, minlength=2 * sk.k * sk.m)


@pytest.mark.parametrize(
    ("cls", "noise"),
    [
        (CountMeanSketch, {"mechanism": "discrete_gaussian", "sigma": "16"}),
        (CountMeanSketch, {"mechanism": "discrete_laplace", "scale": "12"}),
        (HadamardCountMeanSketch, {"mechanism": "discrete_gaussian", "sigma": "3"}),
    ],
)
def test_sketches_with_aggregator_noise_keep_their_coverage(cls, noise):
    """Both aggregators add their noise to every aggregate coordinate (004 §5); the estimates'
    variance is the randomizer's plus `cms_noise_variance` / `hcms_noise_variance` of the
    summed noise, and the 95% intervals cover at that rate with the true variance (as above),
    at least at that rate with the plug-in standard errors the collector states."""
    setting = AggregatorNoise.model_validate(noise)
    coordinate_var = 2 * setting.variance  # two aggregators
    rng = np.random.default_rng(21 if cls is CountMeanSketch else 22)
    draws = random.Random(f"{cls.__name__}-{noise['mechanism']}").getrandbits
    universe, n = 200, 10_000
    items = zipf_items(rng, universe, n)
    f = np.bincount(items, minlength=universe)
    keys = item_keys(range(universe))
    z, covered = [], 0
    for rep in range(25):
        sk = cls(2.0, 8, 64, seed=rep)
        agg = _sketch_aggregate(sk, keys[items], rng)
        total = np.zeros(agg.size, dtype=np.int64)
        for _ in range(2):
            if setting.mechanism == "discrete_gaussian":
                total += discrete_gaussian_vector(setting.parameter, agg.size, draws)
            else:
                total += discrete_laplace_vector(setting.parameter, agg.size, draws)
        if isinstance(sk, CountMeanSketch):
            sketch = vm.cms_sketch_from_aggregate(sk, agg + total)
            added = vm.cms_noise_variance(sk, coordinate_var)
        else:
            sketch = vm.hcms_sketch_from_aggregate(sk, agg + total)
            added = vm.hcms_noise_variance(sk, coordinate_var)
        randomizer_var = sk.variance(n, f)
        # The noise is a good part of the error, so leaving it out would fail the check.
        assert 0.3 < added / (randomizer_var.mean() + added) < 0.7
        est = sk.estimate_counts(sketch, n, keys)
        z.append((est - f) / np.sqrt(randomizer_var + added))
        covered += int(np.sum(sk.estimate(sketch, n, keys).plus_variance(added).covers(f)))
    check_standardised(np.array(z))
    # The plug-in collision term sums squared estimates, which the noise inflates: conservative,
    # so the plug-in intervals cover at least at the stated rate.
    assert stats.binomtest(covered, 25 * universe, 0.95, alternative="less").pvalue > 1e-4


def test_sketch_noise_variance_is_the_sum_of_squared_coefficients():
    """The estimates are linear in the aggregate: unit noise on coordinate i moves estimate d by
    its coefficient, so the added variance is the sum of the squared coefficients."""
    keys = item_keys(["7", "word", "42"])

    def added(decode: Callable[[np.ndarray], np.ndarray], length: int, want: float) -> None:
        base = decode(np.zeros(length))
        coef = np.array([decode(e) - base for e in np.eye(length)])
        np.testing.assert_allclose(3.0 * (coef**2).sum(axis=0), want, rtol=1e-12)

    cms = CountMeanSketch(1.5, 4, 16, seed=3)
    added(
        lambda a: cms.estimate_counts(vm.cms_sketch_from_aggregate(cms, a), 0, keys),
        cms.k * cms.m + cms.k,
        vm.cms_noise_variance(cms, 3.0),
    )
    hcms = HadamardCountMeanSketch(3.0, 4, 16, seed=9)
    added(
        lambda a: hcms.estimate_counts(vm.hcms_sketch_from_aggregate(hcms, a), 0, keys),
        2 * hcms.k * hcms.m,
        vm.hcms_noise_variance(hcms, 3.0),
    )


def test_bit_pushing_with_aggregator_noise_keeps_its_coverage():
    """Both aggregators noise each (bit, value) tally of the Prio3Histogram(2 b) aggregate; the
    mean's stated standard error, with `aggregate_noise_variances` added, still standardises
    its error (and without the noise term it would be far too small)."""
    rng = np.random.default_rng(41)
    draws = random.Random("bit-pushing-noise").getrandbits
    setting = AggregatorNoise(mechanism="discrete_gaussian", sigma="15")
    coordinate_var = 2 * setting.variance
    bits, n = 10, 4_000
    bp = BitPushing(bits, 2.0)
    z, share = [], []
    for _ in range(80):
        x = _lognormal_values(rng, n, bits)
        reports = bp.randomize(x, weighted_probabilities(bits, 0.5), rng)
        agg = np.bincount(vm.encode_bit_pushing(reports), minlength=2 * bits)
        noise = np.zeros(agg.size, dtype=np.int64)
        for _ in range(2):
            noise += discrete_gaussian_vector(setting.parameter, agg.size, draws)
        tallies = vm.bit_tallies_from_aggregate(bp, agg + noise)
        est = bp.mean(tallies, noise_variance=coordinate_var)
        z.append((est.value[0] - x.mean()) / est.stderr[0])
        scale = np.exp2(2 * np.arange(bits))
        added = float(np.dot(scale, bp.aggregate_noise_variances(tallies, coordinate_var)))
        share.append(added / est.stderr[0] ** 2)
    assert 0.3 < float(np.mean(share)) < 0.8
    check_standardised(np.array(z), var_tol=0.3)
