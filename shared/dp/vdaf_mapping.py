"""How each randomized report maps onto a Prio3 VDAF, and back (004 §6; VDAF-08 §7.4).

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

The multi-hot bound m is the smallest with P(honest weight > m) <= p_fail (004 §6.1.1: the
false-rejection rate of honest clients); a malicious client can then set at most m bits. For CMS
the weight is Bern(1 - p) + Bin(m-1, p) + 1 with p = 1/(1+e^(eps/2)); the bound limits a
malicious client to m' ones anywhere in the sketch. CMS and HCMS are dense over the k x m sketch
(report sizes grow as k m: fine for the small sketches of tests and simulations, impractical for
002's deployed k = 65536); since j and l are independent of the data, a deployment could send
them in the clear and aggregate per row instead -- not done here. SFP is two CMS reports
(fragment and word), i.e. two such measurements.

`chunk_length` defaults to about sqrt(measurement length), the VDAF-08 §7.4.4 recommendation.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from scipy import stats

from shared.dp.randomizers.bitpushing import BitPushing, BitReports, BitTallies
from shared.dp.randomizers.cms import (
    CmsReports,
    CountMeanSketch,
    HadamardCountMeanSketch,
    HcmsReports,
    fwht,
)
from shared.dp.randomizers.onehot import OneHotRandomizer
from shared.vdaf.spec import VdafSpec

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
        c_sf = stats.binom.sf
        return float(rand.p_true * c_sf(m - 1, d - 1, q) + (1 - rand.p_true) * c_sf(m, d - 1, q))

    return smallest_bound(survival, p_fail, d)


def histogram_spec(length: int) -> VdafSpec:
    return VdafSpec(type="Prio3Histogram", length=length, chunk_length=chunk_length_for(length))


def one_hot_spec(rand: OneHotRandomizer, p_fail: float = DEFAULT_P_FAIL) -> VdafSpec:
    m = one_hot_max_count(rand, p_fail)
    meas_len = rand.length + m.bit_length()
    return VdafSpec(
        type="Prio3MultiHotHistogram",
        length=rand.length,
        max_count=m,
        chunk_length=chunk_length_for(meas_len),
    )


def encode_one_hot(reports: npt.NDArray[np.uint8]) -> list[list[int]]:
    """Each report's bits as the MultiHotHistogram measurement."""
    return [[int(b) for b in row] for row in np.asarray(reports)]


def cms_max_count(cms: CountMeanSketch, p_fail: float = DEFAULT_P_FAIL) -> int:
    p, m = cms.flip_probability, cms.m

    def survival(w: int) -> float:
        # W - 1 = Bern(1 - p) + Bin(m - 1, p); the extra 1 is the row indicator.
        c_sf = stats.binom.sf
        return float((1 - p) * c_sf(w - 2, m - 1, p) + p * c_sf(w - 1, m - 1, p))

    return smallest_bound(survival, p_fail, m + 1)


def cms_spec(cms: CountMeanSketch, p_fail: float = DEFAULT_P_FAIL) -> VdafSpec:
    length = cms.k * cms.m + cms.k
    m = cms_max_count(cms, p_fail)
    return VdafSpec(
        type="Prio3MultiHotHistogram",
        length=length,
        max_count=m,
        chunk_length=chunk_length_for(length + m.bit_length()),
    )


def encode_cms(cms: CountMeanSketch, reports: CmsReports) -> list[list[int]]:
    n = reports.j.size
    out = np.zeros((n, cms.k * cms.m + cms.k), dtype=np.int64)
    rows = np.arange(n)
    cols = reports.j[:, None] * cms.m + np.arange(cms.m)[None, :]
    out[rows[:, None], cols] = (reports.signs + 1) // 2
    out[rows, cms.k * cms.m + reports.j] = 1
    return [list(map(int, r)) for r in out]


def cms_sketch_from_aggregate(cms: CountMeanSketch, aggregate: npt.ArrayLike) -> np.ndarray:
    """The k x m CMS sketch from the summed measurements (ones per cell, reports per row)."""
    agg = np.asarray(aggregate, dtype=np.float64)
    ones = agg[: cms.k * cms.m].reshape(cms.k, cms.m)
    per_row = agg[cms.k * cms.m :][:, None]
    # sum of v~ over a row's reports is 2 * ones - reports; each adds k (c/2 v~ + 1/2).
    return np.asarray(cms.k * (cms.c / 2 * (2 * ones - per_row) + per_row / 2))


def hcms_spec(hcms: HadamardCountMeanSketch) -> VdafSpec:
    return histogram_spec(2 * hcms.k * hcms.m)


def encode_hcms(hcms: HadamardCountMeanSketch, reports: HcmsReports) -> list[int]:
    index = 2 * (reports.j * hcms.m + reports.col) + (reports.bits < 0)
    return [int(i) for i in index]


def hcms_sketch_from_aggregate(
    hcms: HadamardCountMeanSketch, aggregate: npt.ArrayLike
) -> np.ndarray:
    agg = np.asarray(aggregate, dtype=np.float64).reshape(hcms.k, hcms.m, 2)
    raw = hcms.k * hcms.c * (agg[..., 0] - agg[..., 1])
    return fwht(raw)


def bit_pushing_spec(bp: BitPushing) -> VdafSpec:
    return histogram_spec(2 * bp.bits)


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
