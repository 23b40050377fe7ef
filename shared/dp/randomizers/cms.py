"""Count Mean Sketch and Hadamard Count Mean Sketch (002 §4.1-4.2; dp-notes B.1-B.2).

Public parameters: k hash functions h_1..h_k: D -> [m], here the three-wise independent family
h_j(x) = ((a_j x^2 + b_j x + c_j) mod P) mod m, P = 2^31 - 1, coefficients drawn from a public
seed (002 asks for a three-wise independent family; the recipe carries the seed). Items are
first mapped to keys in [0, P) by `item_keys` (BLAKE2b).

CMS (eps-LDP): j uniform in [k]; v in {-1,+1}^m is +1 only at h_j(d); each coordinate flipped
w.p. 1/(1 + e^(eps/2)); the device sends (v~, j): log2(k) + m bits. The server adds
k (c/2 v~ + 1/2), c = (e^(eps/2)+1)/(e^(eps/2)-1), to row j of a k x m sketch and estimates
f~(d) = m/(m-1) ((1/k) sum_l M[l, h_l(d)] - n/m).

HCMS (eps-LDP, one bit): j uniform in [k], l uniform in [m] (m a power of 2);
w = H_m[l, h_j(d)]; the device sends (b w, j, l) with b = -1 w.p. 1/(e^eps + 1). The server adds
k c (b w), c = (e^eps+1)/(e^eps-1), to M_H[j, l], multiplies by H_m^T, then estimates as CMS.

Variances (ours, averaged over the hash family; collisions between other items' reports count
once per ordered pair of reports with the same item, f_v (f_v - 1), where 002 bounds it by f_v^2):
  CMS:  (m/(m-1))^2 [n (c^2-1)/4 + (n-f)(m-1)/m^2 + (m-1)/(k m^2) sum_{v!=d} f_v (f_v - 1)]
  HCMS: (m/(m-1))^2 [f (c^2-1) + (n-f)(c^2 - 1/m^2) + (m-1)/(k m^2) sum_{v!=d} f_v (f_v - 1)]
002's Theorems bound the same quantities from above (their f_v^2 / (n k m) terms).
"""

from __future__ import annotations

import functools
import hashlib
import math
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from shared.dp.estimators import Estimate, FloatArray

IntArray = npt.NDArray[np.int64]
SignArray = npt.NDArray[np.int8]

HASH_PRIME = 2**31 - 1


def item_keys(items: Iterable[str | bytes | int]) -> IntArray:
    """Stable keys in [0, 2^31 - 1) for items (BLAKE2b of their UTF-8 / decimal bytes)."""
    out = []
    for item in items:
        data = item if isinstance(item, bytes) else str(item).encode()
        digest = hashlib.blake2b(data, digest_size=8).digest()
        out.append(int.from_bytes(digest, "little") % HASH_PRIME)
    return np.asarray(out, dtype=np.int64)


@functools.lru_cache(maxsize=64)
def _coefficients(k: int, seed: int) -> IntArray:
    rng = np.random.default_rng(np.random.SeedSequence([seed, k]))
    return np.asarray(rng.integers(0, HASH_PRIME, size=(3, k)), dtype=np.int64)


@dataclass(frozen=True)
class HashFamily:
    """k three-wise independent hash functions into [m], from a public seed."""

    k: int
    m: int
    seed: int = 0

    def buckets(self, keys: npt.ArrayLike) -> IntArray:
        """h_j(x) for every j and key: shape (k, len(keys))."""
        x = np.asarray(keys, dtype=np.int64)[None, :]
        a, b, c = (row[:, None] for row in _coefficients(self.k, self.seed))
        t = (a * x + b) % HASH_PRIME
        return np.asarray(((t * x + c) % HASH_PRIME) % self.m, dtype=np.int64)

    def bucket_of(self, j: npt.ArrayLike, keys: npt.ArrayLike) -> IntArray:
        """h_{j_i}(x_i) elementwise."""
        x = np.asarray(keys, dtype=np.int64)
        a, b, c = (row[np.asarray(j, dtype=np.int64)] for row in _coefficients(self.k, self.seed))
        t = (a * x + b) % HASH_PRIME
        return np.asarray(((t * x + c) % HASH_PRIME) % self.m, dtype=np.int64)


def _check_keys(keys: npt.ArrayLike) -> IntArray:
    x = np.asarray(keys, dtype=np.int64)
    if x.ndim != 1 or (x.size and (x.min() < 0 or x.max() >= HASH_PRIME)):
        raise ValueError("keys must be a 1-D array in [0, 2^31 - 1); see item_keys")
    return x


def _sketch_estimate(
    family: HashFamily, sketch: FloatArray, n: float, keys: npt.ArrayLike
) -> FloatArray:
    m = family.m
    rows = family.buckets(_check_keys(keys))
    mean = sketch[np.arange(family.k)[:, None], rows].mean(axis=0)
    return np.asarray(m / (m - 1) * (mean - n / m), dtype=np.float64)


def _collision_term(family: HashFamily, counts: FloatArray) -> FloatArray:
    m, k = family.m, family.k
    pairs = counts * (counts - 1)
    return np.asarray((m - 1) / (k * m * m) * (pairs.sum() - pairs), dtype=np.float64)


@dataclass(frozen=True)
class CmsReports:
    """A batch of CMS reports: v~ in {-1,+1}, shape (n, m), and the hash index j, shape (n,)."""

    signs: SignArray
    j: IntArray


