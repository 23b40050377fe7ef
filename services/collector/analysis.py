"""What a collection means: debiased estimates with standard errors, confidence intervals and
thresholding, and the privacy statement of the batch that was actually released.

The collector receives the sum of the VDAF measurements (DAP-09 §4.4.5; VDAF-08 §7 Prio3
unshard). For a recipe task those measurements are randomized reports (000 §4.1, §4.4; 004 §6),
so the raw aggregate is biased; this module turns it back into estimates (`shared.dp.vdaf_mapping`
decoders, then each randomizer's debias and variance formulas: 000 appendices A and C for
one-hot, 002 §4.1-4.2 for CMS/HCMS, 002 §4.3 for SFP's word discovery, 003 §3 for bit pushing)
and states which (epsilon, delta) the batch has, under which neighbouring notion and which
trust model (004 §3.3), computed from its actual report count by `shared.recipe.accounting` and
`shared.dp.policy`.

Entry points:

* `collection_from_body(body)` -- a `Collection` from the collector's `GET /collections/{id}`.
* `analyze(recipe, collection, ..., task=...)` -- the `Analysis` (recipe None: a plain task, raw
  counts; `task`, the collector's task from ``GET /internal/tasks/{id}``, says whether the
  aggregators added noise).
* `to_json`, `to_csv`, `to_table` -- writers; `services.collector.charts.write_chart` -- a PNG.

Confidence intervals are normal approximations (`shared.dp.estimators`), as 004 §6.1.1 does: the
estimates are sums of many independent reports. Standard errors plug the (clipped) estimate into
the variance formula, so they are estimates themselves.

Thresholding rule: an item is *below threshold* when its estimate does not clear
``z * stderr`` with z the one-sided standard normal quantile at `threshold_level` (default 0.95,
z = 1.645), or does not exceed `floor`; that is, when it is not significantly above zero and its
value is dominated by the randomizer's noise (`Estimate.significant`; the same rule as the
heavy-hitter search of `shared.dp.heavy_hitters` and 003 §5's bit squashing). For an item whose
true count is 0 the chance it clears the threshold is about 1 - threshold_level, so with d items
about d (1 - threshold_level) noise items survive; raise `threshold_level` for large d. Flagged
items keep their estimate (it is still unbiased); writers mark them.

Aggregator noise (004 §5, §6.1.2): when the task's `CollectorTask.aggregator_noise` (or the
recipe's `aggregator_noise`; they must agree when both are known) is set, each of the two
aggregators added independent noise to every coordinate of its share, so the unsharded field
elements are decoded as signed integers (`shared.dp.aggregator_noise.decode_signed`: a total just
below 0 arrives as p - 1), and the per-coordinate variance 2 Var(noise) (`AGGREGATORS` of them;
2 sigma^2 for the discrete Gaussian) is added to the standard errors through the estimator's
linear map (one-hot: its gain; CMS / HCMS: `shared.dp.vdaf_mapping.cms_noise_variance`,
`hcms_noise_variance`, and SFP's word sketch likewise; bit pushing: `BitPushing.
aggregate_noise_variances`, to first order; plain tasks: as is). The privacy
statement is `shared.recipe.accounting.trust_model_guarantees` (recipe) or the noise's own
guarantee (`shared.dp.aggregator_noise.noise_guarantee`; plain task) per trust model: one
honest aggregator's noise suffices (004 §5).

Sampling: the estimates are counts among the `report_count` devices that reported; with a
sampling rate q < 1 a population count is about the estimate divided by q (not done here).

Dummy reports (001 §4.6, a recipe's `dummy_rate` q'): a dummy adds nothing to the aggregate but
counts in `report_count`, and every estimator's debias subtracts a per-report bias. Of n reports
each is real with probability rho = q / (q + (1 - q) q') (`accounting.real_report_share`),
independently, so the estimators take n rho real reports: unbiased, since each is affine in the
report count, and the count's binomial variance n rho (1 - rho) reaches the estimate times the
square of its slope in the count (`_count_slope`). Bit pushing's tallies count the real reports
themselves and need nothing. The privacy statement is at a lower bound on the real reports
(`accounting.aggregate_guarantee`).
"""

from __future__ import annotations

import csv
import io
import itertools
import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np
import numpy.typing as npt

from services.common.problems import InternalError
from shared.dap.task import CALIBRATION_RTOL, VDAF_OF_DAP, AggregatorNoise, CollectorTaskInfo
from shared.dp import amplification as amp
from shared.dp.aggregator_noise import decode_signed, noise_guarantee
from shared.dp.estimators import Estimate, FloatArray, one_sided_z, z_value
from shared.dp.heavy_hitters import sfp_candidate_estimates
from shared.dp.policy import TrustModel
from shared.dp.randomizers.bitpushing import BitPushing, BitTallies
from shared.dp.randomizers.cms import CountMeanSketch, HadamardCountMeanSketch, item_keys
from shared.dp.randomizers.onehot import OneHotRandomizer as DpOneHot
from shared.dp.vdaf_mapping import (
    bit_tallies_from_aggregate,
    cms_noise_variance,
    cms_sketch_from_aggregate,
    hcms_noise_variance,
    hcms_sketch_from_aggregate,
    sfp_length,
    sfp_sketches_from_aggregate,
)
from shared.recipe.accounting import expected_vdaf, real_report_share, trust_model_guarantees
from shared.recipe.model import (
    BitPushingRandomizer,
    BucketFeature,
    CategoryFeature,
    CmsRandomizer,
    Encoding,
    Feature,
    HcmsRandomizer,
    IntegerFeature,
    NgramFeature,
    OneHotRandomizer,
    Recipe,
    RecipeDraft,
    SfpRandomizer,
)
from shared.vdaf.spec import VdafSpec

