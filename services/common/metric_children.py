"""prometheus_client's labelled children, looked up once per label values.

`MetricWrapperBase.labels` checks the values and takes the family's lock on every call; at one
call per request and per transaction that was 3% of the token issuer's CPU samples (py-spy, a
million-device `bench.population --full` run). The values sagg labels with on its hot paths come
from code or from small sets (route templates, the methods httptools parses, status classes,
refusal reasons, key epochs), so each child is kept after its first lookup: at most
`_KEPT` of them, so that a test process creating many apps does not hold them all.
"""

from __future__ import annotations

import functools
from typing import Final, TypeVar, cast

from prometheus_client.metrics import MetricWrapperBase

__all__ = ["child"]

_KEPT: Final = 4096

_M = TypeVar("_M", bound=MetricWrapperBase)


def child(family: _M, *values: str) -> _M:
    """``family.labels(*values)``, the same object on every call with the same values."""
    return cast(_M, _child(family, values))


@functools.lru_cache(maxsize=_KEPT)
def _child(family: MetricWrapperBase, values: tuple[str, ...]) -> MetricWrapperBase:
    return family.labels(*values)
