"""Aggregator randomization (004 §5, §6.1.2): discrete noise added to Prio3 aggregate shares.

Each aggregator adds independent N_Z(0, sigma^2) (or discrete Laplace) noise to every coordinate
of its aggregate share before the share leaves it. Noise is an integer z; in the field it is
z mod p, i.e. p - |z| when negative. After unsharding, the collector reads a field element v as
the signed integer v if v <= (p-1)/2 and v - p otherwise (`decode_signed`), which is exact as long
as |true aggregate + total noise| < p/2.

What the noise guarantees (`noise_guarantee`): one honest aggregator's noise alone makes the
released aggregate DP (004 §5), whatever the other aggregator and the clients do, because the
VDAF's validity proof bounds how far one client's report can move the aggregate
(`vdaf_shifts`). Epsilon is computed from the noise parameter (`noise_guarantee`).
"""

from __future__ import annotations

import math
import secrets
from collections.abc import Sequence
from dataclasses import dataclass

from shared.dap.task import AggregatorNoise
from shared.dp.composition import cdp_eps
from shared.dp.gaussian import discrete_gaussian_epsilon
from shared.dp.samplers import RandBits, discrete_gaussian_vector
from shared.vdaf.field import Field, FieldArray
from shared.vdaf.spec import VdafSpec


def add_noise(field: type[Field], agg_share: FieldArray, noise: Sequence[int]) -> FieldArray:
    """agg_share + noise in the field; `noise` are signed integers, one per share element."""
    if agg_share.shape[:-1] != (len(noise),):
        raise ValueError(f"{len(noise)} noise values for an aggregate share of {agg_share.shape}")
    return field.add(agg_share, field.from_ints(noise))


def add_discrete_gaussian(
    field: type[Field],
    agg_share: FieldArray,
    sigma2: float,
    randbits: RandBits = secrets.randbits,
) -> FieldArray:
    """agg_share plus independent exact N_Z(0, sigma2) noise on every coordinate."""
    return add_noise(
        field, agg_share, discrete_gaussian_vector(sigma2, agg_share.shape[0], randbits)
    )


def decode_signed(field: type[Field], values: Sequence[int]) -> list[int]:
    """Field elements in [0, p) back to signed integers in (-p/2, p/2]."""
    p = field.MODULUS
    half = p // 2
    return [v - p if v > half else v for v in values]


def vdaf_shifts(vdaf: VdafSpec) -> tuple[int, ...] | None:
    """The worst change replacing one client's valid measurement can make to the aggregate, as
    the nonzero per-coordinate shifts (signs do not matter to symmetric noise); None for a VDAF
    this does not know. Valid is what the Prio3 proof enforces, so this holds for malicious
    clients too."""
    top = vdaf.max_value
    if vdaf.type == "Prio3Count":
        return (1,)
    if vdaf.type == "Prio3Sum":
        return (top,)
    if vdaf.type == "Prio3Histogram":
        return (1, -1)  # one-hot to another one-hot (004 §6.1.2: L2 sqrt(2))
    if vdaf.max_ones is not None:  # the multi-hot vector of either draft
        assert vdaf.length is not None
        return (1,) * min(2 * vdaf.max_ones, vdaf.length)
    if vdaf.type in ("Prio3SumVec", "Prio3SumVecField64Multiproof"):
        assert vdaf.length is not None
        return (top,) * vdaf.length
    return None


def _norm(shifts: Sequence[int], l2: bool) -> float:
    return math.sqrt(sum(s * s for s in shifts)) if l2 else float(sum(abs(s) for s in shifts))


def noise_sensitivity(noise: AggregatorNoise, vdaf: VdafSpec) -> float | None:
    """The sensitivity the guarantee is about (L2 for the Gaussian, L1 for the Laplace): the
    VDAF's bound, or the stated one if larger (a stated value below what a valid report can do
    would overstate the privacy); the stated one alone for a VDAF without a known bound."""
    shifts = vdaf_shifts(vdaf)
    if shifts is None:
        return noise.sensitivity
    bound = _norm(shifts, noise.mechanism == "discrete_gaussian")
    return bound if noise.sensitivity is None else max(bound, noise.sensitivity)


@dataclass(frozen=True)
class NoiseGuarantee:
    """(eps, delta) of one aggregator's noise on the aggregate, and how it was computed."""

    eps: float
    delta: float
    basis: str


def noise_guarantee(noise: AggregatorNoise, vdaf: VdafSpec, delta: float) -> NoiseGuarantee | None:
    """What one honest aggregator's noise guarantees (004 §5), computed from its parameter.

    Discrete Gaussian, at `delta`: the exact epsilon of the discrete mechanism when at most two
    coordinates move (Count, Sum, Histogram: `discrete_gaussian_epsilon`), else the zCDP bound
    rho = sensitivity^2 / (2 sigma^2) (CKS20: the discrete Gaussian is as concentrated as the
    continuous one) converted to (eps, delta). Discrete Laplace: pure eps = L1 sensitivity /
    scale. None when no sensitivity is known for the VDAF.
    """
    sens = noise_sensitivity(noise, vdaf)
    if sens is None:
        return None
    if noise.mechanism == "discrete_laplace":
        return NoiseGuarantee(
            sens / float(noise.parameter),
            0.0,
            f"aggregator noise (discrete Laplace scale={noise.scale}, L1 sensitivity {sens:.4g})",
        )
    sigma2 = float(noise.parameter)
    shifts = vdaf_shifts(vdaf)
    what = f"aggregator noise (discrete Gaussian sigma={noise.sigma}, L2 sensitivity {sens:.4g}"
    if shifts is not None and len(shifts) <= 2 and _norm(shifts, True) >= sens:
        eps = discrete_gaussian_epsilon(sigma2, delta, shifts)
        return NoiseGuarantee(eps, delta, what + ", exact)")
    eps = cdp_eps(sens * sens / (2 * sigma2), delta)
    return NoiseGuarantee(eps, delta, what + ", zCDP)")
