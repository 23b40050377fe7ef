"""Collector-side estimates: values with standard errors, confidence intervals, thresholding.

The standard errors come from each randomizer's variance formula (000 appendices A and C, 002
§4, 003); the intervals are normal approximations, which the estimators' sums of many
independent reports justify (004 §6.1.1 makes the same approximation).
"""

from __future__ import annotations

from dataclasses import dataclass
from statistics import NormalDist

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]

_STANDARD_NORMAL = NormalDist()


def z_value(level: float) -> float:
    """Two-sided standard normal quantile: P(|Z| <= z) = level."""
    if not 0 < level < 1:
        raise ValueError("confidence level must be in (0, 1)")
    return one_sided_z(0.5 + level / 2)


def one_sided_z(level: float) -> float:
    """Standard normal quantile: P(Z <= z) = level."""
    if not 0 < level < 1:
        raise ValueError("confidence level must be in (0, 1)")
    return _STANDARD_NORMAL.inv_cdf(level)


@dataclass(frozen=True)
class Estimate:
    """Debiased estimates (one per coordinate) with their standard errors."""

    value: FloatArray
    stderr: FloatArray

    def plus_variance(self, variance: float | FloatArray) -> Estimate:
        """The same values with independent zero-mean noise of `variance` on each (e.g. the
        aggregators' noise, 004 §5): the variances add."""
        return Estimate(self.value, np.sqrt(self.stderr**2 + variance))

    def ci(self, level: float = 0.95) -> tuple[FloatArray, FloatArray]:
        z = z_value(level)
        return self.value - z * self.stderr, self.value + z * self.stderr

    def covers(self, truth: FloatArray, level: float = 0.95) -> BoolArray:
        lo, hi = self.ci(level)
        return np.asarray((lo <= truth) & (truth <= hi), dtype=np.bool_)

    def significant(self, level: float = 0.95, floor: float = 0.0) -> BoolArray:
        """Coordinates whose estimate clears both z * stderr (one-sided) and `floor`."""
        z = one_sided_z(level)
        return np.asarray((self.value > z * self.stderr) & (self.value > floor), dtype=np.bool_)

    def thresholded(self, level: float = 0.95, floor: float = 0.0) -> Estimate:
        """Small counts set to 0: those not `significant` (their noise dominates)."""
        keep = self.significant(level, floor)
        return Estimate(np.where(keep, self.value, 0.0), np.where(keep, self.stderr, 0.0))