__all__ = [
    "DEFAULT_CONFIDENCE",
    "DEFAULT_THRESHOLD_LEVEL",
    "MAX_DEFAULT_CANDIDATES",
    "Analysis",
    "AnalysisError",
    "Collection",
    "Item",
    "PrivacyStatement",
    "TrustLine",
    "analyze",
    "collection_from_body",
    "item_labels",
    "privacy_statement",
    "sfp_label",
    "to_csv",
    "to_json",
    "to_table",
]

DEFAULT_CONFIDENCE = 0.95
DEFAULT_THRESHOLD_LEVEL = 0.95
#: CMS / HCMS without a candidate list estimate every one-hot index of the encoding, up to this
#: many (each candidate costs k hash evaluations and one collision term).
MAX_DEFAULT_CANDIDATES = 100_000

OOV = "<OOV>"
END = "<END>"

#: 004 §3.3's trust models, in the order the statement lists them.
TRUST_MODEL_DESCRIPTIONS: dict[TrustModel, str] = {
    TrustModel.OAMC: "one honest aggregator, most clients honest",
    TrustModel.OAOC: "one honest aggregator, only this client honest",
    TrustModel.OC: "no honest server (only this client trusted)",
}

AnyRecipe = Recipe | RecipeDraft

#: DAP-09 has two aggregators; each adds its own noise (004 §5), so the collector sees the sum.
AGGREGATORS = 2


class AnalysisError(InternalError, ValueError):
    """The collection does not fit the recipe (wrong aggregate length, bad candidate, ...)."""


# --- input ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Collection:
    """A completed collection: what `GET /collections/{id}` returns (DAP-09 §4.5.2)."""

    report_count: int
    #: The unsharded aggregate: one int per VDAF output coordinate (a single int for
    #: Prio3Count / Prio3Sum tasks).
    aggregate: tuple[int, ...] | int
    #: (start, duration) in seconds for time-interval tasks.
    interval: tuple[int, int] | None = None
    batch_id: str | None = None
    task_id: str | None = None


def collection_from_body(body: Mapping[str, Any]) -> Collection:
    """The `Collection` of a completed `GET /collections/{id}` response body."""
    if body.get("state") not in (None, "complete"):
        raise AnalysisError(f"collection is {body.get('state')}, not complete")
    count = body.get("report_count")
    result = body.get("result")
    if not isinstance(count, int) or count < 0:
        raise AnalysisError("the collection has no report_count")
    aggregate: tuple[int, ...] | int
    if isinstance(result, list) and all(isinstance(v, int) for v in result):
        aggregate = tuple(result)
    elif isinstance(result, int):
        aggregate = result
    else:
        raise AnalysisError("the collection result is neither an int nor a list of ints")
    interval = body.get("interval")
    span = (int(interval["start"]), int(interval["duration"])) if interval else None
    batch_id = body.get("batch_id")
    task_id = body.get("task_id")
    return Collection(
        count,
        aggregate,
        span,
        str(batch_id) if batch_id else None,
        str(task_id) if task_id else None,
    )


# --- output --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Item:
    """One output coordinate: a bucket (or candidate item, or bit pushing's mean / bit mean)."""

    label: str
    #: The one-hot index of the encoding (None for bit pushing's mean and bit means).
    index: int | None
    estimate: float
    stderr: float
    ci_low: float
    ci_high: float
    #: What the estimate must exceed not to be flagged: max(z * stderr, floor).
    threshold: float
    below_threshold: bool


@dataclass(frozen=True)
class TrustLine:
    """The guarantee that holds under one trust model of 004 §3.3."""

    trust_model: str
    description: str
    epsilon: float
    delta: float
    #: "replacement" or "deletion": which neighbouring datasets epsilon is about.
    neighbouring: str
    basis: str


@dataclass(frozen=True)
class PrivacyStatement:
    """(epsilon, delta) of this batch, computed from its report count (000 §3; 001 Theorem 4)
    and the aggregators' noise (004 §5)."""

    report_count: int
    min_batch_size: int
    below_min_batch: bool
    sampling_rate: float
    analysis: str
    neighbouring: str
    #: The accounting at this report count under OAMC (recipe: amplification after sampling
    #: at q, or the aggregator noise if stronger; plain task: the noise).
    epsilon: float
    delta: float
    #: What the recipe claims (plain task: what its noise was calibrated for, if stated).
    claimed_epsilon: float | None
    claimed_delta: float | None
    claim_met: bool | None
    #: The local randomizer's replacement epsilon (None: a plain task has none).
    local_epsilon: float | None
    guarantees: tuple[TrustLine, ...]
    notes: tuple[str, ...] = ()

    def lines(self) -> list[str]:
        """Human-readable statement, one fact per line."""
        out = [
            f"privacy: ({_num(self.epsilon)}, {self.delta:.3g})-DP for this batch of "
            f"{self.report_count} reports ({self.neighbouring} neighbours; {self.analysis} "
            f"analysis, sampling rate q={self.sampling_rate:g}, B={self.min_batch_size})",
        ]
        if self.claimed_epsilon is not None:
            who = "recipe claims" if self.local_epsilon is not None else "noise calibrated for"
            out.append(
                f"{who} ({self.claimed_epsilon:g}, {self.claimed_delta or 0:g}): "
                + ("met" if self.claim_met else "NOT met at this report count")
            )
        for g in self.guarantees:
            out.append(
                f"  {g.trust_model:<5} {g.description}: epsilon={_num(g.epsilon)}, "
                f"delta={g.delta:.3g} ({g.neighbouring}; {g.basis})"
            )
        out.extend(f"note: {n}" for n in self.notes)
        return out

    def headline(self) -> str:
        """One line for chart titles."""
        return (
            f"({_num(self.epsilon)}, {self.delta:.2g})-DP, {self.neighbouring}, "
            f"n={self.report_count}, OAMC; "
            + (
                f"local eps={self.local_epsilon:g}"
                if self.local_epsilon is not None
                else "no local randomizer"
            )
        )


