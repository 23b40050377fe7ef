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
* ``sym_rappor_exact`` / ``sym_rappor_deletion_exact`` -- an upper bound, tight up to a fraction
  of a percent in eps from n ~ 50 (see below), on the hockey-stick divergence of the aggregate
  (bucket-wise sums) of n symmetric-RAPPOR reports (000 appendix C; 004 §4.3), every bit flipped
  w.p. q = 1/(e^eps0+1), when client 1's item changes i -> j (two coordinates move) or becomes
  the all-noise reference (one coordinate), for EVERY dataset of the other n - 1 clients.
* ``sym_rappor_rdp`` -- 000 appendix C.1.3, Theorem C.3: Renyi divergence at most 2 rho_2RR,
  converted to (eps, delta) by `composition.rdp_to_dp`. Caveat: the theorem needs rho_2RR as the
  maximum over every dataset of the others; `sym_rappor_rdp_epsilon` evaluates the splits where
  all of them hold the same bit (both directions), which `test_rr_sum_worst_split_is_all_others_
  equal` finds to be the maximum (also at n = 1e5 for orders 1.5 to 40) but which is not proved.
  So `shuffle_epsilon` states the larger of it and ``sym_rappor_exact`` (sound for every
  dataset; in practice the RDP value is the larger, and 004 Table 1 is reproduced).

Symmetric RAPPOR, every split. The bits are independent given the dataset, and the coordinates
other than i and j have the same distribution under both datasets, so only the two moving sums
matter. With k of the others holding the coordinate, its sum is P_k = N_k * Bern(1-q) if client 1
holds it and Q_k = N_k * Bern(q) if not, N_k = Bin(k, 1-q) + Bin(n-1-k, q). Replacement with a
others on i and b on j is the product pair (P_a x Q_b, Q_a x P_b); deletion is (P_a, Q_a) and its
reverse. The map s -> n - s carries (P_k, Q_k) to (Q_{n-1-k}, P_{n-1-k}), so the family
{(P_k, Q_k)} is closed under reversal and every coordinate of every dataset, in either direction,
is one of its members.

1. A dominating pair (Zhu, Dong, Wang 2022, "Optimal accounting of differential privacy via
   characteristic function") for the whole family: a pair (P*, Q*) with
   H_a(P*||Q*) >= H_a(P_k||Q_k) for every k and every a = e^eps >= 0. f(a) = max_k H_a(P_k||Q_k)
   is convex (a maximum of convex functions), f(a) = 1 - a for a <= e^-eps0 and 0 for
   a >= e^eps0 (one RR bit's loss lies in [-eps0, eps0]), and closure under reversal gives
   f(a) = 1 - a + a f(1/a). It is evaluated on a grid of eps in [0, eps0] (`_profile_grid`), as
   an upper bound: members are bounded blockwise (`_split_blocks`: adding the same independent
   noise to both sides is post-processing), each member's P_k/Q_k increases in s (N_k is
   log-concave) so each divergence is one tail sum, and mass left out of the windows is added.
   The greatest convex minorant of these upper values lies above f (f(a_i) <= sum l_j f(a_j) <=
   sum l_j w_j for any convex combination), is piecewise linear and convex, hence the profile of
   a discrete pair: Q*-mass at each vertex a_i equal to the slope increment there, P* = a_i Q*,
   the value at e^eps0 as P*-mass at loss +inf, the rest of Q* at loss -inf (the pessimistic
   "connect the dots" pair of Doroshenko, Ghazi, Kamath, Kumar, Manurangsi 2022).
2. Deletion: delta(eps) = H_{e^eps}(P*||Q*), both directions included.
3. Replacement: the profile over every a >= 0 determines the trade-off function (Dong, Roth, Su
   2022, "Gaussian differential privacy", primal-dual view), so each member, and each reversed
   member, is less informative than (P*, Q*): by Blackwell's theorem it is (K P*, K Q*) for a
   Markov kernel K. Two coordinates are then ((K x K') (P* x P*), (K x K') (Q* x Q*)), and data
   processing gives H(P_a x Q_b || Q_a x P_b) <= H(P* x P* || Q* x Q*) for every (a, b) (the
   composition theorem of dominating pairs, Zhu, Dong, Wang 2022): delta(eps) is the latter,
   evaluated exactly by `divergences.hockey_stick_product`.

Hand-written numpy rather than Google's dp_accounting: the pair has at most a few thousand
atoms, whose product `hockey_stick_product` evaluates exactly, where a PLD library would round
the losses onto its own grid once more.

Losses against the true maximum over datasets: the blocks and the grid's chords (~0.1% in eps
up to n ~ 10^6, `_SPLIT_BLOCKS`, `_profile_grid`) and, for replacement, composing each
coordinate's worst case though no single dataset attains both at every eps. That last one shows
at large delta, where the worst split differs from eps to eps (n = 30, eps0 = 1, delta = 0.1:
eps 0.028 against 0.019), and at tiny n (11% at n = 5, delta = 0.1); at delta <= 1e-3 it is
within 2% from n = 10, 0.3% from n = 20 and 0.1% at n = 1000 (`tests/dp/test_accounting.py`).

