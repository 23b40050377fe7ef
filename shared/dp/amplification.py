"""Amplification by aggregation (shuffling) and by Poisson sampling, and their inverse problems.

Analyses of n aggregated eps0-LDP reports (`Analysis`):

* ``closed_form`` -- 000 Theorem 3.1 (Feldman, McMillan, Talwar 2021, "Hiding among the clones"),
  replacement eps0, valid only when eps0 <= ln(n / (8 ln(2/delta)) - 1)::

      eps <= ln(1 + (e^eps0 - 1) (4 sqrt(2 ln(4/delta)) / sqrt((e^eps0 + 1) n) + 4/n))

* ``clones`` -- the numerical bound of the same paper (their Theorem 3.2 and the procedure of
  apple/ml-shuffling-amplification, re-derived): delta(eps) <= D_{e^eps}(P || Q) with
  C ~ Bin(n-1, e^-eps0) clones, A ~ Bin(C, 1/2), Delta ~ Bern(e^eps0/(e^eps0+1)),
  P = (A + Delta, C - A + 1 - Delta), Q = (A + 1 - Delta, C - A + Delta).
* ``stronger_clones`` -- the same pair with clone probability 2/(e^eps0 + 1) (Feldman, McMillan,
  Talwar 2022, "Stronger privacy amplification by shuffling"); this is also the exact
  decomposition of binary randomized response.
* ``sym_rappor_exact`` / ``sym_rappor_deletion_exact`` -- the exact hockey-stick divergence of the
  aggregate of n symmetric-RAPPOR reports (000 appendix C; 004 §4.3) when one client's item
  changes (two coordinates move) or is replaced by the all-noise reference (one coordinate).
* ``sym_rappor_rdp`` -- 000 appendix C.1.3, Theorem C.3: Renyi divergence at most 2 rho_2RR,
  rho_2RR computed exactly, converted to (eps, delta) by `composition.rdp_to_dp`.

Every ``*_epsilon`` solves delta(eps) <= delta by bisection over a monotone bound and returns
the upper end of the final bracket: the reported eps satisfies the bound and exceeds the exact
solution by at most `EPS_TOL`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Literal, get_args

import numpy as np
from scipy import stats

from shared.dp.bisect import NoThresholdError, bracket, smallest_passing
from shared.dp.composition import ALPHA_GRID, rdp_to_dp
from shared.dp.divergences import (
    FloatArray,
    hockey_stick_1d,
    hockey_stick_product,
    renyi_divergence,
)

Analysis = Literal[
    "closed_form",
    "clones",
    "stronger_clones",
    "sym_rappor_exact",
    "sym_rappor_deletion_exact",
    "sym_rappor_rdp",
]
ANALYSES: tuple[Analysis, ...] = get_args(Analysis)

#: Absolute tolerance of every bisection over epsilon (the result errs on the large side).
EPS_TOL = 1e-7
#: Binomial tail mass left out of the numerical sums, as a fraction of the target delta; it is
#: added back to delta, so truncation only makes the bound more conservative.
_TAIL_FRACTION = 1e-6


# --- closed form (000 Theorem 3.1) -------------------------------------------------------------


def closed_form_valid(eps0: float, n: int, delta: float) -> bool:
    """Whether 000 Theorem 3.1 applies: eps0 <= ln(n / (8 ln(2/delta)) - 1)."""
    inner = n / (8 * math.log(2 / delta)) - 1
    return inner > 0 and eps0 <= math.log(inner)


def closed_form_epsilon(eps0: float, n: int, delta: float) -> float:
    """000 Theorem 3.1, eq. (1): aggregate eps of n replacement eps0-LDP reports."""
    if not closed_form_valid(eps0, n, delta):
        raise ValueError(
            f"000 Theorem 3.1 needs eps0 <= ln(n / (8 ln(2/delta)) - 1); eps0={eps0}, n={n}"
        )
    e0 = math.exp(eps0)
    term = 4 * math.sqrt(2 * math.log(4 / delta)) / math.sqrt((e0 + 1) * n) + 4 / n
    return math.log1p((e0 - 1) * term)


# --- clone reductions (FMT 2021 Theorem 3.2, FMT 2022) ------------------------------------------


def clone_probability(eps0: float, stronger: bool) -> float:
    """Probability that another client's report is a clone of one of client 1's two outputs."""
    return 2 / (math.exp(eps0) + 1) if stronger else math.exp(-eps0)


def clone_delta(eps0: float, n: int, eps: float, p_clone: float, tail: float = 0.0) -> float:
    """D_{e^eps}(P || Q) for the clone pair with C ~ Bin(n-1, p_clone) (an upper bound on delta).

    Conditioned on C = c the pair is one-dimensional (the coordinates sum to c + 1) and
    P_c(a) = alpha b_c(a) + (1-alpha) b_c(a-1), Q_c(a) = (1-alpha) b_c(a) + alpha b_c(a-1),
    b_c the Bin(c, 1/2) pmf, alpha = e^eps0/(e^eps0+1). P_c/Q_c decreases in a, so the divergence
    is a difference of two binomial CDFs at the crossing point a < beta (c+1); P_c(a) = Q_c(c+1-a)
    makes D(Q||P) equal to D(P||Q). Values of c outside the central (1 - 2 tail) mass are left
    out and their mass added to the result.
    """
    if eps >= eps0:
        return 0.0
    alpha = math.exp(eps0) / (math.exp(eps0) + 1)
    ee = math.exp(eps)
    beta = (alpha - ee * (1 - alpha)) / ((2 * alpha - 1) * (1 + ee))
    m = n - 1
    if tail > 0:
        lo = int(stats.binom.ppf(tail, m, p_clone))
        hi = int(stats.binom.isf(tail, m, p_clone))
    else:
        lo, hi = 0, m
    c = np.arange(lo, hi + 1, dtype=np.float64)
    weight = stats.binom.pmf(c, m, p_clone)
    left_out = max(0.0, 1.0 - float(weight.sum()))
    a_max = np.ceil(beta * (c + 1)) - 1
    f1 = stats.binom.cdf(a_max, c, 0.5)
    f0 = stats.binom.cdf(a_max - 1, c, 0.5)
    per_c = alpha * f1 + (1 - alpha) * f0 - ee * ((1 - alpha) * f1 + alpha * f0)
    return float(np.dot(weight, np.maximum(per_c, 0.0))) + left_out


# --- symmetric RAPPOR, exact ---------------------------------------------------------------------


def _noise_logpmf(m: int, q: float, ones: int) -> FloatArray:
    """Log pmf on 0..m of the other m clients' bits on one coordinate (`ones` of them hold it)."""
    k = np.arange(m + 1, dtype=np.float64)
    if ones == 0:
        return np.asarray(stats.binom.logpmf(k, m, q), dtype=np.float64)
    # Bin(ones, 1-q) + Bin(m-ones, q): only used for small m (worst-case checks).
    pmf = np.convolve(
        stats.binom.pmf(np.arange(ones + 1), ones, 1 - q),
        stats.binom.pmf(np.arange(m - ones + 1), m - ones, q),
    )
    with np.errstate(divide="ignore"):
        return np.asarray(np.log(pmf), dtype=np.float64)