@dataclass(frozen=True)
class Analysis:
    recipe_id: str | None
    recipe_version: int | None
    #: e.g. "one_hot(symmetric)", "cms", "hcms", "bit_pushing", "sfp", "none" (plain task).
    randomizer: str
    #: "count" (frequency estimates) or "mean" (bit pushing) or "raw" (plain task).
    statistic: str
    report_count: int
    interval: tuple[int, int] | None
    batch_id: str | None
    confidence: float
    threshold_level: float
    items: tuple[Item, ...]
    privacy: PrivacyStatement | None
    notes: tuple[str, ...] = ()


def _num(x: float) -> str:
    return "inf" if math.isinf(x) else f"{x:.4g}"


# --- labels --------------------------------------------------------------------------------------


def _feature_labels(feature: Feature) -> list[str]:
    """Bucket labels in bucket order (000 appendix B; `shared.recipe.model` bucket rules)."""
    if isinstance(feature, BucketFeature):
        b = feature.boundaries
        return [OOV, *(f"[{lo:g}, {hi:g})" for lo, hi in itertools.pairwise(b))]
    if isinstance(feature, CategoryFeature):
        return [OOV, *feature.values]
    if isinstance(feature, NgramFeature):
        # With n = 1 the only prefix is the empty root, which every 1-gram has: bucket 0 holds
        # only devices with no word at all, and naming it apart keeps the root's own OOV
        # bucket's label unique.
        out = [OOV if feature.n > 1 else f"{OOV} prefix"]
        for prefix in feature.prefixes:
            out += [" ".join((*prefix, last)) for last in (END, OOV, *feature.known_tokens)]
        return out
    assert isinstance(feature, IntegerFeature)
    return [str(i) for i in range(feature.size)]


def item_labels(encoding: Encoding) -> list[str]:
    """The label of every one-hot index (mixed radix, first feature most significant).

    One feature: its bucket label ("<OOV>", "[20, 30)", "fr", "hello world <END>"); several:
    "field=label" joined by ", ".
    """
    per_feature = [_feature_labels(f) for f in encoding.features]
    if len(per_feature) == 1:
        return per_feature[0]
    names = [f.field for f in encoding.features]
    return [
        ", ".join(f"{n}={v}" for n, v in zip(names, combo, strict=True))
        for combo in itertools.product(*per_feature)
    ]


# --- estimates -----------------------------------------------------------------------------------


def _items(
    labels: Sequence[str],
    indices: Sequence[int | None],
    est: Estimate,
    confidence: float,
    threshold_level: float,
    floor: float,
) -> tuple[Item, ...]:
    lo, hi = est.ci(confidence)
    # One-sided: the question is "is this count above zero", not "is it different from zero".
    z = one_sided_z(threshold_level)
    keep = est.significant(threshold_level, floor)
    return tuple(
        Item(
            label,
            index,
            float(v),
            float(s),
            float(a),
            float(b),
            max(z * float(s), floor),
            not bool(k),
        )
        for label, index, v, s, a, b, k in zip(
            labels, indices, est.value, est.stderr, lo, hi, keep, strict=True
        )
    )


def _check_length(aggregate: npt.NDArray[np.int64], expected: int, what: str) -> None:
    if aggregate.size != expected:
        raise AnalysisError(
            f"the aggregate has {aggregate.size} coordinates; {what} needs {expected}"
        )


def _candidate_indices(
    encoding: Encoding, labels: Sequence[str] | None, candidates: Sequence[int | str] | None
) -> list[int]:
    d = encoding.dimension
    if candidates is None:
        if d > MAX_DEFAULT_CANDIDATES:
            raise AnalysisError(
                f"the encoding has {d} items; pass the candidate dictionary to estimate"
            )
        return list(range(d))
    by_label = {lab: i for i, lab in enumerate(labels)} if labels is not None else {}
    out: list[int] = []
    for c in candidates:
        if isinstance(c, str):
            if c not in by_label:
                raise AnalysisError(f"candidate {c!r} is not an item of the recipe's encoding")
            out.append(by_label[c])
        elif 0 <= c < d:
            out.append(int(c))
        else:
            raise AnalysisError(f"candidate index {c} is outside [0, {d})")
    if len(set(out)) != len(out):
        raise AnalysisError("candidates must not repeat")
    return out


def _labels_if_small(encoding: Encoding) -> list[str] | None:
    if any(isinstance(f, IntegerFeature) for f in encoding.features):
        return None
    return item_labels(encoding) if encoding.dimension <= 10 * MAX_DEFAULT_CANDIDATES else None


