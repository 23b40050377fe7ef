"""Collection analysis on simulated data: CI coverage, thresholding, privacy statement, writers.

Reports are drawn with `shared.dp`'s batch randomizers from a known Zipf distribution, mapped to
their VDAF measurements (`shared.dp.vdaf_mapping`) and summed, which is what Prio3 unshard gives
the collector (VDAF-08 §7.2); the analysis must then recover the truth at the stated rates.
"""

from __future__ import annotations

import csv
import io
import json
import math
import random
from collections import Counter
from fractions import Fraction
from typing import Any

import numpy as np
import pytest
from scipy import special, stats

from client_sdk.query import _ngrams, encode_record, randomize_indices
from services.collector.analysis import (
    PLAIN_TASK_DELTA,
    Analysis,
    AnalysisError,
    Collection,
    analyze,
    collection_from_body,
    item_labels,
    privacy_statement,
    to_csv,
    to_json,
    to_table,
)
from shared.dap.ids import TaskId
from shared.dap.task import AggregatorNoise, CollectorTask
from shared.dp import amplification as amp
from shared.dp.aggregator_noise import noise_guarantee
from shared.dp.gaussian import (
    discrete_gaussian_delta,
    discrete_gaussian_epsilon,
    gaussian_epsilon,
)
from shared.dp.policy import ClientRandomization, DpPolicy, TrustModel
from shared.dp.randomizers.bitpushing import BitPushing, weighted_probabilities
from shared.dp.randomizers.cms import CountMeanSketch, HadamardCountMeanSketch, item_keys
from shared.dp.randomizers.onehot import OneHotRandomizer as DpOneHot
from shared.dp.samplers import discrete_gaussian_vector
from shared.dp.vdaf_mapping import (
    bit_tallies_from_aggregate,
    cms_noise_variance,
    encode_bit_pushing,
    encode_cms,
    encode_hcms,
    encode_one_hot,
    hcms_noise_variance,
)
from shared.recipe.accounting import (
    DUMMY_DELTA_SHARE,
    aggregate_guarantee,
    analysis_epsilon,
    assess_privacy,
    expected_vdaf,
    real_report_share,
    real_reports_lower_bound,
    required_batch_size,
)
from shared.recipe.model import Encoding, NgramFeature, RecipeDraft, SfpRandomizer
from tests.recipe.helpers import complete, example_recipe

D = 24  # categories; bucket 0 is OOV, so the one-hot dimension is D + 1
ZEROS = 6  # the last ZEROS categories never occur (their true count is 0)


def draft(randomizer: dict[str, Any], **overrides: Any) -> RecipeDraft:
    doc: dict[str, Any] = {
        "recipe_id": "test.words",
        "version": 3,
        "analysis_id": "test",
        "query": {"stream": "s", "fields": ["word"], "selection": {"kind": "latest"}},
        "encoding": {
            "features": [
                {"kind": "categories", "field": "word", "values": [f"w{i}" for i in range(D)]}
            ]
        },
        "randomizer": randomizer,
        "sampling_rate": 1.0,
        "min_batch_size": 1000,
        "privacy": {"epsilon": 1.0, "delta": 1e-6, "analysis": "stronger_clones"},
    }
    doc.update(overrides)
    return RecipeDraft.model_validate(doc)


def zipf_indices(rng: np.random.Generator, n: int, s: float = 1.1) -> np.ndarray:
    """One-hot indices: Zipf over 0..D-ZEROS (0 = OOV, the most frequent); the rest never."""
    support = D + 1 - ZEROS
    p = 1 / np.arange(1, support + 1) ** s
    return rng.choice(support, size=n, p=p / p.sum())


def true_counts(indices: np.ndarray, length: int = D + 1) -> np.ndarray:
    return np.bincount(indices, minlength=length).astype(np.float64)


def collection(agg: np.ndarray, n: int) -> Collection:
    return Collection(n, tuple(int(v) for v in agg), (1_700_000_000, 3600), None, "task")


# --- aggregation as the VDAF does it: the sum of the mapped measurements -------------------------


