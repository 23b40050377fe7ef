"""Independent oracles for the DP accounting tests: exact privacy curves evaluated by brute force
from their definitions, with `math` alone (numpy only to sum outer products; no shared.dp code,
no scipy), so that a test compares the accountant with something it did not compute itself.

* `rr_sum_delta`: the exact hockey-stick divergence of the sum of n binary randomized responses
  (keep w.p. e^eps0/(e^eps0+1)) when one client's bit flips; by FMT 2022 binary RR is the worst
  eps0-LDP randomizer for aggregation, so this is the tight value every generic bound must cover.
* `clone_pair_delta`: D_{e^eps}(P || Q) of the FMT 2021 clone pair (000 Theorem 3.2 / FMT 2022),
  by enumerating every (C, A, Delta) outcome.
* `sym_rappor_delta`: the exact divergence of the aggregate of symmetric-RAPPOR reports for two
  given neighbouring datasets, by convolving every client's full report distribution over the
  vector of bucket sums.
* `sym_rappor_worst_split_delta`: the same divergence maximised over every split of the other
  clients between the two moving buckets, from one-coordinate sums built bit by bit.
* `sym_rappor_crowded_delta`: the same at large n for one split, every other client on the new
  bucket, from binomial pmfs.
* `balle_wang_delta`: the analytic Gaussian mechanism's delta(eps) (Balle, Wang 2018 Theorem 8)
  with the normal CDF from `math.erfc`.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence

import numpy as np

Pmf = dict[tuple[int, ...], float]


def _log_binom_pmf(k: int, n: int, p: float) -> float:
    if p <= 0.0:
        return 0.0 if k == 0 else -math.inf
    log_choose = math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)
    return log_choose + k * math.log(p) + (n - k) * math.log1p(-p)


def _binom_pmf(k: int, n: int, p: float) -> float:
    return math.exp(_log_binom_pmf(k, n, p)) if 0 <= k <= n else 0.0


def hockey_stick(p: Pmf, q: Pmf, eps: float) -> float:
    """max over both directions of sum_x max(P(x) - e^eps Q(x), 0)."""
    ee = math.exp(eps)
    support = set(p) | set(q)
    forward = sum(max(p.get(x, 0.0) - ee * q.get(x, 0.0), 0.0) for x in support)
    backward = sum(max(q.get(x, 0.0) - ee * p.get(x, 0.0), 0.0) for x in support)
    return max(forward, backward)


def rr_sum_delta(eps0: float, n: int, eps: float) -> float:
    """Exact delta(eps) of the sum of n binary RR reports, client 1 holding 1 against 0 (the
    others' bits only shift the sum, so they hold 0)."""
    keep = math.exp(eps0) / (math.exp(eps0) + 1)
    flip = 1 - keep
    others = [_binom_pmf(k, n - 1, flip) for k in range(n)] + [0.0]
    p: Pmf = {(k,): keep * (others[k - 1] if k else 0.0) + flip * others[k] for k in range(n + 1)}
    q: Pmf = {(k,): flip * (others[k - 1] if k else 0.0) + keep * others[k] for k in range(n + 1)}
    return hockey_stick(p, q, eps)


def clone_pair_delta(eps0: float, n: int, eps: float, p_clone: float) -> float:
    """The clone pair's divergence: C ~ Bin(n-1, p_clone), A ~ Bin(C, 1/2),
    Delta ~ Bern(e^eps0/(e^eps0+1)); P = (A + Delta, C - A + 1 - Delta),
    Q = (A + 1 - Delta, C - A + Delta)."""
    alpha = math.exp(eps0) / (math.exp(eps0) + 1)
    p: Pmf = {}
    q: Pmf = {}
    for c in range(n):
        w = _binom_pmf(c, n - 1, p_clone)
        if w == 0.0:
            continue
        for a in range(c + 1):
            wa = w * _binom_pmf(a, c, 0.5)
            for delta_bit, wd in ((1, alpha), (0, 1 - alpha)):
                x = (a + delta_bit, c - a + 1 - delta_bit)
                y = (a + 1 - delta_bit, c - a + delta_bit)
                p[x] = p.get(x, 0.0) + wa * wd
                q[y] = q.get(y, 0.0) + wa * wd
    return hockey_stick(p, q, eps)


def _report_pmf(eps0: float, item: int | None, buckets: int) -> Pmf:
    """One client's symmetric-RAPPOR report: every bit of its one-hot vector (all zero for
    None, the all-noise reference) flipped independently w.p. 1/(e^eps0+1)."""
    flip = 1 / (math.exp(eps0) + 1)
    pmf: Pmf = {}
    for bits in itertools.product((0, 1), repeat=buckets):
        prob = 1.0
        for j, bit in enumerate(bits):
            truth = 1 if j == item else 0
            prob *= flip if bit != truth else 1 - flip
        pmf[bits] = prob
    return pmf


def _convolve(a: Pmf, b: Pmf) -> Pmf:
    out: Pmf = {}
    for x, px in a.items():
        for y, py in b.items():
            key = tuple(i + j for i, j in zip(x, y, strict=True))
            out[key] = out.get(key, 0.0) + px * py
    return out


def sym_rappor_sums(eps0: float, items: Sequence[int | None], buckets: int) -> Pmf:
    """The distribution of the vector of bucket sums of the clients' reports."""
    total: Pmf = {(0,) * buckets: 1.0}
    for item in items:
        total = _convolve(total, _report_pmf(eps0, item, buckets))
    return total


def sym_rappor_delta(
    eps0: float, items: Sequence[int | None], neighbour: Sequence[int | None], eps: float
) -> float:
    """Exact delta(eps) between the aggregates of two datasets of bucket indices."""
    buckets = 1 + max(i for i in (*items, *neighbour) if i is not None)
    return hockey_stick(
        sym_rappor_sums(eps0, items, buckets), sym_rappor_sums(eps0, neighbour, buckets), eps
    )


def smallest_epsilon(delta_of: Callable[[float], float], delta: float, hi: float) -> float:
    """The smallest eps in [0, hi] with delta_of(eps) <= delta, to 1e-9 (from above)."""
    if delta_of(0.0) <= delta:
        return 0.0
    bracket = [0.0, hi]
    for _ in range(max(1, math.ceil(math.log2(hi / 1e-9)))):
        mid = sum(bracket) / 2
        bracket[delta_of(mid) <= delta] = mid  # the feasible end is the upper one
    return bracket[1]


def _normal_cdf(x: float) -> float:
    return 0.5 * math.erfc(-x / math.sqrt(2))


def balle_wang_delta(sigma: float, eps: float, sensitivity: float) -> float:
    """Phi(D/(2 sigma) - eps sigma/D) - e^eps Phi(-D/(2 sigma) - eps sigma/D)."""
    a = sensitivity / (2 * sigma)
    b = eps * sigma / sensitivity
    return _normal_cdf(a - b) - math.exp(eps) * _normal_cdf(-a - b)


def _rr_sum_pmf(ones: int, zeros: int, flip: float) -> list[float]:
    """The sum of `ones` + `zeros` binary RR bits (true bit 1 / 0, flipped w.p. `flip`)."""
    pmf = [1.0]
    for bit in [1] * ones + [0] * zeros:
        p1 = 1 - flip if bit else flip
        pmf = [
            (pmf[s] if s < len(pmf) else 0.0) * (1 - p1) + (pmf[s - 1] if s else 0.0) * p1
            for s in range(len(pmf) + 1)
        ]
    return pmf


def sym_rappor_worst_split_delta(eps0: float, n: int, eps: float) -> float:
    """max over every split of the others of the exact replacement divergence, one coordinate
    pair at a time: a others hold the old bucket i and b the new one j (a + b <= n - 1), the
    sums on i and j are independent, and all other buckets are identical under both datasets.
    Coordinate i is (client 1 + a others holding it) vs (a others), j the reverse with b."""
    flip = 1 / (math.exp(eps0) + 1)
    ee = math.exp(eps)
    with_1 = [_rr_sum_pmf(k + 1, n - 1 - k, flip) for k in range(n)]
    without = [_rr_sum_pmf(k, n - k, flip) for k in range(n)]
    worst = 0.0
    for a in range(n):
        pa, qa = np.array(with_1[a]), np.array(without[a])
        for b in range(n - a):
            pb, qb = np.array(with_1[b]), np.array(without[b])
            # Both directions: D -> D' and D' -> D, over the grid of (sum on i, sum on j).
            forward = np.maximum(np.outer(pa, qb) - ee * np.outer(qa, pb), 0.0).sum()
            backward = np.maximum(np.outer(qa, pb) - ee * np.outer(pa, qb), 0.0).sum()
            worst = max(worst, float(forward), float(backward))
    return worst


def sym_rappor_crowded_delta(eps0: float, n: int, eps: float) -> tuple[float, float]:
    """(lower, upper) bounds on the exact replacement divergence when every other client holds
    the new bucket j, the split where both coordinates' losses align (for large n and small
    delta the worst one). Sums i: Bern(1-q) + Bin(n-1, q) vs Bern(q) + Bin(n-1, q); sums j:
    Bern(q) + Bin(n-1, 1-q) vs Bern(1-q) + Bin(n-1, 1-q). Binomial points below 1e-30 are
    left out (at most 2 l of each product's mass, l = the binomial mass left out); the interval is
    the divergence over the rest, minus e^eps 2 l and plus 2 l."""
    flip = 1 / (math.exp(eps0) + 1)
    ee = math.exp(eps)
    noise = [_binom_pmf(k, n - 1, flip) for k in range(n)]
    kept = [k for k, v in enumerate(noise) if v >= 1e-30]
    lo, hi = kept[0], kept[-1]
    left_out = math.fsum(noise[:lo]) + math.fsum(noise[hi + 1 :])
    window = np.array([0.0, *noise[lo : hi + 1], 0.0])
    # Sum on i minus lo (client 1 contributes the shift by one).
    with_1 = (1 - flip) * window[:-1] + flip * window[1:]
    without = flip * window[:-1] + (1 - flip) * window[1:]
    # n - (sum on j) has the law of sum i with the roles of D and D' exchanged.
    forward = np.maximum(np.outer(with_1, with_1) - ee * np.outer(without, without), 0.0).sum()
    backward = np.maximum(np.outer(without, without) - ee * np.outer(with_1, with_1), 0.0).sum()
    value = max(float(forward), float(backward))
    return value - ee * 2 * left_out, value + 2 * left_out
