"""How each randomized report maps onto a Prio3 VDAF, and back (004 §6; VDAF-08 §7.4, VDAF-20 §7.4).

The aggregators only ever see secret shares; what the collector receives is the sum of the
encoded measurements, from which each randomizer's server side rebuilds its statistic.

| randomizer | VDAF | measurement | honest weight |
|---|---|---|---|
| no client noise (004 §6.1.2) | Prio3Histogram(d) | bucket index | 1 |
| symmetric RAPPOR (004 §6.1.1) | Prio3MultiHotHistogram(d, m) | the d bits | 1 + Bin(d-1, q) |
| asymmetric one-hot | Prio3MultiHotHistogram(d, m) | the d bits | Bern(1/2) + Bin(d-1, q) |
| CMS | Prio3MultiHotHistogram(k m + k, m') | bits (v~+1)/2 in row j, then e_j | below |
| HCMS | Prio3Histogram(2 k m) | index of (j, l, sign) | 1 |
| bit pushing | Prio3Histogram(2 b) | index 2 j + bit | 1 |
| SFP | Prio3MultiHotHistogram(k m + k + P (k' m' + k'), m'') | word, fragment CMS | below |

The multi-hot bound m is the smallest with P(honest weight > m) <= p_fail (004 §6.1.1: the
false-rejection rate of honest clients); a malicious client can then set at most m bits. For CMS
the weight is Bern(1 - p) + Bin(m-1, p) + 1 with p = 1/(1+e^(eps/2)); the bound limits a
malicious client to m' ones anywhere in the sketch. CMS and HCMS are dense over the k x m sketch
(report sizes grow as k m: fine for the small sketches of tests and simulations, impractical for
002's deployed k = 65536); since j and l are independent of the data, a deployment could send
them in the clear and aggregate per row instead -- not done here.

SFP (002 §4.3) is one measurement, two CMS blocks laid out as above and concatenated:

    [word bits in row j (k m) | e_j (k) | fragment bits in row (l, j') (P k' m') | e_(l,j') (P k')]

with P = length / fragment_length positions. The fragment block is a CMS block of P k' rows:
row l k' + j' holds the fragment report of a device that chose position l and hash j', so the
row indicators say how many reports each position's sketch has (Algorithm 10's S_l) and the
aggregate splits into the word sketch and P fragment sketches (`sfp_sketches_from_aggregate`).
The honest weight is the sum of the two blocks' independent CMS weights; m'' bounds it at
p_fail, so a malicious client sets at most m'' ones anywhere (it could, as for CMS, skip or
double row indicators, which the collector notes). This is the cheapest shape that keeps
everything inside the validity circuit: a Histogram cannot carry the m noisy bits, a SumVec
with bits = 1 costs the same length with no weight bound, and two separate tasks would need two
reports, two tokens and two batches. Measurement lengths (Field128, about 16 bytes per
coordinate in the leader's input share):

- the new-words demo (`deploy.demo.new_words`: length 6, fragment 2, (eps, k, m) =
  (3, 16, 64), (eps', k', m') = (5, 16, 32)): 1040 + 3 x 528 = 2624 coordinates, m'' = 46,
  45,840 bytes per report;
- 002's deployed parameters (length 10, fragment 2, (k, m) = (k', m') = (2048, 1024),
  (eps, eps') = (2, 6)): 6 x 2,099,200 = 12,595,200 coordinates, m'' = 442, about 200 MB per
  report -- beyond `VdafSpec`'s 10^6 and any upload; it would need j and j' in the clear.

`chunk_length` defaults to about sqrt(measurement length), the VDAF-08 §7.4.4 recommendation.

Each `*_spec` takes the VDAF draft of the task (`draft`, VDAF-08 for a DAP-09 task, VDAF-20 for
a DAP-19 one). The encodings are the same in both: Prio3Histogram keeps its name and
parameters, and VDAF-20's Prio3MultihotCountVec(length, max_weight) is VDAF-08's
Prio3MultiHotHistogram(length, max_count) registered under a new name (VDAF-20 §7.4.5: at most
max_weight ones, the weight range-checked on `max_weight.bit_length()` bits, as VDAF-08
does), so a measurement, its aggregate and every estimator below are draft-independent.

Aggregator noise (004 §5) adds independent noise of variance V to every aggregate coordinate.
The sketch estimates are linear in the aggregate, so V reaches an estimate f~(d) scaled by the
squared coefficients of the coordinates it reads (`cms_noise_variance`, `hcms_noise_variance`):
  CMS: row l contributes k c ones[l, h_l(d)] + k (1 - c)/2 rows[l], divided by k, for each of
       the k rows: (m/(m-1))^2 k V (c^2 + (c - 1)^2 / 4);
  HCMS: M_H[j, l] = k c (agg[j, l, +] - agg[j, l, -]) has variance 2 k^2 c^2 V, the transform
       sums m of them with signs +-1, and the estimate averages k rows: (m/(m-1))^2 2 k m c^2 V.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

# The binomial functions (`shared.dp.binomial`, on scipy.special) are imported by the functions
# that use them: a third of a second of a process's start, and most processes importing this
# module (every service, the CLI) never call them.
from shared.dp.estimators import FloatArray
from shared.dp.randomizers.bitpushing import BitPushing, BitReports, BitTallies
from shared.dp.randomizers.cms import (
    CmsReports,
    CountMeanSketch,
    HadamardCountMeanSketch,
    HcmsReports,
    IntArray,
    fwht,
)
from shared.dp.randomizers.onehot import OneHotRandomizer
from shared.dp.randomizers.sfp import SequenceFragmentPuzzle, SfpReports, SfpSketches
from shared.vdaf.spec import VdafSpec, VdafVersion

#: Default honest false-rejection rate for multi-hot weight bounds.
DEFAULT_P_FAIL = 2.0**-40


def chunk_length_for(meas_len: int) -> int:
    return max(1, math.isqrt(meas_len))


def smallest_bound(survival: Callable[[int], float], p_fail: float, upper: int) -> int:
    """Smallest m in [1, upper] with survival(m) = P(W > m) <= p_fail (upper if none)."""
    lo, hi = 1, upper
    if survival(hi) > p_fail:
        return upper
    while lo < hi:
        mid = (lo + hi) // 2
        if survival(mid) <= p_fail:
            hi = mid
        else:
            lo = mid + 1
    return lo


def one_hot_max_count(rand: OneHotRandomizer, p_fail: float = DEFAULT_P_FAIL) -> int:
    """004 §6.1.1: the weight bound m for a randomized one-hot report."""
    d, q = rand.length, rand.p_false

    def survival(m: int) -> float:
        # W = B + C, B ~ Bern(p_true) the true item's bit, C ~ Bin(d-1, q).
        from shared.dp import binomial  # noqa: PLC0415

        c_sf = binomial.sf
        return float(rand.p_true * c_sf(m - 1, d - 1, q) + (1 - rand.p_true) * c_sf(m, d - 1, q))

    return smallest_bound(survival, p_fail, d)


def histogram_spec(length: int, draft: VdafVersion = "VDAF-08") -> VdafSpec:
    return VdafSpec.of_histogram(length, chunk_length_for(length), draft)


def multihot_spec(length: int, max_ones: int, draft: VdafVersion = "VDAF-08") -> VdafSpec:
    """The multi-hot vector of `draft`, chunked by the circuit's measurement length (the
    bits, then the weight's bits)."""
    return VdafSpec.of_multihot(
        length, max_ones, chunk_length_for(length + max_ones.bit_length()), draft
    )