def rr_sum_logpmfs(eps0: float, n: int, others_ones: int = 0) -> tuple[FloatArray, FloatArray]:
    """Log pmfs on 0..n of the sum of n binary randomized responses (keep w.p. e^eps0/(e^eps0+1)).

    Returns (log P, log Q): client 1 holds 1 under P and 0 under Q; the other n-1 clients hold
    `others_ones` ones.
    """
    q = 1 / (math.exp(eps0) + 1)
    noise = np.concatenate([_noise_logpmf(n - 1, q, others_ones), [-np.inf]])
    shifted = np.concatenate([[-np.inf], noise[:-1]])
    log_p = np.logaddexp(math.log1p(-q) + shifted, math.log(q) + noise)
    log_q = np.logaddexp(math.log(q) + shifted, math.log1p(-q) + noise)
    return log_p, log_q


#: Points of an RR-sum pmf below e^-80 (in both P and Q) are dropped from hockey-stick sums and
#: their mass added back; for Renyi sums the cutoff also covers the (P/Q)^alpha <= e^(alpha eps0)
#: growth of a dropped term, with the same e^-60 margin.
_HS_LOG_CUTOFF = -80.0
_RDP_LOG_MARGIN = 60.0


def _window(
    log_p: FloatArray, log_q: FloatArray, log_cutoff: float
) -> tuple[FloatArray, FloatArray, float]:
    """The points where P or Q is at least e^log_cutoff, and the larger mass left out."""
    keep = np.maximum(log_p, log_q) >= log_cutoff
    dropped = max(float(np.exp(log_p[~keep]).sum()), float(np.exp(log_q[~keep]).sum()))
    return log_p[keep], log_q[keep], dropped