def one_hot_aggregate(r: DpOneHot, idx: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    return np.asarray(np.asarray(encode_one_hot(r.randomize(idx, rng))).sum(axis=0))


def cms_aggregate(cms: CountMeanSketch, idx: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """`encode_cms` summed, computed in numpy (a test below checks it is the same)."""
    rep = cms.randomize(item_keys(idx.tolist()), rng)
    ones = np.zeros((cms.k, cms.m), dtype=np.int64)
    np.add.at(ones, rep.j, (rep.signs.astype(np.int64) + 1) // 2)
    rows = np.bincount(rep.j, minlength=cms.k)
    return np.concatenate([ones.ravel(), rows])


def hcms_aggregate(
    hcms: HadamardCountMeanSketch, idx: np.ndarray, rng: np.random.Generator
) -> np.ndarray:
    rep = hcms.randomize(item_keys(idx.tolist()), rng)
    return np.asarray(np.bincount(encode_hcms(hcms, rep), minlength=2 * hcms.k * hcms.m))


def test_numpy_cms_aggregate_is_the_sum_of_encode_cms() -> None:
    cms = CountMeanSketch(2.0, 4, 16, seed=5)
    idx = zipf_indices(np.random.default_rng(1), 300)
    expected = np.asarray(encode_cms(cms, cms.randomize(item_keys(idx.tolist()), _rng(7))))
    assert np.array_equal(cms_aggregate(cms, idx, _rng(7)), expected.sum(axis=0))


def _rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


def coverage_ok(covered: int, total: int, level: float = 0.95) -> bool:
    return bool(stats.binomtest(covered, total, level).pvalue > 1e-4)


# --- CI coverage ---------------------------------------------------------------------------------


@pytest.mark.parametrize("symmetric", [True, False])
def test_one_hot_intervals_cover_the_truth(symmetric: bool) -> None:
    recipe = draft({"name": "one_hot", "eps0": 1.5, "symmetric": symmetric})
    r = DpOneHot(1.5, D + 1, symmetric)
    rng = _rng(11 if symmetric else 12)
    covered = total = 0
    for _ in range(20):
        idx = zipf_indices(rng, 4000)
        a = analyze(recipe, collection(one_hot_aggregate(r, idx, rng), idx.size))
        truth = true_counts(idx)
        assert [it.index for it in a.items] == list(range(D + 1))
        covered += sum(it.ci_low <= t <= it.ci_high for it, t in zip(a.items, truth, strict=True))
        total += D + 1
    assert coverage_ok(covered, total), covered / total


@pytest.mark.parametrize("confidence", [0.8, 0.99])
def test_confidence_level_is_a_parameter(confidence: float) -> None:
    recipe = draft({"name": "one_hot", "eps0": 1.0, "symmetric": True})
    r = DpOneHot(1.0, D + 1, True)
    rng = _rng(13)
    covered = total = 0
    for _ in range(20):
        idx = zipf_indices(rng, 3000)
        a = analyze(
            recipe, collection(one_hot_aggregate(r, idx, rng), idx.size), confidence=confidence
        )
        assert a.confidence == confidence
        truth = true_counts(idx)
        covered += sum(it.ci_low <= t <= it.ci_high for it, t in zip(a.items, truth, strict=True))
        total += D + 1
        # The interval is estimate +- z stderr with the two-sided z of the level.
        z = special.ndtri(0.5 + confidence / 2)
        it = a.items[3]
        assert it.ci_high - it.estimate == pytest.approx(z * it.stderr)
    assert coverage_ok(covered, total, confidence), covered / total


@pytest.mark.parametrize("kind", ["cms", "hcms"])
def test_sketch_intervals_cover_the_truth(kind: str) -> None:
    rng = _rng(21 if kind == "cms" else 22)
    covered = total = 0
    for rep in range(24):
        # A fresh public hash seed per repetition: the variance formula averages over the
        # family, so coverage holds across seeds, not for one fixed family's collisions.
        params = {"name": kind, "eps0": 3.0, "k": 8, "m": 64, "seed": rep}
        recipe = draft(params)
        idx = zipf_indices(rng, 5000)
        if kind == "cms":
            agg = cms_aggregate(CountMeanSketch(3.0, 8, 64, rep), idx, rng)
        else:
            agg = hcms_aggregate(HadamardCountMeanSketch(3.0, 8, 64, rep), idx, rng)
        a = analyze(recipe, collection(agg, idx.size))
        truth = true_counts(idx)
        assert [it.index for it in a.items] == list(range(D + 1))
        covered += sum(it.ci_low <= t <= it.ci_high for it, t in zip(a.items, truth, strict=True))
        total += D + 1
    assert coverage_ok(covered, total), covered / total


def test_sketch_candidates_by_label_and_index_through_the_device_path() -> None:
    """The device (client_sdk.query) sketches its one-hot index; candidates map the same way."""
    recipe = complete(draft({"name": "cms", "eps0": 4.0, "k": 8, "m": 64, "seed": 3}))
    rng = _rng(31)
    idx = zipf_indices(rng, 3000)
    measurements = randomize_indices(recipe, idx.tolist(), rng)
    agg = np.asarray(measurements).sum(axis=0)
    labels = item_labels(recipe.encoding)
    by_label = analyze(recipe, collection(agg, idx.size), candidates=["<OOV>", "w0", "w20"])
    by_index = analyze(recipe, collection(agg, idx.size), candidates=[0, 1, 21])
    assert [it.label for it in by_label.items] == ["<OOV>", "w0", labels[21]]
    assert [it.estimate for it in by_label.items] == [it.estimate for it in by_index.items]
    truth = true_counts(idx)
    oov, w0, w20 = by_label.items
    assert oov.ci_low <= truth[0] <= oov.ci_high or abs(oov.estimate - truth[0]) < 4 * oov.stderr
    assert not oov.below_threshold and not w0.below_threshold
    assert truth[21] == 0 and w20.estimate < 4 * w20.stderr
    with pytest.raises(AnalysisError):
        analyze(recipe, collection(agg, idx.size), candidates=["no such word"])
    with pytest.raises(AnalysisError):
        analyze(recipe, collection(agg, idx.size), candidates=[D + 1])


def test_bit_pushing_mean_interval_covers_the_truth() -> None:
    recipe = draft(
        {"name": "bit_pushing", "eps0": 2.0},
        query={"stream": "s", "fields": ["size"], "selection": {"kind": "latest"}},
        encoding={"features": [{"kind": "integer", "field": "size", "bits": 10}]},
    )
    bp = BitPushing(10, 2.0)
    probabilities = weighted_probabilities(10, 1.0)
    rng = _rng(41)
    covered = 0
    reps = 120
    for _ in range(reps):
        values = np.minimum(rng.zipf(1.6, 4000) * 7, 1023)
        reports = bp.randomize(values, probabilities, rng)
        agg = np.bincount(encode_bit_pushing(reports), minlength=20)
        a = analyze(recipe, collection(agg, values.size))
        assert a.statistic == "mean" and a.items[0].label == "mean(size)"
        assert len(a.items) == 11  # the mean, then each bit's mean
        mean = a.items[0]
        covered += mean.ci_low <= values.mean() <= mean.ci_high
    assert coverage_ok(covered, reps), covered / reps


# --- thresholding --------------------------------------------------------------------------------


def test_thresholding_flags_the_noise_items() -> None:
    recipe = draft({"name": "one_hot", "eps0": 1.5, "symmetric": True})
    r = DpOneHot(1.5, D + 1, True)
    rng = _rng(51)
    z = special.ndtri(0.95)
    kept_zero = zero = 0
    for _ in range(30):
        idx = zipf_indices(rng, 4000)
        a = analyze(recipe, collection(one_hot_aggregate(r, idx, rng), idx.size))
        truth = true_counts(idx)
        for it, t in zip(a.items, truth, strict=True):
            # The documented rule, exactly.
            assert it.threshold == pytest.approx(z * it.stderr)
            assert it.below_threshold == (not it.estimate > z * it.stderr)
            if t > it.threshold + 5 * it.stderr:
                assert not it.below_threshold, (it, t)  # a big count is never thrown away
            if t == 0:
                zero += 1
                kept_zero += not it.below_threshold
    # A count of 0 clears the one-sided 95% threshold about 5% of the time.
    assert zero == 30 * ZEROS
    assert stats.binomtest(kept_zero, zero, 0.05).pvalue > 1e-4, kept_zero / zero


def test_threshold_level_and_floor() -> None:
    recipe = draft({"name": "one_hot", "eps0": 1.5, "symmetric": True})
    rng = _rng(52)
    idx = zipf_indices(rng, 4000)
    agg = one_hot_aggregate(DpOneHot(1.5, D + 1, True), idx, rng)
    loose = analyze(recipe, collection(agg, idx.size), threshold_level=0.9)
    strict = analyze(recipe, collection(agg, idx.size), threshold_level=0.999)
    floored = analyze(recipe, collection(agg, idx.size), floor=500.0)
    n_loose = sum(it.below_threshold for it in loose.items)
    n_strict = sum(it.below_threshold for it in strict.items)
    assert n_loose < n_strict
    for it in floored.items:
        assert it.below_threshold == (it.estimate <= max(it.threshold, 500.0))
        assert it.threshold >= 500.0
    with pytest.raises(ValueError):
        analyze(recipe, collection(agg, idx.size), threshold_level=0.4)
    with pytest.raises(ValueError):
        analyze(recipe, collection(agg, idx.size), confidence=1.0)


# --- privacy statement ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("randomizer", "analysis", "q"),
    [
        ({"name": "one_hot", "eps0": 1.0, "symmetric": True}, "stronger_clones", 1.0),
        ({"name": "one_hot", "eps0": 1.0, "symmetric": True}, "sym_rappor_exact", 0.5),
        ({"name": "one_hot", "eps0": 1.0, "symmetric": True}, "sym_rappor_deletion_exact", 1.0),
        ({"name": "one_hot", "eps0": 2.0, "symmetric": False}, "clones", 0.25),
        ({"name": "cms", "eps0": 3.0, "k": 4, "m": 32}, "stronger_clones", 1.0),
        ({"name": "hcms", "eps0": 3.0, "k": 4, "m": 32}, "stronger_clones", 0.1),
    ],
)
def test_privacy_statement_is_the_accounting_for_this_report_count(
    randomizer: dict[str, Any], analysis: str, q: float
) -> None:
    recipe = draft(
        randomizer,
        sampling_rate=q,
        min_batch_size=2000,
        privacy={"epsilon": 1.0, "delta": 1e-6, "analysis": analysis},
    )
    claim = recipe.privacy
    seen = set()
    for n in (2500, 9000):
        st = privacy_statement(recipe, n)
        eps, delta = aggregate_guarantee(recipe.randomizer, n, q, claim)
        assert (st.epsilon, st.delta) == (eps, delta)
        assert st.report_count == n and not st.below_min_batch
        assert (
            st.claim_met
            == assess_privacy(recipe.model_copy(update={"min_batch_size": n})).claim_met
        )
        assert st.neighbouring == (
            "deletion" if analysis == "sym_rappor_deletion_exact" else "replacement"
        )
        lines = {g.trust_model: g for g in st.guarantees}
        assert list(lines) == ["OAMC", "OAOC", "OC"]
        # OAMC: DpPolicy's amplified epsilon at this n, then 001 Theorem 4's sampling.
        eps0 = analysis_epsilon(recipe.randomizer, analysis)  # type: ignore[arg-type]
        delta_a = delta / q if q < 1 else delta
        policy = DpPolicy(client=ClientRandomization(eps0, n, delta_a, claim.analysis))
        amplified = policy.guarantee(TrustModel.OAMC)
        assert amplified is not None
        expected = amplified.eps if q == 1 else amp.poisson_sampling(amplified.eps, delta_a, q)[0]
        assert lines["OAMC"].epsilon == pytest.approx(expected, rel=1e-12)
        assert lines["OAMC"].epsilon == st.epsilon
        # OAOC and OC: no amplification, only the local randomizer's replacement epsilon.
        for model in ("OAOC", "OC"):
            assert lines[model].epsilon == recipe.randomizer.local_epsilon
            assert lines[model].delta == 0.0
            assert lines[model].neighbouring == "replacement"
        assert st.epsilon < recipe.randomizer.local_epsilon
        seen.add(st.epsilon)
    assert len(seen) == 2  # computed per batch, not a constant


def test_privacy_statement_below_min_batch_and_out_of_range() -> None:
    recipe = draft({"name": "one_hot", "eps0": 1.0, "symmetric": True}, min_batch_size=5000)
    st = privacy_statement(recipe, 800)
    assert st.below_min_batch
    assert any("B = 5000" in note for note in st.notes)
    assert any("should not have" in line for line in st.lines())
    closed = draft(
        {"name": "one_hot", "eps0": 3.0, "symmetric": False},
        privacy={"epsilon": 1.0, "delta": 1e-6, "analysis": "closed_form"},
    )
    out = privacy_statement(closed, 1000)
    assert math.isinf(out.epsilon) and not out.claim_met
    a = analyze(closed, collection(np.zeros(D + 1, dtype=np.int64), 1000))
    doc = json.loads(to_json(a))  # strict JSON: no Infinity
    assert doc["privacy"]["epsilon"] is None
    assert doc["privacy"]["guarantees"][0]["epsilon"] is None


# --- plain tasks, input validation ---------------------------------------------------------------


def test_plain_task_gives_raw_counts_without_privacy() -> None:
    body = {
        "state": "complete",
        "task_id": "abc",
        "report_count": 10,
        "interval": {"start": 3600, "duration": 60},
        "result": [3, 0, 7],
    }
    c = collection_from_body(body)
    assert c == Collection(10, (3, 0, 7), (3600, 60), None, "abc")
    a = analyze(None, c)
    assert a.privacy is None and a.statistic == "raw"
    assert [(it.estimate, it.stderr, it.below_threshold) for it in a.items] == [
        (3.0, 0.0, False),
        (0.0, 0.0, False),
        (7.0, 0.0, False),
    ]
    assert "privacy:" not in to_table(a)
    assert json.loads(to_json(a))["privacy"] is None
    count = analyze(None, collection_from_body({"report_count": 4, "result": 4}))
    assert [it.label for it in count.items] == ["value"]


def test_bad_collections_are_refused() -> None:
    recipe = draft({"name": "one_hot", "eps0": 1.0, "symmetric": True})
    with pytest.raises(AnalysisError):
        analyze(recipe, collection(np.zeros(D), 100))  # one coordinate short
    with pytest.raises(AnalysisError):
        analyze(recipe, Collection(100, 5))
    with pytest.raises(AnalysisError):
        collection_from_body({"state": "pending"})
    with pytest.raises(AnalysisError):
        collection_from_body({"state": "complete", "report_count": 3, "result": ["x"]})


def test_labels_of_multi_feature_and_ngram_encodings() -> None:

    recipe = example_recipe()
    labels = item_labels(recipe.encoding)
    assert len(labels) == recipe.encoding.dimension == len(set(labels))
    assert labels[0] == "age=<OOV>, typed_ngrams=<OOV>"
    i = recipe.encoding.index({"age": 25, "typed_ngrams": ("hello", "world", "c")})
    assert labels[i] == "age=[20, 30), typed_ngrams=hello world c"
    j = recipe.encoding.index({"age": 71, "typed_ngrams": ("how", "are")})
    assert labels[j] == "age=[70, 80), typed_ngrams=how are <END>"


def test_one_grams_are_the_root_of_the_prefix_tree() -> None:
    """n = 1 (000 §1's first round, popular words): one empty prefix; every typed word is a
    1-gram (no end-of-sentence pseudo-gram), unknown words fall in the root's OOV bucket."""
    feature = NgramFeature(field="text", n=1, prefixes=((),), known_tokens=("a", "b"))
    encoding = Encoding(features=(feature,))
    labels = item_labels(encoding)
    assert labels == ["<OOV> prefix", "<END>", "<OOV>", "a", "b"]
    assert [feature.bucket(g) for g in (("a",), ("b",), ("zz",), None)] == [3, 4, 2, 0]
    assert _ngrams(["a", "b", "a"], 1) == [("a",), ("b",), ("a",)]
    assert _ngrams(["a", "b"], 2) == [("a", "b"), ("b",)]


# --- writers -------------------------------------------------------------------------------------


def _analysis() -> Analysis:
    recipe = draft({"name": "one_hot", "eps0": 1.5, "symmetric": True})
    rng = _rng(61)
    idx = zipf_indices(rng, 3000)
    return analyze(
        recipe, collection(one_hot_aggregate(DpOneHot(1.5, D + 1, True), idx, rng), 3000)
    )


def test_json_has_the_same_numbers() -> None:
    a = _analysis()
    doc = json.loads(to_json(a))
    assert doc["recipe_id"] == "test.words" and doc["report_count"] == 3000
    assert doc["interval"] == {"start": 1_700_000_000, "duration": 3600}
    for it, row in zip(a.items, doc["items"], strict=True):
        assert row["label"] == it.label
        assert (row["estimate"], row["stderr"], row["ci_low"], row["ci_high"]) == (
            it.estimate,
            it.stderr,
            it.ci_low,
            it.ci_high,
        )
        assert row["below_threshold"] == it.below_threshold
    assert a.privacy is not None
    assert doc["privacy"]["epsilon"] == a.privacy.epsilon
    assert doc["privacy"]["statement"] == a.privacy.lines()
    assert [g["trust_model"] for g in doc["privacy"]["guarantees"]] == ["OAMC", "OAOC", "OC"]


def test_csv_has_the_same_numbers() -> None:
    a = _analysis()
    rows = list(csv.DictReader(io.StringIO(to_csv(a))))
    assert len(rows) == len(a.items)
    for it, row in zip(a.items, rows, strict=True):
        assert int(row["index"]) == it.index and row["label"] == it.label
        assert float(row["estimate"]) == it.estimate
        assert float(row["stderr"]) == it.stderr
        assert (float(row["ci_low"]), float(row["ci_high"])) == (it.ci_low, it.ci_high)
        assert row["below_threshold"] == ("true" if it.below_threshold else "false")


def test_table_is_aligned_and_carries_the_statement() -> None:
    a = _analysis()
    text = to_table(a)
    lines = text.splitlines()
    assert a.privacy is not None
    for line in a.privacy.lines():
        assert line in lines
    rows = [line for line in lines if line.startswith(("w", "<OOV>"))]
    assert len(rows) == D + 1
    # Right-aligned numeric columns: every row's estimate column ends at the same offset.
    ends = {len(r.split("  ±")[0].rstrip()) for r in rows}
    assert len(ends) == 1
    flagged = [r for r in rows if r.endswith("below threshold")]
    assert len(flagged) == sum(it.below_threshold for it in a.items)
    assert f"{a.items[0].estimate:.3f}".rstrip("0").rstrip(".") in text
    short = to_table(a, max_rows=5)
    assert "smaller items not shown" in short


# --- aggregator noise (004 §5, §6.1.2) ------------------------------------------------------------


def noisy_task(vdaf: dict[str, Any], noise: dict[str, Any] | None) -> CollectorTask:
    return CollectorTask.model_validate(
        {
            "task_id": TaskId.random().to_b64url(),
            "leader_endpoint": "http://leader",
            "query_type": "time_interval",
            "vdaf": vdaf,
            "collector_auth_token": "c" * 16,
            "aggregator_noise": noise,
        }
    )


SIGMA = "8.5402"  # 004 Table 2: eps 0.906 at delta 1e-9 for a one-hot histogram
GAUSSIAN = {"mechanism": "discrete_gaussian", "sigma": SIGMA}
HISTOGRAM = {"type": "Prio3Histogram", "length": D + 1, "chunk_length": 5}


def test_noised_plain_task_decodes_negatives_and_carries_the_noise_stderr() -> None:
    task = noisy_task({"type": "Prio3Histogram", "length": 3, "chunk_length": 1}, GAUSSIAN)
    p = task.vdaf.instance().field.MODULUS
    a = analyze(None, Collection(10, (p - 3, 0, 12)), task=task)
    assert [it.estimate for it in a.items] == [-3.0, 0.0, 12.0]
    sd = math.sqrt(2) * float(SIGMA)  # two aggregators, N_Z(0, sigma^2) each
    assert [it.stderr for it in a.items] == pytest.approx([sd] * 3, rel=1e-12)
    lo, hi = a.items[2].ci_low, a.items[2].ci_high
    assert (lo, hi) == pytest.approx((12 - 1.959964 * sd, 12 + 1.959964 * sd), rel=1e-6)
    # Without the setting the same field elements are unsigned and exact.
    plain = analyze(None, Collection(10, (p - 3, 0, 12)), task=noisy_task(HISTOGRAM, None))
    assert plain.items[0].estimate == float(p - 3) and plain.items[0].stderr == 0.0
    count = noisy_task({"type": "Prio3Count"}, GAUSSIAN)
    single = analyze(None, Collection(4, count.vdaf.instance().field.MODULUS - 1), task=count)
    assert single.items[0].estimate == -1.0
    with pytest.raises(AnalysisError, match="field elements"):
        analyze(None, Collection(1, (-1, 0, 0)), task=task)


@pytest.mark.parametrize("symmetric", [True, False])
def test_noised_one_hot_stderr_adds_the_debiased_noise_variance(symmetric: bool) -> None:
    """stderr^2 = randomizer variance + gain^2 * 2 sigma^2 (gain = 1 / (p - q) of the debias), and
    with the noise actually added the intervals still cover the truth at the stated rate."""
    recipe = draft({"name": "one_hot", "eps0": 1.0, "symmetric": symmetric})
    r = DpOneHot(1.0, D + 1, symmetric)
    n = 5000
    gain = r.debias(np.ones(D + 1), n) - r.debias(np.zeros(D + 1), n)
    noise_var = 2 * float(SIGMA) ** 2
    task = noisy_task(HISTOGRAM, GAUSSIAN)
    p = task.vdaf.instance().field.MODULUS
    draws = random.Random(f"noise-{symmetric}").getrandbits
    covered = total = 0
    for trial in range(6):
        rng = _rng(100 + trial)
        idx = zipf_indices(rng, n)
        agg = one_hot_aggregate(r, idx, rng)
        noise = discrete_gaussian_vector(Fraction(SIGMA) ** 2 * 2, D + 1, draws)
        noised = [(int(v) + z) % p for v, z in zip(agg, noise, strict=True)]
        a = analyze(recipe, collection(np.asarray(noised, dtype=object), n), task=task)
        base = analyze(recipe, collection(agg + np.asarray(noise), n))
        got = np.array([it.stderr for it in a.items])
        want = np.sqrt(np.array([it.stderr for it in base.items]) ** 2 + gain**2 * noise_var)
        np.testing.assert_allclose(got, want, rtol=1e-12)
        assert all(it.stderr > 0 for it in a.items)
        truth = true_counts(idx)
        covered += sum(it.ci_low <= t <= it.ci_high for it, t in zip(a.items, truth, strict=True))
        total += D + 1
    assert coverage_ok(covered, total)


def test_oaoc_line_states_the_aggregator_noise_epsilon() -> None:
    recipe = draft({"name": "one_hot", "eps0": 4.0, "symmetric": False})
    plain = {g.trust_model: g for g in privacy_statement(recipe, 5000).guarantees}
    seen = set()
    for sigma in (SIGMA, "23.3903"):
        task = noisy_task(HISTOGRAM, {"mechanism": "discrete_gaussian", "sigma": sigma})
        st = privacy_statement(recipe, 5000, task)
        lines = {g.trust_model: g for g in st.guarantees}
        # Computed from sigma at the recipe's delta: the exact discrete mechanism on a
        # histogram's shift (1, -1), close to the continuous bound at the same sigma.
        sigma2 = float(Fraction(sigma) ** 2)
        eps = discrete_gaussian_epsilon(sigma2, 1e-6, (1, -1))
        assert lines["OAOC"].epsilon == pytest.approx(eps, rel=1e-12)
        assert eps == pytest.approx(gaussian_epsilon(float(sigma), 1e-6, math.sqrt(2)), rel=1e-3)
        assert discrete_gaussian_delta(sigma2, eps, (1, -1)) <= 1e-6
        assert lines["OAOC"].delta == 1e-6
        assert "aggregator noise" in lines["OAOC"].basis
        assert lines["OAOC"].epsilon < plain["OAOC"].epsilon == recipe.randomizer.local_epsilon
        assert lines["OC"] == plain["OC"]
        # OAMC: the better of amplification (as without noise) and the noise; the headline too.
        best = min(plain["OAMC"].epsilon, lines["OAOC"].epsilon)
        assert lines["OAMC"].epsilon == best == st.epsilon
        assert lines["OAMC"].basis == (
            plain["OAMC"].basis if best == plain["OAMC"].epsilon else lines["OAOC"].basis
        )
        both = f"amplification alone gives epsilon={plain['OAMC'].epsilon:.4g}, the aggregator"
        assert any(both in note for note in st.notes)
        seen.add(lines["OAOC"].epsilon)
        assert any("aggregator noise" in line for line in st.lines())
    assert len(seen) == 2
    # A recipe's statement is at the recipe's delta, whatever the noise was calibrated at...
    calibrated = {**GAUSSIAN, "epsilon": 0.906, "delta": 1e-9, "sensitivity": math.sqrt(2)}
    st = privacy_statement(recipe, 5000, noisy_task(HISTOGRAM, calibrated))
    oaoc = {g.trust_model: g for g in st.guarantees}["OAOC"]
    assert oaoc.delta == 1e-6 and oaoc.epsilon < 0.906
    # ...a plain task's at the calibration's delta: 004 Table 2's epsilon comes back (the exact
    # discrete mechanism's is 4e-4 below it).
    zero = Collection(5000, (0,) * (D + 1))
    plain_st = analyze(None, zero, task=noisy_task(HISTOGRAM, calibrated)).privacy
    assert plain_st is not None and plain_st.delta == 1e-9 and plain_st.claim_met
    assert plain_st.epsilon == pytest.approx(0.906, abs=1e-3) and plain_st.epsilon <= 0.906
    # Discrete Laplace: L1 sensitivity 2 of a histogram over the scale.
    lap = noisy_task(HISTOGRAM, {"mechanism": "discrete_laplace", "scale": "4"})
    oaoc = {g.trust_model: g for g in privacy_statement(recipe, 5000, lap).guarantees}["OAOC"]
    assert (oaoc.epsilon, oaoc.delta) == (0.5, 0.0)
    # Noise too weak to beat the local randomizer: the local eps0 stays.
    weak = noisy_task(HISTOGRAM, {"mechanism": "discrete_gaussian", "sigma": "0.5"})
    oaoc = {g.trust_model: g for g in privacy_statement(recipe, 5000, weak).guarantees}["OAOC"]
    assert oaoc.epsilon == recipe.randomizer.local_epsilon


# --- SFP: new words over an unknown dictionary (002 §4.3) ----------------------------------------

SFP_LETTERS = "abcdefgh"


def sfp_draft(**randomizer: Any) -> RecipeDraft:
    params: dict[str, Any] = {
        "name": "sfp",
        "length": 6,
        "fragment_length": 2,
        "alphabet": SFP_LETTERS + " ",
        "word": {"eps0": 4.0, "k": 16, "m": 64, "seed": 1},
        "fragment": {"eps0": 6.0, "k": 16, "m": 32, "seed": 2},
        "top": 300,
    }
    params.update(randomizer)
    return draft(
        params,
        query={"stream": "s", "fields": ["word"], "selection": {"kind": "latest"}},
        encoding={"features": [{"kind": "string", "field": "word"}]},
        privacy={"epsilon": 10.0, "delta": 1e-6, "analysis": "stronger_clones"},
        min_batch_size=1,
    )


def unknown_words(rng: np.random.Generator, n: int) -> tuple[list[str], list[str]]:
    """A Zipf vocabulary of random strings (no dictionary knows them) and n devices' words."""
    vocab: list[str] = []
    while len(vocab) < 30:
        word = "".join(rng.choice(list(SFP_LETTERS), rng.integers(2, 7)))
        if word not in vocab:
            vocab.append(word)
    p = 1 / np.arange(1, len(vocab) + 1) ** 1.1
    return vocab, [vocab[i] for i in rng.choice(len(vocab), n, p=p / p.sum())]


@pytest.mark.parametrize("seed", [41, 42])
def test_sfp_discovers_the_top_words_through_the_device_path(seed: int) -> None:
    """Devices randomize their string (client_sdk.query), the aggregate is the sum of the
    measurements; the analysis finds the heavy words with intervals covering their counts."""
    recipe = complete(sfp_draft())
    rng = _rng(seed)
    vocab, words = unknown_words(rng, 3000)
    words += ["", "xyz"]  # no word / outside the alphabet: both answered as the all-pad string
    answers = [encode_record(recipe, {"word": w}) for w in words]
    assert answers[-2:] == ["", ""]
    agg = np.asarray(randomize_indices(recipe, answers, rng)).sum(axis=0)
    a = analyze(recipe, collection(agg, len(words)))
    assert a.randomizer == "sfp" and a.statistic == "count"
    truth = Counter(words)
    found = [it.label for it in a.items]
    assert {w for w, _ in truth.most_common(3)} <= set(found)
    assert set(found) <= set(vocab)  # no false discovery at this seed
    assert [it.estimate for it in a.items] == sorted((it.estimate for it in a.items), reverse=True)
    for it in a.items:
        assert not it.below_threshold and it.index is None
        assert abs(it.estimate - truth[it.label]) < 4 * it.stderr
    assert 0.95 < a.threshold_level < 1  # Bonferroni over the candidates
    assert any("candidate words" in n for n in a.notes)
    assert a.privacy is not None and a.privacy.local_epsilon == 10.0
    doc = json.loads(to_json(a))
    assert [i["label"] for i in doc["items"]] == found
    assert to_csv(a).count("\n") == len(found) + 1
    assert found[0] in to_table(a)


def test_sfp_analysis_refuses_candidates_and_bad_lengths() -> None:
    recipe = complete(sfp_draft())
    rng = _rng(43)
    agg = np.asarray(randomize_indices(recipe, ["abc", "", "ab"], rng)).sum(axis=0)
    with pytest.raises(AnalysisError, match="no candidates"):
        analyze(recipe, collection(agg, 3), candidates=["abc"])
    with pytest.raises(AnalysisError, match="coordinates"):
        analyze(recipe, collection(agg[:-1], 3))
    # A report count that the row indicators do not match is noted, not hidden.
    a = analyze(recipe, collection(agg, 5))
    assert any("not report_count 5" in n for n in a.notes)
    with pytest.raises(TypeError):
        randomize_indices(recipe, [3], rng)


@pytest.mark.parametrize("kind", ["cms", "hcms"])
def test_noised_sketch_stderr_adds_the_noise_variance(kind: str) -> None:
    """The sketch estimates' standard errors carry the aggregators' noise (through the sketch's
    linear map), and the noised intervals still cover the truth at least at the stated rate."""
    sigma = "12" if kind == "cms" else "2"
    noise = {"mechanism": "discrete_gaussian", "sigma": sigma}
    draws = random.Random(f"sketch-{kind}").getrandbits
    rng = _rng(31)
    covered = total = 0
    for rep in range(8):
        recipe = draft({"name": kind, "eps0": 3.0, "k": 8, "m": 64, "seed": rep})
        spec = expected_vdaf(recipe.randomizer, recipe.encoding)
        task = noisy_task(spec.model_dump(exclude_none=True), noise)
        p = task.vdaf.instance().field.MODULUS
        idx = zipf_indices(rng, 5000)
        if kind == "cms":
            cms = CountMeanSketch(3.0, 8, 64, rep)
            agg = cms_aggregate(cms, idx, rng)
            added = cms_noise_variance(cms, 2 * float(sigma) ** 2)
        else:
            hcms = HadamardCountMeanSketch(3.0, 8, 64, rep)
            agg = hcms_aggregate(hcms, idx, rng)
            added = hcms_noise_variance(hcms, 2 * float(sigma) ** 2)
        z = np.asarray(discrete_gaussian_vector(Fraction(sigma) ** 2 * 2, agg.size, draws))
        noised = [(int(v) + int(e)) % p for v, e in zip(agg, z, strict=True)]
        a = analyze(recipe, collection(np.asarray(noised, dtype=object), idx.size), task=task)
        base = analyze(recipe, collection(agg + z, idx.size))
        assert [it.estimate for it in a.items] == [it.estimate for it in base.items]
        want = np.sqrt(np.array([it.stderr for it in base.items]) ** 2 + added)
        np.testing.assert_allclose([it.stderr for it in a.items], want, rtol=1e-12)
        # The noisy row / report totals stay within the noise: no consistency note.
        assert not any("not report_count" in n or "not included" in n for n in a.notes)
        truth = true_counts(idx)
        covered += sum(it.ci_low <= t <= it.ci_high for it, t in zip(a.items, truth, strict=True))
        total += D + 1
    assert stats.binomtest(covered, total, 0.95, alternative="less").pvalue > 1e-4


def test_plain_noised_task_states_the_noise_guarantee() -> None:
    """A plain task's only mechanism is the aggregators' noise: OAMC and OAOC get its guarantee,
    computed from sigma (or the scale) and the VDAF's sensitivity; OC gets none."""
    count = noisy_task({"type": "Prio3Count"}, {"mechanism": "discrete_gaussian", "sigma": "4"})
    p = count.vdaf.instance().field.MODULUS
    a = analyze(None, Collection(150, p - 2), task=count)
    st = a.privacy
    assert st is not None and a.items[0].estimate == -2.0
    eps = discrete_gaussian_epsilon(16.0, PLAIN_TASK_DELTA, (1,))
    assert [(g.trust_model, g.epsilon, g.delta) for g in st.guarantees] == [
        ("OAMC", eps, PLAIN_TASK_DELTA),
        ("OAOC", eps, PLAIN_TASK_DELTA),
    ]
    assert (st.epsilon, st.local_epsilon, st.claim_met) == (eps, None, None)
    assert any(n.startswith("OC: no guarantee") for n in st.notes)
    text = to_table(a)
    assert f"epsilon={eps:.4g}" in text and "recipe claims" not in text
    assert "no local randomizer" in st.headline()
    doc = json.loads(to_json(a))
    assert doc["privacy"]["guarantees"][1]["epsilon"] == eps
    # A Sum of 8 bits moves by up to 255: the Laplace's L1 sensitivity over its scale.
    total = noisy_task(
        {"type": "Prio3Sum", "bits": 8}, {"mechanism": "discrete_laplace", "scale": "510"}
    )
    lap = analyze(None, Collection(150, 1234), task=total).privacy
    assert lap is not None and (lap.epsilon, lap.delta) == (0.5, 0.0)
    assert lap.below_min_batch is False


def test_recipe_and_task_noise_must_agree() -> None:
    """The recipe's noise is what devices were promised; the task's is what the aggregators do."""
    strong = {"mechanism": "discrete_gaussian", "sigma": "60"}
    recipe = draft({"name": "one_hot", "eps0": 1.0, "symmetric": True}, aggregator_noise=strong)
    zero = collection(np.zeros(D + 1, dtype=np.int64), 5000)
    for other in (None, {**strong, "sigma": "9"}):
        with pytest.raises(AnalysisError, match="aggregator noise is not task"):
            analyze(recipe, zero, task=noisy_task(HISTOGRAM, other))
    # Without the task, the recipe's noise is decoded and accounted for on the recipe's VDAF.
    alone = analyze(recipe, zero)
    assert alone.privacy is not None and all(it.stderr > 0 for it in alone.items)
    oaoc = alone.privacy.guarantees[1]
    setting = AggregatorNoise.model_validate(strong)
    spec = expected_vdaf(recipe.randomizer, recipe.encoding)
    central = noise_guarantee(setting, spec, recipe.privacy.delta)
    assert central is not None and (oaoc.epsilon, oaoc.basis) == (central.eps, central.basis)
    same = analyze(recipe, zero, task=noisy_task(HISTOGRAM, strong))
    assert same.privacy is not None and all(it.stderr > 0 for it in same.items)


def test_noised_bit_pushing_stderr_carries_the_noise() -> None:
    """The mean and each bit's mean gain `aggregate_noise_variances` of the summed noise."""
    recipe = draft(
        {"name": "bit_pushing", "eps0": 2.0},
        query={"stream": "s", "fields": ["size"], "selection": {"kind": "latest"}},
        encoding={"features": [{"kind": "integer", "field": "size", "bits": 10}]},
    )
    bp = BitPushing(10, 2.0)
    rng = _rng(43)
    values = np.minimum(rng.zipf(1.6, 4000) * 7, 1023)
    reports = bp.randomize(values, weighted_probabilities(10, 1.0), rng)
    agg = np.bincount(encode_bit_pushing(reports), minlength=20)
    noise = {"mechanism": "discrete_gaussian", "sigma": "10"}
    task = noisy_task(expected_vdaf(recipe.randomizer, recipe.encoding).model_dump(), noise)
    p = task.vdaf.instance().field.MODULUS
    z = np.asarray(discrete_gaussian_vector(Fraction(200), 20, random.Random(5).getrandbits))
    noised = tuple((int(v) + int(e)) % p for v, e in zip(agg, z, strict=True))
    a = analyze(recipe, collection(np.asarray(noised, dtype=object), values.size), task=task)
    base = analyze(recipe, collection(agg + z, values.size))
    tallies = bit_tallies_from_aggregate(bp, agg + z)
    added = bp.aggregate_noise_variances(tallies, 200.0)
    bits = np.array([it.stderr for it in a.items[1:]])
    want = np.sqrt(np.array([it.stderr for it in base.items[1:]]) ** 2 + added)
    np.testing.assert_allclose(bits, want, rtol=1e-12)
    scale = np.exp2(2 * np.arange(10))
    want_mean = math.sqrt(base.items[0].stderr ** 2 + float(np.dot(scale, added)))
    assert a.items[0].stderr == pytest.approx(want_mean, rel=1e-12)
    assert a.items[0].estimate == base.items[0].estimate
    assert not any("not included" in n for n in a.notes)


def test_noised_sfp_word_estimates_carry_the_noise() -> None:
    """SFP's word estimates are CMS estimates on its word sketch: the noise adds that sketch's
    `cms_noise_variance`; the noisy row totals stay within the noise (no consistency note)."""
    recipe = complete(sfp_draft())
    rng = _rng(44)
    _, words = unknown_words(rng, 3000)
    answers = [encode_record(recipe, {"word": w}) for w in words]
    agg = np.asarray(randomize_indices(recipe, answers, rng)).sum(axis=0)
    task = noisy_task(
        recipe.task.vdaf.model_dump(), {"mechanism": "discrete_gaussian", "sigma": "2"}
    )
    p = task.vdaf.instance().field.MODULUS
    z = np.asarray(discrete_gaussian_vector(Fraction(8), agg.size, random.Random(6).getrandbits))
    noised = tuple((int(v) + int(e)) % p for v, e in zip(agg, z, strict=True))
    a = analyze(recipe, collection(np.asarray(noised, dtype=object), len(words)), task=task)
    base = analyze(recipe, collection(agg + z, len(words)))
    assert isinstance(recipe.randomizer, SfpRandomizer)
    added = cms_noise_variance(recipe.randomizer.puzzle().word_sketch, 8.0)
    before = {it.label: it for it in base.items}
    assert a.items and all(it.label in before for it in a.items)
    for it in a.items:
        assert it.estimate == before[it.label].estimate
        assert it.stderr == pytest.approx(math.sqrt(before[it.label].stderr ** 2 + added))
    assert not any("not report_count" in n or "not included" in n for n in a.notes)


# --- dummy reports (001 §4.6) ---------------------------------------------------------------------


def _binomial_lower_bound(n: int, rho: float, delta: float) -> int:
    """The largest m with P(Binomial(n, rho) < m) <= delta: the lower tail summed term by term
    from the binomial pmf in logs (not scipy's incomplete-beta inversion)."""
    below, m = 0.0, 0
    while m <= n:
        log_pmf = (
            math.lgamma(n + 1)
            - math.lgamma(m + 1)
            - math.lgamma(n - m + 1)
            + m * math.log(rho)
            + (n - m) * math.log1p(-rho)
        )
        below += math.exp(log_pmf)
        if below > delta:
            return m
        m += 1
    return n


@pytest.mark.parametrize("n", [1, 7, 60, 400, 5000])
@pytest.mark.parametrize("rho", [0.3, 2 / 3, 0.97])
@pytest.mark.parametrize("delta", [1e-9, 1e-3, 0.2])
def test_real_reports_lower_bound_is_the_exact_binomial_quantile(
    n: int, rho: float, delta: float
) -> None:
    assert real_reports_lower_bound(n, rho, delta) == _binomial_lower_bound(n, rho, delta)


def test_real_report_share() -> None:
    # q = 1/2, q' = 1/2: per device 1/2 real, 1/4 dummy, so 2/3 of the reports are real.
    assert real_report_share(0.5, 0.5) == pytest.approx(2 / 3, rel=1e-15)
    assert real_report_share(0.1, None) == 1.0


@pytest.mark.parametrize("analysis", ["stronger_clones", "sym_rappor_exact"])
def test_privacy_statement_with_dummies_is_stated_at_the_real_report_bound(analysis: str) -> None:
    """Dummies hide nobody: the batch is stated at the binomial lower bound on its real
    reports (exact oracle above) with a tenth of the aggregation's delta spent on that bound."""
    q, dummies, n = 0.5, 0.5, 3000
    randomizer = {"name": "one_hot", "eps0": 1.5, "symmetric": True}
    privacy = {"epsilon": 1.0, "delta": 1e-6, "analysis": analysis}
    plain = draft(randomizer, sampling_rate=q, min_batch_size=1000, privacy=privacy)
    with_dummies = draft(
        randomizer, sampling_rate=q, dummy_rate=dummies, min_batch_size=1000, privacy=privacy
    )
    delta_a = 1e-6 / q
    real = _binomial_lower_bound(n, 2 / 3, delta_a * DUMMY_DELTA_SHARE)
    assert 1800 < real < 2000  # n rho = 2000 less about 5 standard deviations (25.8)
    eps0 = analysis_epsilon(plain.randomizer, analysis)  # type: ignore[arg-type]
    eps_a = amp.shuffle_epsilon(eps0, real, delta_a * (1 - DUMMY_DELTA_SHARE), analysis)  # type: ignore[arg-type]
    expected = amp.poisson_sampling(eps_a, delta_a, q)
    st = privacy_statement(with_dummies, n)
    assert (st.epsilon, st.delta) == pytest.approx(expected, rel=1e-12)
    assert f"at {real} real reports" in st.guarantees[0].basis
    assert st.epsilon > privacy_statement(plain, n).epsilon


def test_required_batch_size_with_dummies_is_the_least_that_meets_the_claim() -> None:
    recipe = draft(
        {"name": "one_hot", "eps0": 2.0, "symmetric": False},
        sampling_rate=0.25,
        dummy_rate=0.2,
        min_batch_size=1,
        privacy={"epsilon": 1.0, "delta": 1e-6, "analysis": "stronger_clones"},
    )
    args = (recipe.randomizer, 0.25, recipe.privacy)
    plain = required_batch_size(*args)
    needed = required_batch_size(*args, 0.2)
    assert plain is not None and needed is not None and needed > plain
    assert assess_privacy(recipe.model_copy(update={"min_batch_size": needed})).claim_met
    assert not assess_privacy(recipe.model_copy(update={"min_batch_size": needed - 1})).claim_met


def _with_dummies(
    n_devices: int, q: float, dummies: float, rng: np.random.Generator
) -> tuple[np.ndarray, int]:
    """The one-hot indices of the devices that sampled themselves, and how many reports the
    batch holds with the dummies of those that did not."""
    idx = zipf_indices(rng, n_devices)
    sampled = rng.random(n_devices) < q
    dummy = ~sampled & (rng.random(n_devices) < dummies)
    return idx[sampled], int(sampled.sum() + dummy.sum())


@pytest.mark.parametrize("kind", ["symmetric", "asymmetric", "cms", "hcms"])
def test_estimates_with_dummy_reports_cover_the_real_counts(kind: str) -> None:
    """Dummies are zero vectors counted in report_count: the estimates are debiased for the
    expected real reports, their intervals widened by the real count's variance, and still
    cover the true counts of the devices that reported for real. Without the correction the
    one-hot and sketch debias would subtract the dummies' share of bias too: far off."""
    q, dummies = 0.5, 0.5
    rng = _rng(31)
    covered = total = 0
    for rep in range(16):
        if kind in ("symmetric", "asymmetric"):
            params: dict[str, Any] = {
                "name": "one_hot",
                "eps0": 1.5,
                "symmetric": kind == "symmetric",
            }
        else:
            params = {"name": kind, "eps0": 3.0, "k": 8, "m": 64, "seed": rep}
        recipe = draft(params, sampling_rate=q, dummy_rate=dummies)
        idx, n = _with_dummies(8000, q, dummies, rng)
        if kind == "cms":
            agg = cms_aggregate(CountMeanSketch(3.0, 8, 64, rep), idx, rng)
        elif kind == "hcms":
            agg = hcms_aggregate(HadamardCountMeanSketch(3.0, 8, 64, rep), idx, rng)
        else:
            agg = one_hot_aggregate(DpOneHot(1.5, D + 1, kind == "symmetric"), idx, rng)
        a = analyze(recipe, collection(agg, n))
        assert any("dummy reports at q'=0.5" in note for note in a.notes)
        truth = true_counts(idx)
        covered += sum(it.ci_low <= t <= it.ci_high for it, t in zip(a.items, truth, strict=True))
        total += D + 1
    assert coverage_ok(covered, total), covered / total
