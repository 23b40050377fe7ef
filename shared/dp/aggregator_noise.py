"""Aggregator randomization (004 §5, §6.1.2): discrete noise added to Prio3 aggregate shares.

Each aggregator adds independent N_Z(0, sigma^2) (or discrete Laplace) noise to every coordinate
of its aggregate share before the share leaves it. Noise is an integer z; in the field it is
z mod p, i.e. p - |z| when negative. After unsharding, the collector reads a field element v as
the signed integer v if v <= (p-1)/2 and v - p otherwise (`decode_signed`), which is exact as long
as |true aggregate + total noise| < p/2.
"""

from __future__ import annotations

import math
import secrets
from collections.abc import Sequence

from shared.dp.gaussian import analytic_gaussian_sigma
from shared.dp.samplers import RandBits, discrete_gaussian_vector
from shared.vdaf.field import Field, FieldArray


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


def histogram_sigma(eps: float, delta: float) -> float:
    """004 §6.1.2: sigma per aggregator for a one-hot histogram (L2 sensitivity sqrt(2))."""
    return analytic_gaussian_sigma(eps, delta, math.sqrt(2))