def analyze(
    recipe: AnyRecipe | None,
    collection: Collection,
    *,
    confidence: float = DEFAULT_CONFIDENCE,
    threshold_level: float = DEFAULT_THRESHOLD_LEVEL,
    floor: float = 0.0,
    candidates: Sequence[int | str] | None = None,
    task: CollectorTaskInfo | None = None,
) -> Analysis:
    """The `Analysis` of a completed collection of `recipe`'s task.

    `confidence`: two-sided level of the intervals. `threshold_level`, `floor`: the thresholding
    rule of the module docstring. `candidates` (CMS / HCMS only): the dictionary to estimate, as
    one-hot indices or item labels; the device sketches its one-hot index (`client_sdk.query`),
    so any index of the encoding can be a candidate; default every index.

    `recipe=None` (a plain DAP task with no local randomizer): the raw counts, stderr 0 (or the
    aggregator noise's), no privacy statement.

    SFP (002 §4.3): the aggregate is decoded into the word sketch and the per-position fragment
    sketches (`vdaf_mapping.sfp_sketches_from_aggregate`); Algorithm 10 builds the candidate
    dictionary and the word sketch estimates it. The items are the discovered words (pad
    stripped; the all-pad answer of devices without a valid word is OOV), those whose estimate
    clears the threshold rule at the Bonferroni level 1 - (1 - threshold_level) / candidates,
    which the analysis reports as its threshold level.

    `task`: the collector's task; with aggregator noise (the task's or the recipe's), the module
    docstring's decoding, standard errors and privacy statement apply (004 §5).
    """
    z_value(confidence)  # validates the level
    if not 0.5 < threshold_level < 1:
        raise ValueError("threshold_level must be in (0.5, 1)")
    noise = _noise(recipe, task)
    if noise is not None:
        collection = _decode_noised(collection, _vdaf(recipe, task))
    noise_var = AGGREGATORS * noise.variance if noise is not None else 0.0
    n = collection.report_count
    if recipe is None:
        privacy = None
        if noise is not None:
            assert task is not None  # _noise: a plain task's noise is its task's
            privacy = noise_privacy_statement(task, noise, n)
        return _raw_analysis(collection, confidence, threshold_level, noise_var, floor, privacy)
    if isinstance(collection.aggregate, int):
        raise AnalysisError("a recipe task's aggregate is a vector, not a single int")
    agg = np.asarray(collection.aggregate, dtype=np.int64)
    r = recipe.randomizer
    notes: list[str] = []
    statistic = "count"
    # Real reports among the n (module docstring, dummy reports): expected count and variance.
    rho = real_report_share(recipe.sampling_rate, recipe.dummy_rate)
    real, real_var = n * rho, n * rho * (1 - rho)
    if rho < 1:
        notes.append(
            f"dummy reports at q'={recipe.dummy_rate:g}: the estimates take n rho = {real:.1f} "
            f"of the {n} reports as real (rho = {rho:.4g})"
        )
    if isinstance(r, OneHotRandomizer):
        d = recipe.encoding.dimension
        _check_length(agg, d, f"one_hot over {d} buckets")
        one_hot = DpOneHot(r.eps0, d, r.symmetric)
        est = one_hot.estimate(agg, real)
        if noise_var:
            # The debias is affine per coordinate: estimate_j = gain_j * sum_j + offset_j, so
            # the aggregate's added variance reaches estimate_j times gain_j^2.
            gain = one_hot.debias(np.ones(d), real) - one_hot.debias(np.zeros(d), real)
            est = est.plus_variance(gain**2 * noise_var)
        est = est.plus_variance(
            _count_slope(lambda k: one_hot.debias(agg, k), real) ** 2 * real_var
        )
        labels = item_labels(recipe.encoding)
        items = _items(labels, list(range(d)), est, confidence, threshold_level, floor)
        name = f"one_hot({'symmetric' if r.symmetric else 'asymmetric'})"
    elif isinstance(r, CmsRandomizer | HcmsRandomizer):
        all_labels = _labels_if_small(recipe.encoding)
        chosen = _candidate_indices(recipe.encoding, all_labels, candidates)
        # The device hashes the decimal string of its one-hot index (`client_sdk.query`).
        keys = item_keys(chosen)
        if isinstance(r, CmsRandomizer):
            cms = CountMeanSketch(r.eps0, r.k, r.m, r.seed)
            _check_length(agg, r.k * r.m + r.k, f"cms(k={r.k}, m={r.m})")
            rows = int(agg[r.k * r.m :].sum())
            if _off(rows, real, r.k * noise_var + real_var):
                # MultiHotHistogram bounds a report's weight, not its row indicator: a
                # malicious client can set none or several (vdaf_mapping docstring).
                notes.append(f"row indicators sum to {rows}, not {_reports(n, rho)}")
            sketch = cms_sketch_from_aggregate(cms, agg)
            est = cms.estimate(sketch, real, keys)
            est = est.plus_variance(cms_noise_variance(cms, noise_var))
            slope = _count_slope(lambda k: cms.estimate_counts(sketch, k, keys), real)
            name = "cms"
        else:
            hcms = HadamardCountMeanSketch(r.eps0, r.k, r.m, r.seed)
            _check_length(agg, 2 * r.k * r.m, f"hcms(k={r.k}, m={r.m})")
            if _off(int(agg.sum()), real, agg.size * noise_var + real_var):
                notes.append(f"the aggregate sums to {int(agg.sum())}, not {_reports(n, rho)}")
            sketch = hcms_sketch_from_aggregate(hcms, agg)
            est = hcms.estimate(sketch, real, keys)
            est = est.plus_variance(hcms_noise_variance(hcms, noise_var))
            slope = _count_slope(lambda k: hcms.estimate_counts(sketch, k, keys), real)
            name = "hcms"
        est = est.plus_variance(slope**2 * real_var)
        labels = [all_labels[i] if all_labels else str(i) for i in chosen]
        items = _items(labels, chosen, est, confidence, threshold_level, floor)
        notes.append(
            f"sketch estimates for {len(chosen)} candidates; the variance's collision term "
            "takes them as the whole dictionary (002 §4)"
        )
    elif isinstance(r, SfpRandomizer):
        if candidates is not None:
            raise AnalysisError("sfp discovers its own dictionary; it takes no candidates")
        items, threshold_level, sfp_notes = _sfp_items(
            r, agg, n, rho, confidence, threshold_level, floor, noise_var
        )
        notes.extend(sfp_notes)
        name = "sfp"
    else:
        assert isinstance(r, BitPushingRandomizer)
        feature = recipe.encoding.features[0]
        assert isinstance(feature, IntegerFeature)
        bp = BitPushing(feature.bits, r.eps0)
        _check_length(agg, 2 * feature.bits, f"bit_pushing over {feature.bits} bits")
        if _off(int(agg.sum()), real, agg.size * noise_var + real_var):
            notes.append(f"the aggregate sums to {int(agg.sum())}, not {_reports(n, rho)}")
        tallies = bit_tallies_from_aggregate(bp, agg)
        items = _bit_pushing_items(
            bp, tallies, feature.field, confidence, threshold_level, floor, noise_var
        )
        if np.any(tallies.reports == 0):
            notes.append("some bits have no report: their mean is taken as 0")
        name = "bit_pushing"
        statistic = "mean"
        notes.append(
            f"mean of {feature.field} (003 §3); a variance needs a second collection, of the "
            "squares (E[X^2] - E[X]^2) or of centred squares (003 §3.3)"
        )
    return Analysis(
        recipe.recipe_id,
        recipe.version,
        name,
        statistic,
        n,
        collection.interval,
        collection.batch_id,
        confidence,
        threshold_level,
        items,
        privacy_statement(recipe, n, task),
        tuple(notes),
    )


