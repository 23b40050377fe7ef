"""Private one-hot encodings of an item from a universe of `length` buckets.

* Asymmetric (000 appendix A; Wang et al.'s OUE): the true item's bit is 1 w.p. 1/2, every other
  bit 1 w.p. q = 1/(e^eps0+1). eps0-LDP under replacement. Debias
  f~(d) = (S_d - n q) / (1/2 - q) = 2(e^eps0+1)/(e^eps0-1) S_d - 2n/(e^eps0-1) (the extracted
  text of 000 shows n/(e^eps0-1); the derivation gives 2n), with
  Var = (f/4 + (n-f) q(1-q)) / (1/2 - q)^2, which simplifies exactly to 000's
  4 n e^eps0/(e^eps0-1)^2 + f.
* Symmetric RAPPOR (000 appendix C; 004 §4.3): every bit flipped w.p. q. eps0-DP per bit
  (deletion model), 2 eps0 under replacement. Debias f~ = ((e^eps0+1) S_d - n)/(e^eps0-1),
  Var = n e^eps0/(e^eps0-1)^2, independent of f.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from shared.dp.estimators import Estimate, FloatArray

IntArray = npt.NDArray[np.int64]
BitArray = npt.NDArray[np.uint8]


def _check_items(items: npt.ArrayLike, length: int) -> IntArray:
    arr = np.asarray(items, dtype=np.int64)
    if arr.ndim != 1 or (arr.size and (arr.min() < 0 or arr.max() >= length)):
        raise ValueError(f"items must be a 1-D array of bucket indices in [0, {length})")
    return arr


@dataclass(frozen=True)
class OneHotRandomizer:
    """Bit i of the report is 1 w.p. `p_true` if i is the item, else w.p. `p_false`."""

    eps0: float
    length: int
    symmetric: bool

    @property
    def p_false(self) -> float:
        return 1 / (math.exp(self.eps0) + 1)

    @property
    def p_true(self) -> float:
        return 1 - self.p_false if self.symmetric else 0.5

    @property
    def replacement_eps(self) -> float:
        """The LDP epsilon under replacement (what generic amplification bounds take)."""
        return 2 * self.eps0 if self.symmetric else self.eps0

    def randomize(self, items: npt.ArrayLike, rng: np.random.Generator) -> BitArray:
        """Reports (n, length) of 0/1 for n devices' items."""
        idx = _check_items(items, self.length)
        bits = rng.random((idx.size, self.length)) < self.p_false
        rows = np.arange(idx.size)
        bits[rows, idx] = rng.random(idx.size) < self.p_true
        return bits.astype(np.uint8)

    def debias(self, sums: npt.ArrayLike, n: float) -> FloatArray:
        s = np.asarray(sums, dtype=np.float64)
        return (s - n * self.p_false) / (self.p_true - self.p_false)

    def variance(self, n: float, counts: npt.ArrayLike | float = 0.0) -> FloatArray:
        """Var of the debiased count of a bucket with true count `counts` among n reports."""
        f = np.asarray(counts, dtype=np.float64)
        pt, pf = self.p_true, self.p_false
        return np.asarray(
            (f * pt * (1 - pt) + (n - f) * pf * (1 - pf)) / (pt - pf) ** 2, dtype=np.float64
        )

    def estimate(self, sums: npt.ArrayLike, n: float) -> Estimate:
        """Debiased counts; the stderr plugs the (clipped) estimate into the variance."""
        value = self.debias(sums, n)
        return Estimate(value, np.sqrt(self.variance(n, np.clip(value, 0, n))))


def asymmetric_one_hot(eps0: float, length: int) -> OneHotRandomizer:
    return OneHotRandomizer(eps0, length, symmetric=False)


def symmetric_rappor(eps0: float, length: int) -> OneHotRandomizer:
    return OneHotRandomizer(eps0, length, symmetric=True)
