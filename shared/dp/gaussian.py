"""Gaussian noise calibration and the exact privacy of the discrete Gaussian.

* Analytic Gaussian mechanism (Balle, Wang 2018, Theorem 8 / Algorithm 1; 004 §6.1.2): the smallest
  sigma with Phi(D/(2 sigma) - eps sigma/D) - e^eps Phi(-D/(2 sigma) - eps sigma/D) <= delta,
  D the L2 sensitivity. The left side decreases in sigma, so we bisect on sigma directly.
* Discrete Gaussian N_Z(0, sigma^2) (Canonne, Kamath, Steinke 2020): normalising constant and
  variance by direct summation, and its exact delta(eps) for an integer shift (CKS20 Theorem 7)
  or for a shift vector over independent coordinates (e.g. a one-hot histogram, shift (1, -1)),
  and the smallest epsilon for a target delta (`discrete_gaussian_epsilon`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from shared.dp.bisect import smallest_passing
from shared.dp.divergences import FloatArray, hockey_stick_1d, hockey_stick_product

#: Relative tolerance of the sigma bisection (the result errs on the large side).
SIGMA_RTOL = 1e-12
#: Half-width of the summed support in standard deviations; e^(-60^2/2) is far below 1e-300.
_SUPPORT_SDS = 60


def gaussian_delta(sigma: float, eps: float, sensitivity: float) -> float:
    """delta(eps) of the continuous Gaussian mechanism (Balle-Wang Theorem 8)."""
    a = sensitivity / (2 * sigma)
    b = eps * sigma / sensitivity
    return _normal_cdf(a - b) - math.exp(eps) * _normal_cdf(-a - b)


def _normal_cdf(x: float) -> float:
    """Phi(x) by erfc, accurate in the lower tail (where 1 + erf would round to 0)."""
    return 0.5 * math.erfc(-x / math.sqrt(2))


def analytic_gaussian_sigma(eps: float, delta: float, sensitivity: float = 1.0) -> float:
    """Smallest sigma giving (eps, delta)-DP at L2 sensitivity `sensitivity` (BW18 Alg. 1)."""
    if eps <= 0 or not 0 < delta < 1 or sensitivity <= 0:
        raise ValueError("need eps > 0, 0 < delta < 1 and a positive sensitivity")
    return smallest_passing(
        lambda s: gaussian_delta(s, eps, sensitivity) <= delta,
        0.0,
        sensitivity,
        tol=SIGMA_RTOL,
        relative=True,
    )


def smallest_epsilon(delta_at: Callable[[float], float], delta: float, tol: float) -> float:
    """Smallest eps with delta_at(eps) <= delta, for a delta_at decreasing in eps: doubling, then
    bisection; the answer errs large by at most `tol`, never small."""
    return smallest_passing(lambda eps: delta_at(eps) <= delta, 0.0, 1.0, tol=tol)


def gaussian_epsilon(sigma: float, delta: float, sensitivity: float = 1.0) -> float:
    """Smallest eps with gaussian_delta(sigma, eps) <= delta (errs large by <= 1e-12)."""
    return smallest_epsilon(lambda eps: gaussian_delta(sigma, eps, sensitivity), delta, 1e-12)


def _support(sigma2: float, extra: int = 0) -> np.ndarray[tuple[int], np.dtype[np.int64]]:
    half = int(_SUPPORT_SDS * math.sqrt(sigma2)) + 2 + extra
    return np.arange(-half, half + 1, dtype=np.int64)


def discrete_gaussian_logpmf(sigma2: float, extra: int = 0) -> tuple[FloatArray, FloatArray]:
    """(support, log pmf) of N_Z(0, sigma2) on a support wide enough for double precision."""
    x = _support(sigma2, extra)
    log_w = -(x.astype(np.float64) ** 2) / (2 * sigma2)
    return x.astype(np.float64), log_w - math.log(float(np.sum(np.exp(log_w))))


def discrete_gaussian_normalizer(sigma2: float) -> float:
    """sum_{x in Z} exp(-x^2 / (2 sigma2))."""
    x = _support(sigma2).astype(np.float64)
    return float(np.sum(np.exp(-(x**2) / (2 * sigma2))))


def discrete_gaussian_variance(sigma2: float) -> float:
    """Var N_Z(0, sigma2) (slightly below sigma2)."""
    x, log_pmf = discrete_gaussian_logpmf(sigma2)
    return float(np.sum(x**2 * np.exp(log_pmf)))


def discrete_gaussian_delta(sigma2: float, eps: float, shifts: Sequence[int]) -> float:
    """Exact delta(eps) of adding independent N_Z(0, sigma2) to each coordinate of an integer
    query whose value moves by `shifts` (length 1 or 2; zero coordinates do not matter).

    For one coordinate this is CKS20 Theorem 7, P[X > eps sigma2/D - D/2] - e^eps P[X > eps
    sigma2/D + D/2]; computed here as the hockey-stick divergence of the shifted pmfs, in the
    worse direction.
    """
    moved = [int(s) for s in shifts if int(s) != 0]
    if not moved:
        return 0.0
    if len(moved) > 2:
        raise ValueError("at most two moving coordinates are supported")
    extra = max(abs(s) for s in moved)
    _, log_pmf = discrete_gaussian_logpmf(sigma2, extra)
    pairs = []
    for s in moved:
        shifted = np.full_like(log_pmf, -np.inf)
        if s > 0:
            shifted[s:] = log_pmf[:-s]
        else:
            shifted[:s] = log_pmf[-s:]
        pairs.append((shifted, log_pmf))
    if len(pairs) == 1:
        (p, q) = pairs[0]
        return max(hockey_stick_1d(p, q, eps), hockey_stick_1d(q, p, eps))
    (p1, q1), (p2, q2) = pairs
    return max(hockey_stick_product(p1, q1, p2, q2, eps), hockey_stick_product(q1, p1, q2, p2, eps))


def discrete_gaussian_epsilon(sigma2: float, delta: float, shifts: Sequence[int]) -> float:
    """Smallest eps with discrete_gaussian_delta(sigma2, eps, shifts) <= delta (bisection; errs
    large by <= 1e-9). The discrete mechanism's delta can exceed the continuous one's at the same
    sigma (dp-notes A.5: 1.0016e-9 against 1e-9), so this is the number to state for it."""
    if not 0 < delta < 1:
        raise ValueError("need 0 < delta < 1")
    return smallest_epsilon(lambda eps: discrete_gaussian_delta(sigma2, eps, shifts), delta, 1e-9)