#: How many standard deviations of the summed aggregator noise a checked total (reports per
#: row, reports in all) may be off before the analysis notes it; without noise, any difference.
NOISE_TOLERANCE_SDS = 6.0


def _off(total: int, expected: float, variance: float) -> bool:
    """Whether a checked total is off by more than its randomness (the aggregator noise's,
    the dummies') explains."""
    return abs(total - expected) > NOISE_TOLERANCE_SDS * math.sqrt(variance)


def _reports(n: int, rho: float) -> str:
    """What a checked total should be near: the report count, or with dummies n rho."""
    return f"report_count {n}" if rho >= 1 else f"n rho = {n * rho:.1f} real reports of {n}"


def _count_slope(estimate: Callable[[float], FloatArray], count: float) -> FloatArray:
    """How much each estimate moves per report of the count its debias subtracts for (the
    estimators are affine in it, so one difference is exact)."""
    return np.asarray(estimate(count + 1) - estimate(count), dtype=np.float64)


def _noise(recipe: AnyRecipe | None, task: CollectorTaskInfo | None) -> AggregatorNoise | None:
    """The aggregators' noise: the task's (what they were provisioned with), else the recipe's.
    A recipe whose noise the task does not have is refused: either the aggregators did not add
    what the recipe promised, or the collector would decode and account for the wrong noise."""
    stated = recipe.aggregator_noise if recipe is not None else None
    actual = task.aggregator_noise if task is not None else None
    if task is not None and stated is not None and actual != stated:
        raise AnalysisError(
            f"the recipe's aggregator noise is not task {task.task_id}'s: "
            f"{stated.model_dump(exclude_none=True)} against "
            f"{actual.model_dump(exclude_none=True) if actual else 'none'}"
        )
    return actual if actual is not None else stated


def _vdaf(recipe: AnyRecipe | None, task: CollectorTaskInfo | None) -> VdafSpec:
    """The task's VDAF: the collector's task if known, else the recipe's."""
    if task is not None:
        return task.vdaf
    assert recipe is not None
    if isinstance(recipe, Recipe):
        return recipe.task.vdaf
    draft = VDAF_OF_DAP[recipe.task.dap or "dap-09"]
    return recipe.task.vdaf or expected_vdaf(recipe.randomizer, recipe.encoding, draft)


def _decode_noised(collection: Collection, vdaf: VdafSpec) -> Collection:
    """The aggregate as signed integers (004 §5): noise may take a total below 0, which the
    field holds as p - |total|; `decode_signed` is exact while |total| < p/2."""
    field = vdaf.instance().field
    raw = collection.aggregate
    values = [raw] if isinstance(raw, int) else list(raw)
    if any(not 0 <= v < field.MODULUS for v in values):
        raise AnalysisError("the aggregate is not a vector of field elements")
    signed = decode_signed(field, values)
    aggregate: tuple[int, ...] | int = signed[0] if isinstance(raw, int) else tuple(signed)
    return Collection(
        collection.report_count,
        aggregate,
        collection.interval,
        collection.batch_id,
        collection.task_id,
    )