def one_hot_spec(
    rand: OneHotRandomizer, p_fail: float = DEFAULT_P_FAIL, draft: VdafVersion = "VDAF-08"
) -> VdafSpec:
    return multihot_spec(rand.length, one_hot_max_count(rand, p_fail), draft)


def encode_one_hot(reports: npt.NDArray[np.uint8]) -> list[list[int]]:
    """Each report's bits as the MultiHotHistogram measurement."""
    return [[int(b) for b in row] for row in np.asarray(reports)]


def cms_max_count(cms: CountMeanSketch, p_fail: float = DEFAULT_P_FAIL) -> int:
    p, m = cms.flip_probability, cms.m

    def survival(w: int) -> float:
        # W - 1 = Bern(1 - p) + Bin(m - 1, p); the extra 1 is the row indicator.
        from shared.dp import binomial  # noqa: PLC0415

        c_sf = binomial.sf
        return float((1 - p) * c_sf(w - 2, m - 1, p) + p * c_sf(w - 1, m - 1, p))

    return smallest_bound(survival, p_fail, m + 1)


def cms_spec(
    cms: CountMeanSketch, p_fail: float = DEFAULT_P_FAIL, draft: VdafVersion = "VDAF-08"
) -> VdafSpec:
    return multihot_spec(cms.k * cms.m + cms.k, cms_max_count(cms, p_fail), draft)


