"""Aggregator randomization (004 §5, §6.1.2): fresh noise on every coordinate of a share.

The datastore only keeps the leader's noised share (`datastore.collection`); the draw is here.
"""

from __future__ import annotations

import secrets

from shared.dap.task import AggregatorNoise
from shared.dp.aggregator_noise import add_noise
from shared.dp.samplers import RandBits, discrete_gaussian_vector, discrete_laplace_vector
from shared.vdaf.field import Field, FieldArray


def noised_share(
    noise: AggregatorNoise | None,
    field: type[Field],
    agg_share: FieldArray,
    randbits: RandBits = secrets.randbits,
) -> FieldArray:
    """The aggregate share plus fresh noise on every coordinate, or the share itself for a task
    without aggregator noise.

    The noise comes from the exact CKS20 samplers driven by `randbits` (a cryptographic source
    in production: numpy's PRNG is predictable and its floats are not exact). Negative noise
    wraps to p - |z| in the field; the collector decodes signed (`decode_signed`). Callers
    store the result: a share noised twice would let the collector average the noise away.
    """
    if noise is None:
        return agg_share
    size = agg_share.shape[0]
    if noise.mechanism == "discrete_gaussian":
        values = discrete_gaussian_vector(noise.parameter, size, randbits)
    else:
        values = discrete_laplace_vector(noise.parameter, size, randbits)
    return add_noise(field, agg_share, values)