def _bit_pushing_items(
    bp: BitPushing,
    tallies: BitTallies,
    field: str,
    confidence: float,
    threshold_level: float,
    floor: float,
    noise_var: float = 0.0,
) -> tuple[Item, ...]:
    """003 §3: the mean, then each bit's debiased mean (variance as in `BitPushing.mean`, with
    the aggregators' noise of `noise_var` per tally)."""
    mean = bp.mean(tallies, noise_variance=noise_var)
    means = bp.bit_means(tallies)
    var_j = bp.bit_variances(tallies, means)
    if noise_var:
        var_j = var_j + bp.aggregate_noise_variances(tallies, noise_var)
    bits = Estimate(np.asarray(means, dtype=np.float64), np.sqrt(var_j))
    labels = [f"mean({field})", *(f"bit {j}" for j in range(bp.bits))]
    combined = Estimate(
        np.concatenate([mean.value, bits.value]), np.concatenate([mean.stderr, bits.stderr])
    )
    return _items(labels, [None] * len(labels), combined, confidence, threshold_level, floor)


def sfp_label(r: SfpRandomizer, word: str) -> str:
    """The item label of an SFP word: padded or truncated as the device sketched it, the pad
    stripped; the all-pad answer (no valid word on the device) is OOV."""
    return word[: r.length].rstrip(r.pad) or OOV


def _sfp_items(
    r: SfpRandomizer,
    agg: npt.NDArray[np.int64],
    n: int,
    rho: float,
    confidence: float,
    threshold_level: float,
    floor: float,
    noise_var: float = 0.0,
) -> tuple[tuple[Item, ...], float, list[str]]:
    """002 Algorithm 10 on the decoded sketches: the discovered words, largest first, and the
    per-candidate level they cleared (see `analyze`). The word estimates are CMS estimates on
    the word sketch, so aggregator noise of `noise_var` per coordinate adds
    `cms_noise_variance` of that sketch; `rho` is the real share of the n reports (module
    docstring, dummy reports)."""
    sfp = r.puzzle()
    _check_length(agg, sfp_length(sfp), f"sfp(length={r.length}, fragment={r.fragment_length})")
    notes: list[str] = []
    sketches = sfp_sketches_from_aggregate(sfp, agg)
    real, real_var = n * rho, n * rho * (1 - rho)
    word_rows = sfp.word_sketch.k
    if _off(int(sketches.n), real, word_rows * noise_var + real_var):
        notes.append(f"word row indicators sum to {sketches.n:g}, not {_reports(n, rho)}")
    fragment_reports = [m for _, m in sketches.fragments]
    fragment_rows = len(fragment_reports) * sfp.fragment_sketch.k
    if _off(sum(fragment_reports), real, fragment_rows * noise_var + real_var):
        notes.append(
            f"fragment row indicators sum to {sum(fragment_reports)}, not {_reports(n, rho)}"
        )
    try:
        words, est = sfp_candidate_estimates(sfp, replace(sketches, n=real), r.top)
    except ValueError as exc:
        raise AnalysisError(str(exc)) from None
    est = est.plus_variance(cms_noise_variance(sfp.word_sketch, noise_var))
    if real_var:
        slope = _count_slope(lambda k: sfp.word_estimates(replace(sketches, n=k), words), real)
        est = est.plus_variance(slope**2 * real_var)
    # Bonferroni over the data-dependent dictionary: about 1 - threshold_level false
    # discoveries in all, instead of that many per candidate.
    level = 1 - (1 - threshold_level) / max(1, len(words))
    keep = np.flatnonzero(est.significant(level, floor))
    keep = keep[np.argsort(-est.value[keep], kind="stable")]
    labels = [sfp_label(r, words[i]) for i in keep]
    found = Estimate(est.value[keep], est.stderr[keep])
    items = _items(labels, [None] * len(labels), found, confidence, level, floor)
    notes.append(
        f"{len(words)} candidate words from the top {r.top} fragments of each of "
        f"{len(sketches.fragments)} positions (002 Algorithm 10; reports per position "
        f"{', '.join(map(str, fragment_reports))}); {len(labels)} significant at one-sided "
        f"level {level:.6g} = 1 - (1 - {threshold_level:g}) / {max(1, len(words))} (Bonferroni)"
    )
    return items, level, notes


def _raw_analysis(
    collection: Collection,
    confidence: float,
    threshold_level: float,
    noise_var: float = 0.0,
    floor: float = 0.0,
    privacy: PrivacyStatement | None = None,
) -> Analysis:
    raw = collection.aggregate
    values = [raw] if isinstance(raw, int) else list(raw)
    labels = ["value"] if isinstance(raw, int) else [str(i) for i in range(len(values))]
    indices: list[int | None] = [None] if isinstance(raw, int) else list(range(len(values)))
    if noise_var:
        # The aggregators' noise is the only randomness left in a plain task's aggregate.
        est = Estimate(
            np.asarray(values, dtype=np.float64), np.full(len(values), math.sqrt(noise_var))
        )
        items = _items(labels, indices, est, confidence, threshold_level, floor)
        note = "plain task: raw aggregate plus aggregator noise, no local randomizer"
    else:
        items = tuple(
            Item(lab, i, float(v), 0.0, float(v), float(v), 0.0, False)
            for lab, i, v in zip(labels, indices, values, strict=True)
        )
        note = "plain task: raw aggregate, no local randomizer, no privacy statement"
    return Analysis(
        None,
        None,
        "none",
        "raw",
        collection.report_count,
        collection.interval,
        collection.batch_id,
        confidence,
        threshold_level,
        items,
        privacy,
        (note,),
    )


