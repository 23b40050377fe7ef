"""Additive Laplace and Gaussian noise for vectors (local or central; dp.md §1, 004 §4).

* Laplace: scale b = Delta_1 / eps gives eps-DP; per-coordinate variance 2 b^2.
* Gaussian: sigma from the analytic Gaussian mechanism (Balle-Wang 2018) for (eps, delta) and L2
  sensitivity Delta_2; per-coordinate variance sigma^2.
The sum of n independently noised reports has n times the per-report variance.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from shared.dp.estimators import Estimate, FloatArray
from shared.dp.gaussian import analytic_gaussian_sigma


@dataclass(frozen=True)
class LaplaceVector:
    eps: float
    l1_sensitivity: float

    @property
    def scale(self) -> float:
        return self.l1_sensitivity / self.eps

    @property
    def variance(self) -> float:
        return 2 * self.scale**2

    def randomize(self, x: npt.ArrayLike, rng: np.random.Generator) -> FloatArray:
        arr = np.asarray(x, dtype=np.float64)
        return np.asarray(arr + rng.laplace(0.0, self.scale, arr.shape), dtype=np.float64)

    def estimate_sum(self, noisy_sum: npt.ArrayLike, n: int) -> Estimate:
        value = np.asarray(noisy_sum, dtype=np.float64)
        return Estimate(value, np.full(value.shape, np.sqrt(n * self.variance)))


@dataclass(frozen=True)
class GaussianVector:
    sigma: float

    @classmethod
    def calibrated(cls, eps: float, delta: float, l2_sensitivity: float) -> GaussianVector:
        return cls(analytic_gaussian_sigma(eps, delta, l2_sensitivity))

    @property
    def variance(self) -> float:
        return self.sigma**2

    def randomize(self, x: npt.ArrayLike, rng: np.random.Generator) -> FloatArray:
        arr = np.asarray(x, dtype=np.float64)
        return np.asarray(arr + rng.normal(0.0, self.sigma, arr.shape), dtype=np.float64)

    def estimate_sum(self, noisy_sum: npt.ArrayLike, n: int) -> Estimate:
        value = np.asarray(noisy_sum, dtype=np.float64)
        return Estimate(value, np.full(value.shape, np.sqrt(n * self.variance)))