The first version evaluated one split (no other client on i or j), which is not the worst: the
coordinates' losses can align when the others crowd one moving bucket. At eps0 = 5, n = 60 it
stated eps = 6.75 at delta = 1e-2 where some dataset has delta > 0.4; at delta = 1e-9 the sound
replacement eps is larger by 4.5% (eps0 = 5) and 10% (eps0 = 7) at n = 1e5, by 0.2-4% at 1e6,
and at eps0 = 7, n = 1e4 it is 13.9 (of 2 eps0 = 14) where 7.9 was stated. Deletion moved by at
most 0.1%.

Every ``*_epsilon`` solves delta(eps) <= delta by bisection over a monotone bound and returns
the upper end of the final bracket: the reported eps satisfies the bound and exceeds the exact
solution by at most `EPS_TOL`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Literal, get_args

import numpy as np

# The binomial functions (`shared.dp.binomial`, on scipy.special) are imported by the functions
# that use them: a third of a second of a process's start, and most processes importing this
# module (every service, the CLI) never call them.
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
#: The largest batch size B searched for (a recipe's B is at most this).
MAX_B = 10**9


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
    from shared.dp import binomial  # noqa: PLC0415

    if eps >= eps0:
        return 0.0
    alpha = math.exp(eps0) / (math.exp(eps0) + 1)
    ee = math.exp(eps)
    beta = (alpha - ee * (1 - alpha)) / ((2 * alpha - 1) * (1 + ee))
    m = n - 1
    if tail > 0:
        lo = int(binomial.ppf(tail, m, p_clone))
        hi = int(binomial.isf(tail, m, p_clone))
    else:
        lo, hi = 0, m
    c = np.arange(lo, hi + 1, dtype=np.float64)
    weight = binomial.pmf(c, m, p_clone)
    left_out = max(0.0, 1.0 - float(weight.sum()))
    a_max = np.ceil(beta * (c + 1)) - 1
    f1 = binomial.cdf(a_max, c, 0.5)
    f0 = binomial.cdf(a_max - 1, c, 0.5)
    per_c = alpha * f1 + (1 - alpha) * f0 - ee * ((1 - alpha) * f1 + alpha * f0)
    return float(np.dot(weight, np.maximum(per_c, 0.0))) + left_out


# --- symmetric RAPPOR, Renyi (000 C.1.3) ----------------------------------------------------------