def sym_rappor_delta_curve(eps0: float, n: int, deletion: bool = False) -> Callable[[float], float]:
    """Exact eps -> delta of the sum of n symmetric-RAPPOR reports (per-bit flip 1/(e^eps0+1)).

    Replacement (client 1's item i -> j): coordinates i and j move, the others are identical, so
    the divergence is that of the product pair (S1, S0) vs (S0, S1) with S_b the binary-RR sum
    where client 1 holds b. Deletion (client 1 -> the all-noise reference): only S1 vs S0. The
    other clients hold neither coordinate (on small n, tests check for the Renyi version that
    this is the worst split).
    """
    log_p, log_q, dropped = _window(*rr_sum_logpmfs(eps0, n), _HS_LOG_CUTOFF)
    if deletion:
        return lambda eps: (
            dropped + max(hockey_stick_1d(log_p, log_q, eps), hockey_stick_1d(log_q, log_p, eps))
        )
    return lambda eps: 2 * dropped + hockey_stick_product(log_p, log_q, log_q, log_p, eps)


def rr_sum_rdp(eps0: float, n: int, alpha: float, others_ones: int = 0) -> float:
    """rho_2RR(n, alpha, eps0) of 000 C.1.3 for the given split: the larger of both directions."""
    log_p, log_q = rr_sum_logpmfs(eps0, n, others_ones)
    return max(renyi_divergence(log_p, log_q, alpha), renyi_divergence(log_q, log_p, alpha))


def sym_rappor_rdp_epsilon(
    eps0: float, n: int, delta: float, orders: Sequence[float] | None = None
) -> float:
    """000 Theorem C.3: the aggregate is (alpha, 2 rho_2RR)-RDP; converted and minimised.

    `orders` restricts the Renyi orders (e.g. the integers); by default alpha ranges over
    `composition.ALPHA_GRID` and is refined between grid points.
    """
    alpha_max = max(orders) if orders is not None else max(ALPHA_GRID)
    # E_Q[(P/Q)^alpha] >= 1 and P/Q <= e^eps0, so points below this cutoff change it by
    # at most (n + 1) e^-60 relative.
    cutoff = -(alpha_max * eps0 + _RDP_LOG_MARGIN)
    log_p, log_q, _ = _window(*rr_sum_logpmfs(eps0, n), cutoff)

    def rdp(alpha: float) -> float:
        return 2 * max(renyi_divergence(log_p, log_q, alpha), renyi_divergence(log_q, log_p, alpha))

    return rdp_to_dp(rdp, delta, orders)


# --- epsilon for a target delta -------------------------------------------------------------------


def _bisect_epsilon(delta_of: Callable[[float], float], delta: float, hi: float) -> float:
    """Smallest eps in [0, hi] with delta_of(eps) <= delta, within EPS_TOL, from above."""
    if delta_of(0.0) <= delta:
        return 0.0
    return bracket(lambda e: delta_of(e) <= delta, 0.0, hi, tol=EPS_TOL)[1]


