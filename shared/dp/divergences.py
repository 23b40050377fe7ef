"""Divergences between discrete distributions given by log-pmfs on a common support.

The hockey-stick divergence D_{e^eps}(P || Q) = sum_x max(0, P(x) - e^eps Q(x)) is the smallest
delta for which the pair is (eps, delta)-indistinguishable; the Renyi divergence
D_alpha(P || Q) = ln E_Q[(P/Q)^alpha] / (alpha - 1) (001 Definition 2.2; 000 Definition C.2)
defines RDP.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]


def hockey_stick_1d(log_p: FloatArray, log_q: FloatArray, eps: float) -> float:
    """D_{e^eps}(P || Q)."""
    return float(np.sum(np.maximum(np.exp(log_p) - np.exp(eps + log_q), 0.0)))


def hockey_stick_product(
    log_p1: FloatArray, log_q1: FloatArray, log_p2: FloatArray, log_q2: FloatArray, eps: float
) -> float:
    """D_{e^eps}(P1 x P2 || Q1 x Q2), exactly, in O(N log N).

    The privacy loss of the product is L1(x) + L2(y); for each x the pairs that count are the y
    with L2(y) > eps - L1(x), a prefix of the y sorted by decreasing L2.
    """
    keep1 = np.isfinite(log_p1) | np.isfinite(log_q1)
    keep2 = np.isfinite(log_p2) | np.isfinite(log_q2)
    lp1, lq1, lp2, lq2 = log_p1[keep1], log_q1[keep1], log_p2[keep2], log_q2[keep2]
    # Points impossible under both were dropped, so the loss is finite or +-inf, never nan.
    l1, l2 = lp1 - lq1, lp2 - lq2
    order = np.argsort(-l2, kind="stable")
    neg_l2 = -l2[order]
    sp2 = np.concatenate([[0.0], np.cumsum(np.exp(lp2[order]))])
    sq2 = np.concatenate([[0.0], np.cumsum(np.exp(lq2[order]))])
    k = np.searchsorted(neg_l2, l1 - eps, side="left")
    terms = np.exp(lp1) * sp2[k] - math.exp(eps) * np.exp(lq1) * sq2[k]
    return float(np.sum(np.maximum(terms, 0.0)))


def renyi_divergence(log_p: FloatArray, log_q: FloatArray, alpha: float) -> float:
    """D_alpha(P || Q) for alpha > 1 (+inf if P is not absolutely continuous w.r.t. Q)."""
    mask = np.isfinite(log_p)
    if np.any(mask & ~np.isfinite(log_q)):
        return math.inf
    terms = alpha * log_p[mask] + (1 - alpha) * log_q[mask]
    top = float(terms.max())
    return (top + math.log(float(np.sum(np.exp(terms - top))))) / (alpha - 1)