def _noise_logpmf(m: int, q: float, ones: int) -> FloatArray:
    """Log pmf on 0..m of the other m clients' bits on one coordinate (`ones` of them hold it)."""
    from shared.dp import binomial  # noqa: PLC0415

    k = np.arange(m + 1, dtype=np.float64)
    if ones == 0:
        return np.asarray(binomial.logpmf(k, m, q), dtype=np.float64)
    # Bin(ones, 1-q) + Bin(m-ones, q): only used for small m (worst-case checks).
    pmf = np.convolve(
        binomial.pmf(np.arange(ones + 1), ones, 1 - q),
        binomial.pmf(np.arange(m - ones + 1), m - ones, q),
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


#: Points of an RR-sum pmf are dropped from Renyi sums below e^-(alpha eps0 + 60): the cutoff
#: covers the (P/Q)^alpha <= e^(alpha eps0) growth of a dropped term with an e^-60 margin.
_RDP_LOG_MARGIN = 60.0


def _window(
    log_p: FloatArray, log_q: FloatArray, log_cutoff: float
) -> tuple[FloatArray, FloatArray, float]:
    """The points where P or Q is at least e^log_cutoff, and the larger mass left out."""
    keep = np.maximum(log_p, log_q) >= log_cutoff
    dropped = max(float(np.exp(log_p[~keep]).sum()), float(np.exp(log_q[~keep]).sum()))
    return log_p[keep], log_q[keep], dropped


def rr_sum_rdp(eps0: float, n: int, alpha: float, others_ones: int = 0) -> float:
    """D_alpha of 000 C.1.3's pair for one split of the others (`others_ones` hold the bit): the
    larger of both directions. rho_2RR is its maximum over splits; `sym_rappor_rdp_epsilon`
    takes the split 0 (n - 1 by reflection), the maximum only as far as tests check numerically."""
    log_p, log_q = rr_sum_logpmfs(eps0, n, others_ones)
    return max(renyi_divergence(log_p, log_q, alpha), renyi_divergence(log_q, log_p, alpha))


def sym_rappor_rdp_epsilon(
    eps0: float, n: int, delta: float, orders: Sequence[float] | None = None
) -> float:
    """000 Theorem C.3: the aggregate is (alpha, 2 rho_2RR)-RDP; converted and minimised.

    rho_2RR is evaluated with no other client holding the bit (see the module docstring's caveat).

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


# --- symmetric RAPPOR: a dominating pair over every split of the other clients ---------------

#: Mass of each binomial tail left out of an other-clients pmf; added back to delta.
_FACTOR_TAIL = 1e-20
#: At most this many base pairs cover the splits k = 0..(n-1)/2 (see `_split_blocks`); a block
#: of j + 1 splits is bounded by the pair of n - j clients, so the bound costs ~1/(4 blocks)
#: relative epsilon over evaluating every split. Beyond n ~ 10^6 (at any eps0) the blocks' direct
#: convolutions would exceed `_CONV_BUDGET` multiply-adds, and fewer blocks are used (at least
#: `_MIN_SPLIT_BLOCKS`, ~1.6% in eps), which keeps the time linear in n.
_SPLIT_BLOCKS = 256
_MIN_SPLIT_BLOCKS = 16
_CONV_BUDGET = 1e10
#: The epsilon grid of the per-coordinate profile: spacing `_GRID_FINE` times the spread of one
#: coordinate's privacy loss (at most `_GRID_STEP`) near 0, growing by `_GRID_GROWTH` times eps.
_GRID_STEP = 1e-3
_GRID_FINE = 0.02
_GRID_GROWTH = 2e-3


def _binom_windows(trials: Sequence[int], p: float) -> tuple[list[FloatArray], FloatArray]:
    """Bin(t, p) for each t of `trials`, on the window outside which each tail is at most
    `_FACTOR_TAIL`, and the mass each leaves out. One vectorised call per quantity: per-call
    overhead would otherwise dominate. (Only the shapes matter, not where the windows start.)

    The upper end is the lower quantile of Bin(t, 1 - p), which Boost.Math computes accurately where
    its upper quantile does not.
    """
    from shared.dp import binomial  # noqa: PLC0415

    t = np.asarray(trials, dtype=np.int64)
    lo = binomial.ppf(_FACTOR_TAIL, t, p).astype(np.int64)
    hi = t - binomial.ppf(_FACTOR_TAIL, t, 1 - p).astype(np.int64)
    sizes = hi - lo + 1
    points = np.concatenate([np.arange(a, b + 1) for a, b in zip(lo, hi, strict=True)])
    pmf = np.asarray(binomial.pmf(points, np.repeat(t, sizes), p), dtype=np.float64)
    left_out = binomial.cdf(lo - 1, t, p) + binomial.cdf(t - hi - 1, t, 1 - p)
    return np.split(pmf, np.cumsum(sizes)[:-1]), np.asarray(left_out, dtype=np.float64)


def _rr_pair(holders: FloatArray, rest: FloatArray, q: float) -> tuple[FloatArray, FloatArray]:
    """(P, Q) = (N * Bern(1-q), N * Bern(q)) of one coordinate's sum, N = holders * rest the other
    clients' bits (those holding it, the rest): client 1 holds it under P and not under Q.

    Both on a common window where they are positive.
    """
    # Direct convolution keeps every point's relative accuracy (an FFT would not in the tails).
    others = np.convolve(holders, rest)
    padded_lo, padded_hi = np.concatenate([[0.0], others]), np.concatenate([others, [0.0]])
    return (1 - q) * padded_lo + q * padded_hi, q * padded_lo + (1 - q) * padded_hi


def _split_blocks(eps0: float, n: int) -> list[tuple[int, int]]:
    """(clients, ones) of base pairs that dominate every member k = 0..(n-1)//2 of the family.

    The splits are cut into blocks [k0, k1] (see `_SPLIT_BLOCKS` for how many).
    For k in the block, N_k = N_base * R_k with N_base = Bin(k0, 1-q) + Bin(n-1-k1, q) and
    R_k = Bin(k-k0, 1-q) + Bin(k1-k, q): member k is the base pair (client 1 among n - (k1-k0)
    clients, k0 of the others holding 1) with the same independent R_k added to both sides, a
    post-processing, so its divergences are at most the base pair's.
    """
    q = 1 / (math.exp(eps0) + 1)
    # Each factor of the middle split's pmf spans about 19 standard deviations (`_FACTOR_TAIL`).
    width = 19 * math.sqrt((n - 1) / 2 * q * (1 - q)) + 1
    blocks = max(_MIN_SPLIT_BLOCKS, min(_SPLIT_BLOCKS, int(_CONV_BUDGET / width**2)))
    k_max = (n - 1) // 2
    size = -(-(k_max + 1) // blocks)
    # Blocks double from a single split at k = 0, the worst split at small delta, up to `size`.
    starts, k0 = [], 0
    while k0 <= k_max:
        starts.append(k0)
        k0 += min(size, max(1, k0))
    ends = [*(k - 1 for k in starts[1:]), k_max]
    return [(n - (k1 - k0), k0) for k0, k1 in zip(starts, ends, strict=True)]


def _two_sided_profile(
    p: FloatArray, q: FloatArray, left_out: float, eps: FloatArray
) -> FloatArray:
    """max(H_{e^e}(P||Q), H_{e^e}(Q||P)) + left_out at every e of `eps` (all >= 0).

    P/Q increases along the window (N is log-concave as a convolution of binomials), so each
    divergence is a tail sum past one threshold: cumulative sums and one searchsorted for all e.
    """
    # Monotone in exact arithmetic; the running max only guards searchsorted against rounding.
    loss = np.maximum.accumulate(np.log(p) - np.log(q))
    zero = np.zeros(1)
    tail_p = np.concatenate([np.cumsum(p[::-1])[::-1], zero])
    tail_q = np.concatenate([np.cumsum(q[::-1])[::-1], zero])
    head_p = np.concatenate([zero, np.cumsum(p)])
    head_q = np.concatenate([zero, np.cumsum(q)])
    scale = np.exp(eps)
    up = np.searchsorted(loss, eps, side="right")
    down = np.searchsorted(loss, -eps, side="left")
    forward = tail_p[up] - scale * tail_q[up]
    backward = head_q[down] - scale * head_p[down]
    return np.asarray(np.maximum(np.maximum(forward, backward), 0.0) + left_out, dtype=np.float64)


def _lower_hull(x: FloatArray, y: FloatArray) -> list[int]:
    """Indices of the vertices of the greatest convex minorant of the points (x sorted)."""
    hull: list[int] = []
    for i in range(len(x)):
        while len(hull) >= 2:
            a, b = hull[-2], hull[-1]
            # Drop b if it lies on or above the chord from a to i.
            if (y[b] - y[a]) * (x[i] - x[a]) >= (y[i] - y[a]) * (x[b] - x[a]):
                hull.pop()
            else:
                break
        hull.append(i)
    return hull


def _profile_grid(eps0: float, n: int) -> FloatArray:
    """0 = e_0 < ... < e_I = eps0 with spacing h + r e (so the chords' excess stays a fixed
    fraction of delta near any eps), h a fraction of the spread (1 - 2q)/sd(N) of the loss."""
    q = 1 / (math.exp(eps0) + 1)
    spread = (1 - 2 * q) / math.sqrt(max(1.0, (n - 1) * q * (1 - q)))
    h, r = min(_GRID_STEP, _GRID_FINE * spread), _GRID_GROWTH
    # eps0 = 0 (no loss at all) needs only e_0 = 0.
    count = math.ceil(math.log1p(r * eps0 / h) / r) if eps0 > 0 else 0
    return np.asarray(np.minimum(np.expm1(r * np.arange(count + 1)) * (h / r), eps0))


def sym_rappor_dominating_pair(eps0: float, n: int) -> tuple[FloatArray, FloatArray]:
    """Log masses (P*, Q*) of a discrete pair dominating one coordinate for every dataset.

    H_a(P*||Q*) >= H_a(P||Q) for every a >= 0 and every pair (P, Q) = (N_k * Bern(1-q),
    N_k * Bern(q)), k = 0..n-1, and every reversed pair (Q, P): see the module docstring.
    The last two atoms have privacy loss +inf and -inf.
    """
    q = 1 / (math.exp(eps0) + 1)
    eps = _profile_grid(eps0, n)
    blocks = _split_blocks(eps0, n)
    # A block's base pair: of its clients - 1 others, `ones` hold the coordinate (their bits are
    # Bin(ones, 1-q)) and the rest do not (Bin(clients - 1 - ones, q)).
    holders, left_a = _binom_windows([ones for _, ones in blocks], 1 - q)
    rest, left_b = _binom_windows([clients - 1 - ones for clients, ones in blocks], q)
    top = np.zeros_like(eps)
    for h, r, left in zip(holders, rest, left_a + left_b, strict=True):
        top = np.maximum(top, _two_sided_profile(*_rr_pair(h, r, q), float(left), eps))
    # The family is closed under reversal, so its profile below a = 1 is 1 - a + a f(1/a).
    below = np.exp(-eps[:0:-1])
    x = np.concatenate([[0.0], below, np.exp(eps)])
    y = np.concatenate([[1.0], 1 - below + below * top[:0:-1], top])
    hull = _lower_hull(x, y)
    vx, vy = x[hull], y[hull]
    slopes = np.diff(vy) / np.diff(vx)
    # A Q-atom of mass m at likelihood ratio a bends the profile's slope up by m at a.
    mass_q = np.maximum(np.diff(np.concatenate([slopes, [0.0]])), 0.0)
    mass_p = vx[1:] * mass_q
    with np.errstate(divide="ignore"):
        log_p = np.log(np.concatenate([mass_p, [vy[-1], 0.0]]))
        log_q = np.log(np.concatenate([mass_q, [0.0, max(0.0, 1.0 + slopes[0])]]))
    return log_p, log_q


def sym_rappor_delta_curve(eps0: float, n: int, deletion: bool = False) -> Callable[[float], float]:
    """An upper bound on eps -> delta of the sum of n symmetric-RAPPOR reports, every dataset.

    Deletion (one coordinate moves): the dominating pair's divergence. Replacement (two move):
    that of the pair composed with itself.
    """
    log_p, log_q = sym_rappor_dominating_pair(eps0, n)
    if deletion:
        return lambda eps: hockey_stick_1d(log_p, log_q, eps)
    return lambda eps: hockey_stick_product(log_p, log_q, log_p, log_q, eps)


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
        # rho_2RR is evaluated at the extreme split only (module docstring): never state less
        # than the bound over every dataset, so the claim holds whatever the split.
        return max(
            sym_rappor_rdp_epsilon(eps0, n, delta),
            shuffle_epsilon(eps0, n, delta, "sym_rappor_exact"),
        )
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
    eps0: float, eps: float, delta: float, analysis: Analysis = "clones", n_max: int = MAX_B
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