def _cms_block(rows: int, m: int, j: IntArray, signs: npt.NDArray[np.int8]) -> IntArray:
    """Measurements (n, rows m + rows): bits (v~+1)/2 in row j's m cells, then e_j."""
    n = j.size
    out = np.zeros((n, rows * m + rows), dtype=np.int64)
    idx = np.arange(n)
    out[idx[:, None], j[:, None] * m + np.arange(m)[None, :]] = (signs + 1) // 2
    out[idx, rows * m + j] = 1
    return out


def _cms_rows(cms: CountMeanSketch, ones: FloatArray, per_row: FloatArray) -> FloatArray:
    """Sketch rows from the summed bits (..., m) and the reports per row (..., 1)."""
    # sum of v~ over a row's reports is 2 * ones - reports; each adds k (c/2 v~ + 1/2).
    return np.asarray(cms.k * (cms.c / 2 * (2 * ones - per_row) + per_row / 2))


def encode_cms(cms: CountMeanSketch, reports: CmsReports) -> list[list[int]]:
    out = _cms_block(cms.k, cms.m, reports.j, reports.signs)
    return [list(map(int, r)) for r in out]


def cms_sketch_from_aggregate(cms: CountMeanSketch, aggregate: npt.ArrayLike) -> np.ndarray:
    """The k x m CMS sketch from the summed measurements (ones per cell, reports per row)."""
    agg = np.asarray(aggregate, dtype=np.float64)
    ones = agg[: cms.k * cms.m].reshape(cms.k, cms.m)
    return _cms_rows(cms, ones, agg[cms.k * cms.m :][:, None])


def _cms_weight_pmf(cms: CountMeanSketch) -> FloatArray:
    """pmf of an honest CMS block's weight, 1 + Bern(1 - p) + Bin(m - 1, p), over 0..m+1."""
    from shared.dp import binomial  # noqa: PLC0415

    p, m = cms.flip_probability, cms.m
    b = binomial.pmf(np.arange(m), m - 1, p)
    out = np.zeros(m + 2)
    out[2:] += (1 - p) * b
    out[1:-1] += p * b
    return out


def sfp_length(sfp: SequenceFragmentPuzzle) -> int:
    """Measurement length: k m + k, then positions (k' m' + k')."""
    w, f = sfp.word_sketch, sfp.fragment_sketch
    return w.k * w.m + w.k + len(sfp.starts) * (f.k * f.m + f.k)


#: pmf values below this are dropped before convolving (their total is far below any p_fail).
_NEGLIGIBLE = 1e-40


def _support(pmf: FloatArray) -> tuple[int, FloatArray]:
    """(offset, pmf[offset : end]) without the negligible tails on either side."""
    kept = np.flatnonzero(pmf > _NEGLIGIBLE)
    return int(kept[0]), pmf[kept[0] : kept[-1] + 1]


def sfp_max_count(sfp: SequenceFragmentPuzzle, p_fail: float = DEFAULT_P_FAIL) -> int:
    """Weight bound of the concatenated measurement: honest weight is the sum of the word and
    fragment blocks' independent weights (`_cms_weight_pmf` each)."""
    # Binomial tails vanish within a few hundred standard deviations: convolving only the
    # supports keeps m = 65536 to milliseconds instead of an m x m' product.
    lo_w, word = _support(_cms_weight_pmf(sfp.word_sketch))
    lo_f, frag = _support(_cms_weight_pmf(sfp.fragment_sketch))
    pmf = np.convolve(word, frag)
    # P(W > w) summed from the tail, so that tails near p_fail keep their precision.
    tail = np.concatenate([np.cumsum(pmf[::-1])[::-1][1:], [0.0]])
    top = sfp.word_sketch.m + sfp.fragment_sketch.m + 2

    def survival(w: int) -> float:
        i = w - lo_w - lo_f
        return 1.0 if i < 0 else float(tail[i]) if i < tail.size else 0.0

    return smallest_bound(survival, p_fail, top)


def sfp_spec(
    sfp: SequenceFragmentPuzzle, p_fail: float = DEFAULT_P_FAIL, draft: VdafVersion = "VDAF-08"
) -> VdafSpec:
    return multihot_spec(sfp_length(sfp), sfp_max_count(sfp, p_fail), draft)


