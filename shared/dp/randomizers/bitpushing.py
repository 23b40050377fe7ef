"""Bit pushing for means and variances (Cormode, Markov, 003 §3; dp.md §1.6; dp-notes B.5).

A value x in [0, 2^b) (fixed point; `randomized_rounding` keeps reals unbiased) has bits x_j.
Each client reports one bit j drawn with probability p_j, optionally through binary randomized
response (keep w.p. e^eps/(1+e^eps): eps-LDP). The server debiases each bit's mean,
m^_j = (m~_j - q)/(1 - 2q), q = 1/(e^eps+1), and estimates the mean as sum_j 2^j m^_j, with
variance sum_j 4^j [m_j(1 - m_j) + q(1-q)/(1-2q)^2] / n_j given the n_j reports on bit j.

* Weighted one round: p_j proportional to 2^(alpha j) (alpha = 1 the theory's choice, 0.5 best in
  003's experiments without DP).
* Adaptive two rounds (003 §3.2, Algorithm 2): a fraction delta = 1/3 of the clients first with
  p_j proportional to 2^(gamma j), gamma = 0.5; then p_j = sqrt(beta_j)/sum sqrt(beta_k),
  beta_j = m^_j (1 - m^_j) 4^j; "caching" pools both rounds' reports.
* Bit squashing under DP (003 §5): a bit whose estimated mean is below `squash` times its expected
  DP-noise standard deviation is taken as 0 (003 found 1 +- 0.25 best). This trades a small bias
  for a large variance reduction on vacuous high bits, so squashed estimates are not unbiased.
  Adaptive rounds under DP are not unbiased either: a bit whose first-round noise pushed its
  mean to 0 or below gets no second-round reports, so its negative cached estimate stays.
* Aggregator noise (004 §5) of variance V on each tally (ones and zeros of every bit, as the
  VDAF aggregate holds them): to first order in the noise, the raw mean m~ = ones / n moves by
  (1 - m~)/n per unit on the ones and -m~/n on the zeros, so each debiased bit mean gains
  V ((1 - m~)^2 + m~^2) / (n (1 - 2q))^2 (`aggregate_noise_variances`); n itself is noisy, so
  this is the delta method's approximation, good while the noise is small against n.
* Variance: bit-push (X - c)^2 for a centre c (e.g. an earlier mean estimate), which estimates
  Var X + (E X - c)^2 (003 §3.3); signed values are shifted by a bound first.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from shared.dp.estimators import Estimate, FloatArray

IntArray = npt.NDArray[np.int64]


def weighted_probabilities(bits: int, alpha: float) -> FloatArray:
    """p_j proportional to 2^(alpha j), j = 0..bits-1."""
    w = np.exp2(alpha * np.arange(bits, dtype=np.float64))
    return np.asarray(w / w.sum(), dtype=np.float64)


def adaptive_probabilities(bit_means: FloatArray, fallback_alpha: float = 1.0) -> FloatArray:
    """003 Algorithm 2's second-round p_j: sqrt(beta_j) normalised, beta_j = m_j(1-m_j) 4^j.

    If every beta_j is 0 (the first round saw constant bits) the weighted p_j is used. A bit
    whose first-round mean is 0 gets no second-round report: with a very loose bit depth the
    low bits see few first-round reports, and the estimate can then be biased low.
    """
    m = np.clip(np.asarray(bit_means, dtype=np.float64), 0.0, 1.0)
    root = np.sqrt(m * (1 - m)) * np.exp2(np.arange(m.size, dtype=np.float64))
    total = float(root.sum())
    if total <= 0:
        return weighted_probabilities(m.size, fallback_alpha)
    return np.asarray(root / total, dtype=np.float64)


def randomized_rounding(x: npt.ArrayLike, rng: np.random.Generator) -> IntArray:
    """floor(x) + Bernoulli(frac(x)): integers with the same expectation."""
    arr = np.asarray(x, dtype=np.float64)
    low = np.floor(arr)
    return np.asarray(low + (rng.random(arr.shape) < arr - low), dtype=np.int64)


@dataclass(frozen=True)
class BitReports:
    """One bit per client: which bit (j) and the (possibly randomized) bit value."""

    j: IntArray
    bit: npt.NDArray[np.uint8]


@dataclass(frozen=True)
class BitTallies:
    """Per bit index: number of reports and number of ones."""

    reports: IntArray
    ones: IntArray

    def __add__(self, other: BitTallies) -> BitTallies:
        return BitTallies(self.reports + other.reports, self.ones + other.ones)


@dataclass(frozen=True)
class BitPushing:
    """Bit pushing over `bits`-bit values, with randomized response when `eps` is given."""

    bits: int
    eps: float | None = None

    @property
    def flip_probability(self) -> float:
        return 0.0 if self.eps is None else 1 / (math.exp(self.eps) + 1)

    def randomize(
        self, values: npt.ArrayLike, probabilities: FloatArray, rng: np.random.Generator
    ) -> BitReports:
        x = np.asarray(values, dtype=np.int64)
        if x.size and (x.min() < 0 or x.max() >= 1 << self.bits):
            raise ValueError(f"values must be integers in [0, 2^{self.bits})")
        p = np.asarray(probabilities, dtype=np.float64)
        if p.shape != (self.bits,):
            raise ValueError("one probability per bit")
        j = np.asarray(rng.choice(self.bits, size=x.size, p=p / p.sum()), dtype=np.int64)
        bit = (x >> j) & 1
        flip = rng.random(x.size) < self.flip_probability
        return BitReports(j, (bit ^ flip).astype(np.uint8))

    def tally(self, reports: BitReports) -> BitTallies:
        return BitTallies(
            np.bincount(reports.j, minlength=self.bits).astype(np.int64),
            np.bincount(reports.j, weights=reports.bit, minlength=self.bits).astype(np.int64),
        )

    def bit_means(self, tallies: BitTallies) -> FloatArray:
        """Debiased per-bit means (0 where a bit has no report)."""
        q = self.flip_probability
        raw = tallies.ones / np.maximum(tallies.reports, 1)
        return np.asarray(np.where(tallies.reports > 0, (raw - q) / (1 - 2 * q), 0.0))

    def noise_sd(self, tallies: BitTallies) -> FloatArray:
        """Standard deviation of each bit mean due to the randomized response alone."""
        q = self.flip_probability
        per_report = q * (1 - q) / (1 - 2 * q) ** 2
        return np.asarray(np.sqrt(per_report / np.maximum(tallies.reports, 1)))

    def squashed_means(self, tallies: BitTallies, squash: float) -> FloatArray:
        """003 §5 bit squashing: means below `squash` noise deviations become 0."""
        means = self.bit_means(tallies)
        return np.asarray(np.where(means < squash * self.noise_sd(tallies), 0.0, means))

    def bit_variances(self, tallies: BitTallies, means: FloatArray) -> FloatArray:
        """Variance of each bit's debiased mean, (m (1 - m) + q (1 - q) / (1 - 2q)^2) / n_j.

        m is the plug-in mean shrunk as Agresti and Coull do, (n_j m^ + 2) / (n_j + 4) clipped
        to [0, 1]: the raw plug-in makes m (1 - m) = 0 whenever noise pushes m^ to 0 or 1,
        which on a bit with few reports (a low bit under p_j ~ 2^j) claims a precision it does
        not have; with many reports the two agree.
        """
        n = tallies.reports.astype(np.float64)
        m = np.clip((n * np.asarray(means, dtype=np.float64) + 2) / (n + 4), 0.0, 1.0)
        q = self.flip_probability
        per_report = m * (1 - m) + q * (1 - q) / (1 - 2 * q) ** 2
        return np.asarray(per_report / np.maximum(n, 1), dtype=np.float64)

    def aggregate_noise_variances(
        self, tallies: BitTallies, coordinate_variance: float
    ) -> FloatArray:
        """Variance each debiased bit mean gains from noise of `coordinate_variance` on every
        tally (module docstring; 0 where a bit has no report, as its mean is then 0)."""
        n = tallies.reports.astype(np.float64)
        raw = np.clip(tallies.ones / np.maximum(n, 1), 0.0, 1.0)
        q = self.flip_probability
        spread = (1 - raw) ** 2 + raw**2
        added = coordinate_variance * spread / (np.maximum(n, 1) * (1 - 2 * q)) ** 2
        return np.asarray(np.where(n > 0, added, 0.0), dtype=np.float64)

    def mean(
        self, tallies: BitTallies, squash: float | None = None, noise_variance: float = 0.0
    ) -> Estimate:
        """sum_j 2^j m^_j with its standard error (`bit_variances`, plus
        `aggregate_noise_variances` when the tallies carry noise of `noise_variance`)."""
        means = self.bit_means(tallies) if squash is None else self.squashed_means(tallies, squash)
        var_j = self.bit_variances(tallies, means)
        if noise_variance:
            var_j = var_j + self.aggregate_noise_variances(tallies, noise_variance)
        scale = np.exp2(np.arange(self.bits, dtype=np.float64))
        value = np.asarray([float(np.dot(scale, means))])
        stderr = np.asarray([math.sqrt(float(np.dot(scale**2, var_j)))])
        return Estimate(value, stderr)


def weighted_mean(
    values: npt.ArrayLike,
    bits: int,
    rng: np.random.Generator,
    alpha: float = 0.5,
    eps: float | None = None,
    squash: float | None = None,
) -> Estimate:
    """One-round weighted bit pushing of integer `values`."""
    bp = BitPushing(bits, eps)
    reports = bp.randomize(values, weighted_probabilities(bits, alpha), rng)
    return bp.mean(bp.tally(reports), squash)


def adaptive_mean(
    values: npt.ArrayLike,
    bits: int,
    rng: np.random.Generator,
    first_fraction: float = 1 / 3,
    gamma: float = 0.5,
    eps: float | None = None,
    squash: float | None = None,
    cache: bool = True,
) -> Estimate:
    """003 Algorithm 2: two rounds, the second weighted by the first's bit variances."""
    x = np.asarray(values, dtype=np.int64)
    split = round(first_fraction * x.size)
    bp = BitPushing(bits, eps)
    first = bp.tally(bp.randomize(x[:split], weighted_probabilities(bits, gamma), rng))
    means = bp.bit_means(first) if squash is None else bp.squashed_means(first, squash)
    p2 = adaptive_probabilities(means)
    second = bp.tally(bp.randomize(x[split:], p2, rng))
    return bp.mean(first + second if cache else second, squash)


def centred_squares(values: npt.ArrayLike, centre: float, rng: np.random.Generator) -> IntArray:
    """(X - c)^2 randomly rounded to integers: bit-push these to estimate E[(X - c)^2]."""
    return randomized_rounding((np.asarray(values, dtype=np.float64) - centre) ** 2, rng)
