"""Exact discrete Laplace and discrete Gaussian samplers (Canonne, Kamath, Steinke 2020, Alg. 1-3).

Only integer and rational (`fractions.Fraction`) arithmetic and uniform random bits are used, so
the output distribution is exactly the stated one: no floating-point rounding can leak through
the noise (the reason 004 §4.2 asks for these samplers). The randomness source is a
``randbits(k) -> int`` callable: `secrets.randbits` by default, `random.Random(seed).getrandbits`
for reproducible simulation.

Targets:
* discrete Laplace with scale t: P[Z = z] = (e^(1/t) - 1)/(e^(1/t) + 1) e^(-|z|/t);
* discrete Gaussian N_Z(0, sigma^2): P[X = x] proportional to exp(-x^2 / (2 sigma^2)).

A float sigma^2 (e.g. from the analytic Gaussian mechanism) converts exactly to a Fraction, floats
being dyadic rationals.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from fractions import Fraction
from math import isqrt

RandBits = Callable[[int], int]
Rational = Fraction | int | float


def _frac(x: Rational) -> Fraction:
    return x if isinstance(x, Fraction) else Fraction(x)


def uniform_below(n: int, randbits: RandBits = secrets.randbits) -> int:
    """Uniform integer in [0, n) by rejection on randbits(bit_length(n))."""
    if n <= 0:
        raise ValueError("n must be positive")
    k = n.bit_length()
    while True:
        r = randbits(k)
        if r < n:
            return r


def bernoulli(p: Fraction, randbits: RandBits = secrets.randbits) -> bool:
    """Bernoulli(p) for rational p in [0, 1]: U < numerator with U uniform below denominator."""
    if not 0 <= p <= 1:
        raise ValueError("p must be in [0, 1]")
    return uniform_below(p.denominator, randbits) < p.numerator


def bernoulli_exp(gamma: Rational, randbits: RandBits = secrets.randbits) -> bool:
    """Bernoulli(exp(-gamma)) for rational gamma >= 0 (CKS20 Algorithm 1).

    For gamma <= 1, the first K with Bernoulli(gamma/K) = 0 is odd with probability
    sum_k (-gamma)^k / k! = e^-gamma; larger gamma factors into floor(gamma) trials of e^-1.
    """
    g = _frac(gamma)
    if g < 0:
        raise ValueError("gamma must be non-negative")
    while g > 1:
        if not bernoulli_exp(1, randbits):
            return False
        g -= 1
    k = 1
    while bernoulli(g / k, randbits):
        k += 1
    return k % 2 == 1


def geometric_exp(x: Rational, randbits: RandBits = secrets.randbits) -> int:
    """Geometric with success probability 1 - e^-x, x = s/u > 0 rational (CKS20 Algorithm 2).

    U uniform in [0, u) accepted with probability e^(-U/u), plus u times the number V of e^-1
    successes, gives (U + uV)/u exponential-like with integer resolution 1/u; dividing by s and
    flooring gives the geometric.
    """
    xf = _frac(x)
    if xf <= 0:
        raise ValueError("x must be positive")
    s, u = xf.numerator, xf.denominator
    while True:
        small = uniform_below(u, randbits)
        if bernoulli_exp(Fraction(small, u), randbits):
            break
    v = 0
    while bernoulli_exp(1, randbits):
        v += 1
    return (small + u * v) // s


def discrete_laplace(scale: Rational, randbits: RandBits = secrets.randbits) -> int:
    """Discrete Laplace with scale t > 0 (CKS20 Algorithm 2)."""
    t = _frac(scale)
    if t <= 0:
        raise ValueError("scale must be positive")
    while True:
        negative = uniform_below(2, randbits) == 1
        y = geometric_exp(1 / t, randbits)
        # (negative, 0) is rejected so that 0 is not produced twice as often.
        if negative and y == 0:
            continue
        return -y if negative else y


def _floor_sqrt(x: Fraction) -> int:
    """floor(sqrt(x)) for x >= 0, exactly."""
    r = isqrt(x.numerator // x.denominator)
    while Fraction((r + 1) ** 2) <= x:
        r += 1
    return r


def discrete_gaussian(sigma2: Rational, randbits: RandBits = secrets.randbits) -> int:
    """N_Z(0, sigma2) for rational sigma2 > 0 (CKS20 Algorithm 3).

    Rejection sampling from a discrete Laplace of scale t = floor(sigma) + 1, accepting Y with
    probability exp(-(|Y| - sigma^2/t)^2 / (2 sigma^2)).
    """
    s2 = _frac(sigma2)
    if s2 <= 0:
        raise ValueError("sigma2 must be positive")
    t = _floor_sqrt(s2) + 1
    while True:
        y = discrete_laplace(t, randbits)
        gamma = (abs(y) - s2 / t) ** 2 / (2 * s2)
        if bernoulli_exp(gamma, randbits):
            return y


def discrete_gaussian_vector(
    sigma2: Rational, size: int, randbits: RandBits = secrets.randbits
) -> list[int]:
    """`size` independent N_Z(0, sigma2) draws."""
    s2 = _frac(sigma2)
    return [discrete_gaussian(s2, randbits) for _ in range(size)]


def discrete_laplace_vector(
    scale: Rational, size: int, randbits: RandBits = secrets.randbits
) -> list[int]:
    """`size` independent discrete Laplace draws of scale `scale`."""
    t = _frac(scale)
    return [discrete_laplace(t, randbits) for _ in range(size)]
