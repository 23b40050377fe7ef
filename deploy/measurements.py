"""Measurements for ``sagg upload`` (the upload itself is the SDK's client, `client_sdk.upload`).

`random_measurements` draws valid measurements for any VDAF (``sagg upload --random N``, demos
and load tests), and `expected_aggregate` is what collecting exactly those must give, the
plain-text oracle ``sagg upload`` prints and the end-to-end tests and benchmarks check.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

from shared.vdaf.plain_aggregate import PlainAggregate
from shared.vdaf.spec import VdafSpec

__all__ = ["expected_aggregate", "random_measurements"]


def random_measurements(vdaf: VdafSpec, count: int, rng: random.Random) -> list[Any]:
    """`count` valid measurements for `vdaf`, uniformly drawn (for demos and load tests)."""
    if vdaf.type == "Prio3Count":
        return [rng.randrange(2) for _ in range(count)]
    if vdaf.type == "Prio3Sum":
        return [rng.randint(0, vdaf.max_value) for _ in range(count)]
    if vdaf.type == "Prio3Histogram":
        assert vdaf.length is not None
        return [rng.randrange(vdaf.length) for _ in range(count)]
    if vdaf.type in ("Prio3SumVec", "Prio3SumVecField64Multiproof"):
        assert vdaf.length is not None
        top, length = vdaf.max_value, vdaf.length
        return [[rng.randint(0, top) for _ in range(length)] for _ in range(count)]
    assert vdaf.length is not None and vdaf.max_ones is not None  # the multi-hot vector
    length, max_count = vdaf.length, vdaf.max_ones
    out = []
    for _ in range(count):
        hot = set(rng.sample(range(length), rng.randint(0, max_count)))
        out.append([int(i in hot) for i in range(length)])
    return out


def expected_aggregate(vdaf: VdafSpec, measurements: Sequence[Any]) -> int | list[int]:
    """What collecting exactly these measurements must give (the plain-text aggregate)."""
    return PlainAggregate.of(vdaf, measurements).result