# --- privacy -------------------------------------------------------------------------------------


def _neighbouring(analysis: amp.Analysis) -> str:
    # Only the deletion-exact analysis compares a client's report with the all-noise reference;
    # every other analysis (and every local eps0 here) is about replacing one client's data.
    return "deletion" if analysis == "sym_rappor_deletion_exact" else "replacement"


def privacy_statement(
    recipe: AnyRecipe, report_count: int, task: CollectorTaskInfo | None = None
) -> PrivacyStatement:
    """The (epsilon, delta) of a batch of `report_count` reports of `recipe`, per trust model.

    `accounting.trust_model_guarantees` at this report count: amplification by aggregation
    (000 Theorem 3.1 or the numerical analyses, then 001 Theorem 4 for sampling at q, with the
    recipe's delta split) and, with aggregator noise (the task's or the recipe's), the noise's
    own guarantee; OAMC states the better of the two, OAOC the better of the noise and the
    local eps0, OC the local eps0 (other clients may be malicious or the servers collude, so
    neither amplification nor sampling secrecy can be relied on there).
    """
    claim = recipe.privacy
    q = recipe.sampling_rate
    n = report_count
    notes: list[str] = []
    noise = _noise(recipe, task)
    vdaf = _vdaf(recipe, task)
    central = noise_guarantee(noise, vdaf, claim.delta) if noise is not None else None
    if noise is not None and central is None:
        notes.append(f"aggregator noise: no sensitivity known for {vdaf.type}")
    if n < 1:
        notes.append("no report: nothing was released, no amplification to state")
    # The analyses need n >= 1; with none there is no amplification (+inf) to take.
    found = trust_model_guarantees(recipe, max(n, 1), noise, vdaf)
    amplified_basis = f"amplification by aggregation ({claim.analysis}, n={max(n, 1)})"
    if central is not None and n >= 1:
        # Both mechanisms hold under OAMC; the line states the stronger, this note both.
        alone = trust_model_guarantees(recipe, n)[TrustModel.OAMC]
        notes.append(
            f"OAMC: amplification alone gives epsilon={_num(alone.eps)}, the aggregator noise "
            f"alone epsilon={_num(central.eps)} (delta {central.delta:.3g})"
        )
    lines: list[TrustLine] = []
    for model, text in TRUST_MODEL_DESCRIPTIONS.items():
        g = found[model]
        eps = math.inf if n < 1 and g.basis.startswith(amplified_basis) else g.eps
        # Only the amplification analyses may be about deletion; noise and eps0 are replacement.
        neighbouring = (
            _neighbouring(claim.analysis) if g.basis.startswith(amplified_basis) else "replacement"
        )
        lines.append(TrustLine(model.value, text, eps, g.delta, neighbouring, g.basis))
    oamc = lines[0]
    below = n < recipe.min_batch_size
    if below:
        notes.append(
            f"report_count {n} < B = {recipe.min_batch_size}: the aggregators should not have "
            "released this batch; the OAMC epsilon above is for the smaller batch"
        )
    if math.isinf(oamc.epsilon):
        notes.append(f"the {claim.analysis} analysis does not apply at n={n}")
    # Same slack as accounting.assess_privacy: the bisections overshoot by up to EPS_TOL.
    met = oamc.epsilon <= claim.epsilon + amp.EPS_TOL and oamc.delta <= claim.delta * (1 + 1e-12)
    return PrivacyStatement(
        report_count=n,
        min_batch_size=recipe.min_batch_size,
        below_min_batch=below,
        sampling_rate=q,
        analysis=claim.analysis,
        neighbouring=oamc.neighbouring,
        epsilon=oamc.epsilon,
        delta=oamc.delta,
        claimed_epsilon=claim.epsilon,
        claimed_delta=claim.delta,
        claim_met=met,
        local_epsilon=recipe.randomizer.local_epsilon,
        guarantees=tuple(lines),
        notes=tuple(notes),
    )


#: The delta at which a plain task's Gaussian noise is stated when its setting names none
#: (004 Table 2 calibrates at 1e-9).
PLAIN_TASK_DELTA = 1e-9