def shuffle_delta(eps0: float, n: int, eps: float, analysis: Analysis, tail: float = 0.0) -> float:
    """delta(eps) of n aggregated eps0-LDP reports under a numerical analysis."""
    if analysis in ("clones", "stronger_clones"):
        p = clone_probability(eps0, analysis == "stronger_clones")
        return clone_delta(eps0, n, eps, p, tail)
    if analysis in ("sym_rappor_exact", "sym_rappor_deletion_exact"):
        return sym_rappor_delta_curve(eps0, n, analysis == "sym_rappor_deletion_exact")(eps)
    raise ValueError(f"{analysis!r} gives no delta(eps) curve")


def shuffle_epsilon(eps0: float, n: int, delta: float, analysis: Analysis = "clones") -> float:
    """Aggregate eps at `delta` of n eps0-LDP reports (replacement eps0; per-bit eps0 for RAPPOR).

    For a deletion-model randomizer under a generic analysis pass 2 * eps0 (000 §3).
    """
    if n < 1:
        raise ValueError("n must be at least 1")
    if analysis == "closed_form":
        return closed_form_epsilon(eps0, n, delta)
    if analysis == "sym_rappor_rdp":
        return sym_rappor_rdp_epsilon(eps0, n, delta)
    if analysis in ("sym_rappor_exact", "sym_rappor_deletion_exact"):
        curve = sym_rappor_delta_curve(eps0, n, analysis == "sym_rappor_deletion_exact")
        # Two coordinates each eps0-DP move under replacement.
        return _bisect_epsilon(curve, delta, 2 * eps0 if analysis == "sym_rappor_exact" else eps0)
    tail = delta * _TAIL_FRACTION
    return _bisect_epsilon(lambda e: shuffle_delta(eps0, n, e, analysis, tail), delta, eps0)


# --- amplification by Poisson sampling (001 Theorem 4) --------------------------------------------


def poisson_sampling(eps: float, delta: float, q: float) -> tuple[float, float]:
    """(eps, delta)-DP run on a Poisson sample of rate q is (ln(1 + q(e^eps - 1)), q delta)-DP."""
    if not 0 <= q <= 1:
        raise ValueError("sampling rate must be in [0, 1]")
    return math.log1p(q * math.expm1(eps)), q * delta


# --- inverse problems ---------------------------------------------------------------------------


def min_batch_size(
    eps0: float, eps: float, delta: float, analysis: Analysis = "clones", n_max: int = 10**9
) -> int:
    """Smallest n with shuffle_epsilon(eps0, n, delta) <= eps (the aggregator's minimum batch).

    The bounds decrease in n (more clones / more noise), so a doubling search then a bisection
    over integers finds the exact threshold. For ``closed_form``, an n outside the theorem's
    regime counts as failing. ValueError if even n_max does not suffice.
    """

    def ok(n: int) -> bool:
        if analysis == "closed_form" and not closed_form_valid(eps0, n, delta):
            return False
        return shuffle_epsilon(eps0, n, delta, analysis) <= eps

    if ok(1):
        return 1
    try:
        return smallest_passing(ok, 1, 2, tol=1, limit=n_max)
    except NoThresholdError:
        raise ValueError(
            f"no batch size up to {n_max} reaches eps={eps} with eps0={eps0}"
        ) from None


def max_local_epsilon(
    n: int, eps: float, delta: float, analysis: Analysis = "clones", eps0_max: float = 20.0
) -> float:
    """Largest eps0 (within EPS_TOL, from below) with shuffle_epsilon(eps0, n, delta) <= eps.

    The bounds increase with eps0. For ``closed_form`` an eps0 outside the regime counts as
    failing.
    """

    def ok(e0: float) -> bool:
        if analysis == "closed_form" and not closed_form_valid(e0, n, delta):
            return False
        return shuffle_epsilon(e0, n, delta, analysis) <= eps

    if ok(eps0_max):
        return eps0_max
    return bracket(ok, eps0_max, 0.0, tol=EPS_TOL)[1]