def encode_sfp_array(sfp: SequenceFragmentPuzzle, reports: SfpReports) -> IntArray:
    """The measurements as an (n, `sfp_length`) 0/1 array (see the module docstring)."""
    w, f = sfp.word_sketch, sfp.fragment_sketch
    word = _cms_block(w.k, w.m, reports.words.j, reports.words.signs)
    # (position, j') is one row of a P k' x m' block: the fragment lands in its position's rows.
    rows = reports.position * f.k + reports.fragments.j
    frag = _cms_block(len(sfp.starts) * f.k, f.m, rows, reports.fragments.signs)
    return np.concatenate([word, frag], axis=1)


def encode_sfp(sfp: SequenceFragmentPuzzle, reports: SfpReports) -> list[list[int]]:
    return [list(map(int, r)) for r in encode_sfp_array(sfp, reports)]


def sfp_sketches_from_aggregate(
    sfp: SequenceFragmentPuzzle, aggregate: npt.ArrayLike
) -> SfpSketches:
    """The word sketch and the per-position fragment sketches from the summed measurements.

    The word sketch's n is the number of row indicators set in the word block, each position's
    n the number set in its fragment rows (an honest report sets exactly one of each; the
    collector compares them with its report count)."""
    agg = np.asarray(aggregate, dtype=np.float64)
    if agg.shape != (sfp_length(sfp),):
        raise ValueError(f"an SFP aggregate has {sfp_length(sfp)} coordinates, not {agg.size}")
    w, f = sfp.word_sketch, sfp.fragment_sketch
    positions = len(sfp.starts)
    split = w.k * w.m + w.k
    word = cms_sketch_from_aggregate(w, agg[:split])
    frag = agg[split:]
    ones = frag[: positions * f.k * f.m].reshape(positions, f.k, f.m)
    per_row = frag[positions * f.k * f.m :].reshape(positions, f.k, 1)
    sketches = _cms_rows(f, ones, per_row)
    return SfpSketches(
        word,
        int(agg[w.k * w.m : split].sum()),
        tuple((sketches[p], int(per_row[p].sum())) for p in range(positions)),
    )


def cms_noise_variance(cms: CountMeanSketch, coordinate_variance: float) -> float:
    """Variance that noise of `coordinate_variance` on every aggregate coordinate adds to each
    CMS estimate (module docstring)."""
    m, c = cms.m, cms.c
    return (m / (m - 1)) ** 2 * cms.k * coordinate_variance * (c * c + (c - 1) ** 2 / 4)


def hcms_spec(hcms: HadamardCountMeanSketch, draft: VdafVersion = "VDAF-08") -> VdafSpec:
    return histogram_spec(2 * hcms.k * hcms.m, draft)


def encode_hcms(hcms: HadamardCountMeanSketch, reports: HcmsReports) -> list[int]:
    index = 2 * (reports.j * hcms.m + reports.col) + (reports.bits < 0)
    return [int(i) for i in index]


def hcms_sketch_from_aggregate(
    hcms: HadamardCountMeanSketch, aggregate: npt.ArrayLike
) -> np.ndarray:
    agg = np.asarray(aggregate, dtype=np.float64).reshape(hcms.k, hcms.m, 2)
    raw = hcms.k * hcms.c * (agg[..., 0] - agg[..., 1])
    return fwht(raw)


def hcms_noise_variance(hcms: HadamardCountMeanSketch, coordinate_variance: float) -> float:
    """Variance that noise of `coordinate_variance` on every aggregate coordinate adds to each
    HCMS estimate (module docstring)."""
    m, c = hcms.m, hcms.c
    return (m / (m - 1)) ** 2 * 2 * hcms.k * m * c * c * coordinate_variance


def bit_pushing_spec(bp: BitPushing, draft: VdafVersion = "VDAF-08") -> VdafSpec:
    return histogram_spec(2 * bp.bits, draft)


def encode_bit_pushing(reports: BitReports) -> list[int]:
    return [int(i) for i in 2 * reports.j + reports.bit]


def bit_tallies_from_aggregate(bp: BitPushing, aggregate: npt.ArrayLike) -> BitTallies:
    agg = np.asarray(aggregate, dtype=np.int64).reshape(bp.bits, 2)
    return BitTallies(agg.sum(axis=1), agg[:, 1].copy())


@dataclass(frozen=True)
class ReportSize:
    """Bytes a client uploads (public share + leader and helper input shares)."""

    public_share: int
    leader_input_share: int
    helper_input_share: int

    @property
    def total(self) -> int:
        return self.public_share + self.leader_input_share + self.helper_input_share


def report_size(spec: VdafSpec) -> ReportSize:
    vdaf = spec.instance()
    return ReportSize(vdaf.public_share_len(), vdaf.input_share_len(0), vdaf.input_share_len(1))