@dataclass(frozen=True)
class CountMeanSketch:
    eps: float
    k: int
    m: int
    seed: int = 0

    @property
    def family(self) -> HashFamily:
        return HashFamily(self.k, self.m, self.seed)

    @property
    def flip_probability(self) -> float:
        return 1 / (1 + math.exp(self.eps / 2))

    @property
    def c(self) -> float:
        e = math.exp(self.eps / 2)
        return (e + 1) / (e - 1)

    @property
    def report_bits(self) -> int:
        return math.ceil(math.log2(self.k)) + self.m

    def randomize(self, keys: npt.ArrayLike, rng: np.random.Generator) -> CmsReports:
        x = _check_keys(keys)
        n = x.size
        j = rng.integers(0, self.k, n)
        signs = -np.ones((n, self.m), dtype=np.int8)
        signs[np.arange(n), self.family.bucket_of(j, x)] = 1
        flips = rng.random((n, self.m)) < self.flip_probability
        signs[flips] *= -1
        return CmsReports(signs, np.asarray(j, dtype=np.int64))

    def sketch(self, reports: CmsReports) -> FloatArray:
        """The k x m sketch: row j_i accumulates k (c/2 v~_i + 1/2)."""
        out = np.zeros((self.k, self.m))
        rows = self.k * (self.c / 2 * reports.signs + 0.5)
        np.add.at(out, reports.j, rows)
        return out

    def estimate_counts(self, sketch: FloatArray, n: float, keys: npt.ArrayLike) -> FloatArray:
        return _sketch_estimate(self.family, sketch, n, keys)

    def variance(self, n: float, counts: npt.ArrayLike) -> FloatArray:
        """Var f~(d) for every item d of a dictionary whose true counts are `counts`."""
        f = np.asarray(counts, dtype=np.float64)
        m, c2 = self.m, self.c**2
        inner = n * (c2 - 1) / 4 + (n - f) * (m - 1) / m**2 + _collision_term(self.family, f)
        return np.asarray((m / (m - 1)) ** 2 * inner, dtype=np.float64)

    def estimate(self, sketch: FloatArray, n: float, keys: npt.ArrayLike) -> Estimate:
        """Estimates for `keys`, taken as the whole dictionary for the collision term."""
        value = self.estimate_counts(sketch, n, keys)
        return Estimate(value, np.sqrt(self.variance(n, np.clip(value, 0, n))))


def fwht(a: FloatArray) -> FloatArray:
    """Unnormalised Walsh-Hadamard transform along the last axis (length a power of 2)."""
    out = np.array(a, dtype=np.float64, copy=True)
    m = out.shape[-1]
    if m & (m - 1):
        raise ValueError("length must be a power of 2")
    lead = out.shape[:-1]
    h = 1
    while h < m:
        view = out.reshape(*lead, m // (2 * h), 2, h)
        top, bottom = view[..., 0, :].copy(), view[..., 1, :]
        view[..., 0, :] += bottom
        view[..., 1, :] = top - bottom
        h *= 2
    return out


@dataclass(frozen=True)
class HcmsReports:
    """A batch of HCMS reports: the bit b w_l in {-1,+1}, the row j and the column l (`col`)."""

    bits: SignArray
    j: IntArray
    col: IntArray


@dataclass(frozen=True)
class HadamardCountMeanSketch:
    eps: float
    k: int
    m: int
    seed: int = 0

    def __post_init__(self) -> None:
        if self.m < 2 or self.m & (self.m - 1):
            raise ValueError("HCMS needs m a power of 2")

    @property
    def family(self) -> HashFamily:
        return HashFamily(self.k, self.m, self.seed)

    @property
    def flip_probability(self) -> float:
        return 1 / (1 + math.exp(self.eps))

    @property
    def c(self) -> float:
        e = math.exp(self.eps)
        return (e + 1) / (e - 1)

    @property
    def report_bits(self) -> int:
        return 1 + math.ceil(math.log2(self.k)) + math.ceil(math.log2(self.m))

    def randomize(self, keys: npt.ArrayLike, rng: np.random.Generator) -> HcmsReports:
        x = _check_keys(keys)
        n = x.size
        j = np.asarray(rng.integers(0, self.k, n), dtype=np.int64)
        col = np.asarray(rng.integers(0, self.m, n), dtype=np.int64)
        h = self.family.bucket_of(j, x)
        # H_m[l, h] = (-1)^popcount(l & h) for the Sylvester construction.
        w = 1 - 2 * (np.bitwise_count(col & h) & 1).astype(np.int8)
        b = np.where(rng.random(n) < self.flip_probability, -1, 1).astype(np.int8)
        return HcmsReports((b * w).astype(np.int8), j, col)

    def sketch(self, reports: HcmsReports) -> FloatArray:
        """M_H (k x m) accumulated from k c (b w_l), then transformed: M = M_H H_m^T."""
        raw = np.zeros((self.k, self.m))
        np.add.at(raw, (reports.j, reports.col), self.k * self.c * reports.bits)
        return fwht(raw)

    def estimate_counts(self, sketch: FloatArray, n: float, keys: npt.ArrayLike) -> FloatArray:
        return _sketch_estimate(self.family, sketch, n, keys)

    def variance(self, n: float, counts: npt.ArrayLike) -> FloatArray:
        f = np.asarray(counts, dtype=np.float64)
        m, c2 = self.m, self.c**2
        inner = f * (c2 - 1) + (n - f) * (c2 - 1 / m**2) + _collision_term(self.family, f)
        return np.asarray((m / (m - 1)) ** 2 * inner, dtype=np.float64)

    def estimate(self, sketch: FloatArray, n: float, keys: npt.ArrayLike) -> Estimate:
        value = self.estimate_counts(sketch, n, keys)
        return Estimate(value, np.sqrt(self.variance(n, np.clip(value, 0, n))))