def noise_privacy_statement(
    task: CollectorTaskInfo, noise: AggregatorNoise, report_count: int
) -> PrivacyStatement | None:
    """A plain task's guarantee: only the aggregators' noise (004 §5), so it holds under OAMC and
    OAOC alike (one honest aggregator suffices) and not under OC (no local randomizer). The
    Gaussian is stated at the setting's delta, else `PLAIN_TASK_DELTA`. None when no
    sensitivity is known for the task's VDAF."""
    delta = noise.delta if noise.delta else PLAIN_TASK_DELTA
    found = noise_guarantee(noise, task.vdaf, delta)
    if found is None:
        return None
    n = report_count
    notes = ["OC: no guarantee; without a local randomizer colluding aggregators see every report"]
    below = n < task.min_batch_size
    if below:
        notes.append(
            f"report_count {n} < B = {task.min_batch_size}: the aggregators should not have "
            "released this batch"
        )
    met = None
    if noise.epsilon is not None:
        met = found.eps <= noise.epsilon * (1 + CALIBRATION_RTOL)
        if not met:
            notes.append(
                f"the noise was calibrated for epsilon={noise.epsilon:g}, but gives "
                f"{_num(found.eps)} at the VDAF's sensitivity"
            )
    lines = tuple(
        TrustLine(
            model.value,
            TRUST_MODEL_DESCRIPTIONS[model],
            found.eps,
            found.delta,
            "replacement",
            found.basis,
        )
        for model in (TrustModel.OAMC, TrustModel.OAOC)
    )
    return PrivacyStatement(
        report_count=n,
        min_batch_size=task.min_batch_size,
        below_min_batch=below,
        sampling_rate=1.0,
        analysis=f"aggregator noise ({noise.mechanism})",
        neighbouring="replacement",
        epsilon=found.eps,
        delta=found.delta,
        claimed_epsilon=noise.epsilon,
        claimed_delta=noise.delta if noise.epsilon is not None else None,
        claim_met=met,
        local_epsilon=None,
        guarantees=lines,
        notes=tuple(notes),
    )


# --- writers -------------------------------------------------------------------------------------


def _finite(value: Any) -> Any:
    """JSON has no infinity: non-finite floats become null (the notes say why)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def to_document(analysis: Analysis) -> dict[str, Any]:
    """The analysis as plain JSON-able data (what `to_json` writes)."""
    doc = _finite(asdict(analysis))
    assert isinstance(doc, dict)
    if analysis.interval is not None:
        doc["interval"] = {"start": analysis.interval[0], "duration": analysis.interval[1]}
    if analysis.privacy is not None:
        doc["privacy"]["statement"] = analysis.privacy.lines()
    return doc


def to_json(analysis: Analysis) -> str:
    return json.dumps(to_document(analysis), indent=2, allow_nan=False)


CSV_COLUMNS = (
    "index",
    "label",
    "estimate",
    "stderr",
    "ci_low",
    "ci_high",
    "threshold",
    "below_threshold",
)


def to_csv(analysis: Analysis) -> str:
    """One row per item (full float precision); the privacy statement is in JSON / table only."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for it in analysis.items:
        writer.writerow(
            [
                "" if it.index is None else it.index,
                it.label,
                repr(it.estimate),
                repr(it.stderr),
                repr(it.ci_low),
                repr(it.ci_high),
                repr(it.threshold),
                "true" if it.below_threshold else "false",
            ]
        )
    return out.getvalue()


def _fmt(x: float) -> str:
    if math.isinf(x) or math.isnan(x):
        return str(x)
    if x != 0 and (abs(x) < 1e-3 or abs(x) >= 1e9):
        return f"{x:.4g}"
    return f"{x:.3f}".rstrip("0").rstrip(".")


def to_table(analysis: Analysis, max_rows: int | None = None) -> str:
    """Aligned text: a header, one row per item (estimate, +- CI half-width, interval, flag),
    then the privacy statement. `max_rows`: show only the largest estimates."""
    a = analysis
    pct = f"{100 * a.confidence:g}%"
    head = [
        f"recipe        {a.recipe_id} v{a.recipe_version}"
        if a.recipe_id
        else "recipe        (none: plain task)",
        f"randomizer    {a.randomizer}",
        f"reports       {a.report_count}",
    ]
    if a.interval is not None:
        head.append(f"interval      start {a.interval[0]}, {a.interval[1]} s")
    if a.batch_id:
        head.append(f"batch         {a.batch_id}")
    items = list(a.items)
    hidden = 0
    if max_rows is not None and len(items) > max_rows:
        keep = sorted(items, key=lambda it: -it.estimate)[:max_rows]
        hidden = len(items) - max_rows
        order = {id(it): i for i, it in enumerate(a.items)}
        items = sorted(keep, key=lambda it: order[id(it)])
    rows = [
        (
            it.label,
            _fmt(it.estimate),
            f"± {_fmt((it.ci_high - it.ci_low) / 2)}",
            f"[{_fmt(it.ci_low)}, {_fmt(it.ci_high)}]",
            "below threshold" if it.below_threshold else "",
        )
        for it in items
    ]
    titles = (
        "item",
        a.statistic if a.statistic != "raw" else "value",
        f"± ({pct})",
        f"{pct} CI",
        "",
    )
    widths = [max([len(titles[c])] + [len(r[c]) for r in rows]) for c in range(5)]

    def line(cells: Sequence[str]) -> str:
        parts = [
            cells[0].ljust(widths[0]),
            cells[1].rjust(widths[1]),
            cells[2].rjust(widths[2]),
            cells[3].rjust(widths[3]),
            cells[4],
        ]
        return "  ".join(parts).rstrip()

    body = [line(titles), *(line(r) for r in rows)]
    if hidden:
        body.append(f"... {hidden} smaller items not shown")
    tail: list[str] = []
    if a.privacy is None and a.statistic != "raw":
        tail.append("privacy: no statement")
    if a.privacy is not None:
        flagged = sum(it.below_threshold for it in a.items)
        tail.append(
            f"{flagged} of {len(a.items)} items below threshold (estimate <= z * stderr at "
            f"one-sided level {a.threshold_level:g})"
        )
        tail.extend(a.privacy.lines())
    tail.extend(f"note: {n}" for n in a.notes)
    return "\n".join([*head, "", *body, "", *tail]).rstrip()
