"""Composition of privacy guarantees: basic, advanced, Renyi DP and zCDP conversions.

* Basic composition: epsilons and deltas add (000 §4.3, the on-device accountant's default).
* Advanced composition, 001 Theorem 3: T mechanisms each (eps, delta)-DP are
  (eps sqrt(2 T ln(1/delta')) + T eps (e^eps - 1), T delta + delta')-DP.
* Renyi DP, 001 Theorems 1-2: eps-DP is (alpha, alpha eps^2 / 2)-RDP (we also use the trivial
  alpha-independent bound eps, whichever is smaller); RDP curves add; (alpha, r)-RDP is
  (r + (ln(1/delta) + (alpha-1) ln(1-1/alpha) - ln alpha) / (alpha - 1), delta)-DP, minimised
  over alpha (the conversion of Canonne, Kamath, Steinke 2020 / Asoodeh et al.).
* rho-zCDP is (alpha, alpha rho)-RDP for every alpha, so `cdp_eps` / `cdp_delta` / `cdp_rho` are
  the same conversion specialised (CKS20 Proposition; IBM `cdp2adp.py` gives reference values).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence

import numpy as np

# scipy.optimize is imported where it is used: it is half a second of a process's start, and
# most processes importing this module never call it.
from shared.dp.bisect import bracket

RdpCurve = Callable[[float], float]

#: Renyi orders searched by `rdp_to_dp` before a bounded refinement around the best one.
ALPHA_GRID: tuple[float, ...] = tuple(float(a) for a in 1 + np.geomspace(1e-4, 1e4, 401))


def basic_composition(guarantees: Iterable[tuple[float, float]]) -> tuple[float, float]:
    """Sum of the (eps, delta) pairs."""
    eps_total, delta_total = 0.0, 0.0
    for eps, delta in guarantees:
        eps_total += eps
        delta_total += delta
    return eps_total, delta_total


def advanced_composition(
    eps: float, delta: float, steps: int, delta_prime: float
) -> tuple[float, float]:
    """001 Theorem 3 for `steps` adaptive (eps, delta)-DP mechanisms and slack delta'."""
    eps_total = eps * math.sqrt(2 * steps * math.log(1 / delta_prime)) + steps * eps * math.expm1(
        eps
    )
    return eps_total, steps * delta + delta_prime


def pure_dp_rdp(eps: float) -> RdpCurve:
    """001 Theorem 1: an eps-DP mechanism is (alpha, min(alpha eps^2 / 2, eps))-RDP."""
    return lambda alpha: min(alpha * eps * eps / 2, eps)


def gaussian_rdp(sigma: float, sensitivity: float = 1.0) -> RdpCurve:
    """The Gaussian mechanism with L2 sensitivity D is (alpha, alpha D^2 / (2 sigma^2))-RDP."""
    rho = sensitivity**2 / (2 * sigma**2)
    return lambda alpha: alpha * rho


def compose_rdp(curves: Sequence[RdpCurve], counts: Sequence[int] | None = None) -> RdpCurve:
    """001 Theorem 2: RDP curves add (each `counts[i]` times if given)."""
    weights = [1] * len(curves) if counts is None else list(counts)
    if len(weights) != len(curves):
        raise ValueError("one count per curve")
    return lambda alpha: sum(w * c(alpha) for c, w in zip(curves, weights, strict=True))


def _conversion(r: float, alpha: float, delta: float) -> float:
    return r + (math.log(1 / delta) + (alpha - 1) * math.log1p(-1 / alpha) - math.log(alpha)) / (
        alpha - 1
    )


def rdp_to_dp(rdp: RdpCurve, delta: float, orders: Sequence[float] | None = None) -> float:
    """The smallest eps over Renyi orders alpha > 1 for which the RDP curve gives (eps, delta).

    With `orders` only those orders are tried; otherwise a log grid then a bounded refinement.
    """
    from scipy import optimize  # noqa: PLC0415

    if not 0 < delta < 1:
        raise ValueError("delta must be in (0, 1)")
    if orders is not None:
        return max(0.0, min(_conversion(rdp(a), a, delta) for a in orders))
    grid = ALPHA_GRID
    values = [_conversion(rdp(a), a, delta) for a in grid]
    best = int(np.argmin(values))
    lo = grid[max(best - 1, 0)]
    hi = grid[min(best + 1, len(grid) - 1)]
    refined = optimize.minimize_scalar(
        lambda a: _conversion(rdp(float(a)), float(a), delta),
        bounds=(lo, hi),
        method="bounded",
        options={"xatol": 1e-10 * hi},
    )
    return max(0.0, min(values[best], float(refined.fun)))


def cdp_delta(rho: float, eps: float) -> float:
    """The smallest delta for which rho-zCDP gives (eps, delta)-DP (optimal order in closed form).

    The optimal alpha solves (2 alpha - 1) rho - eps + ln(1 - 1/alpha) = 0; the left side
    increases in alpha, so bisection finds it.
    """
    if rho <= 0:
        return 0.0
    low, high = bracket(
        lambda a: (2 * a - 1) * rho - eps + math.log1p(-1 / a) >= 0,
        1.0 + 1e-12,
        (eps + 1) / (2 * rho) + 2,
    )
    alpha = (low + high) / 2
    log_delta = (alpha - 1) * (alpha * rho - eps) + alpha * math.log1p(-1 / alpha)
    return min(1.0, math.exp(log_delta) / (alpha - 1))


def cdp_eps(rho: float, delta: float) -> float:
    """The smallest eps with cdp_delta(rho, eps) <= delta."""
    high = rho + 2 * math.sqrt(rho * math.log(1 / delta))
    return bracket(lambda e: cdp_delta(rho, e) <= delta, 0.0, high)[1]


def cdp_rho(eps: float, delta: float) -> float:
    """The largest rho with cdp_delta(rho, eps) <= delta."""
    return bracket(lambda r: cdp_delta(r, eps) <= delta, eps + 1.0, 0.0)[1]
