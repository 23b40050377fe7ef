"""Functions behind `sagg privacy amplification|batch-size|sampling|gaussian-sigma`.

They return numbers (small frozen dataclasses); formatting is the CLI's business.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from shared.dp import amplification as amp
from shared.dp.gaussian import analytic_gaussian_sigma, discrete_gaussian_delta


@dataclass(frozen=True)
class Amplification:
    eps: float
    delta: float
    analysis: amp.Analysis
    #: Whether 000 Theorem 3.1's closed form applies at these parameters, and its value if so.
    closed_form: float | None


def amplification(
    eps0: float, n: int, delta: float, analysis: amp.Analysis = "stronger_clones"
) -> Amplification:
    """Aggregate (eps, delta) of n eps0-LDP reports."""
    closed = (
        amp.closed_form_epsilon(eps0, n, delta) if amp.closed_form_valid(eps0, n, delta) else None
    )
    return Amplification(amp.shuffle_epsilon(eps0, n, delta, analysis), delta, analysis, closed)


def batch_size(
    eps0: float, eps: float, delta: float, analysis: amp.Analysis = "stronger_clones"
) -> int:
    """Minimum batch size B for aggregate (eps, delta) from eps0-LDP reports."""
    return amp.min_batch_size(eps0, eps, delta, analysis)


def max_eps0(n: int, eps: float, delta: float, analysis: amp.Analysis = "stronger_clones") -> float:
    """Largest local eps0 whose n-report aggregate is (eps, delta)-DP."""
    return amp.max_local_epsilon(n, eps, delta, analysis)


def sampling(eps: float, delta: float, q: float) -> tuple[float, float]:
    """(eps, delta) after Poisson sampling at rate q (001 Theorem 4)."""
    return amp.poisson_sampling(eps, delta, q)


@dataclass(frozen=True)
class GaussianSigma:
    sigma: float
    #: Standard deviation the collector sees when `honest_aggregators` each add the noise.
    total_std: float
    #: Exact delta of the discrete Gaussian with this sigma on a one-hot histogram (shift 1, -1)
    #: or a single coordinate (shift 1), whichever `sensitivity` corresponds to; None otherwise.
    discrete_delta: float | None


def gaussian_sigma(
    eps: float, delta: float, sensitivity: float = math.sqrt(2), honest_aggregators: int = 1
) -> GaussianSigma:
    """Per-aggregator sigma by the analytic Gaussian mechanism (004 §6.1.2)."""
    sigma = analytic_gaussian_sigma(eps, delta, sensitivity)
    shifts = {1.0: [1], math.sqrt(2): [1, -1]}.get(sensitivity)
    exact = discrete_gaussian_delta(sigma * sigma, eps, shifts) if shifts else None
    return GaussianSigma(sigma, sigma * math.sqrt(honest_aggregators), exact)
