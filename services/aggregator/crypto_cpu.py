"""The CPU an aggregator spends on what no aggregator can avoid: opening its input shares (HPKE,
RFC 9180 §5.2) and preparing them (VDAF-08 and VDAF-20 §7.2: Prio3's preparation, both steps).

`sagg_hpke_open_cpu_seconds_total` and `sagg_vdaf_prep_cpu_seconds_total` count the thread CPU
of exactly those calls (`time.thread_time`: another thread's work is not counted), so the rest
of a process's CPU is what the service adds around the protocol. Measured in the serving
process, they pay what the process pays (a busy machine, other threads holding the GIL between
the calls), which an isolated measurement of the same calls does not: `bench.deployment` sets
the servers' CPU against both.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Literal, ParamSpec, TypeVar

from prometheus_client import CollectorRegistry, Counter

__all__ = ["CryptoCpu"]

_P = ParamSpec("_P")
_R = TypeVar("_R")

RoleName = Literal["leader", "helper"]


class CryptoCpu:
    """This process's two counters, by aggregator role."""

    def __init__(self, registry: CollectorRegistry | None) -> None:
        # Without a registry (an aggregator built in a test) the counts are kept but not served.
        registry = registry if registry is not None else CollectorRegistry()
        self._hpke = Counter(
            "sagg_hpke_open_cpu_seconds_total",
            "Thread CPU of the HPKE opens of this aggregator's input shares.",
            ("role",),
            registry=registry,
        )
        self._prep = Counter(
            "sagg_vdaf_prep_cpu_seconds_total",
            "Thread CPU of VDAF preparation (Prio3's preparation, both steps).",
            ("role",),
            registry=registry,
        )
        # Each labelled child looked up once: an open is counted for every report.
        self._counts: dict[tuple[str, RoleName], Callable[[float], None]] = {
            (kind, role): family.labels(role=role).inc
            for kind, family in (("hpke", self._hpke), ("prep", self._prep))
            for role in ("leader", "helper")
        }

    def hpke_open(
        self, role: RoleName, fn: Callable[_P, _R], *args: _P.args, **kwargs: _P.kwargs
    ) -> _R:
        """`fn(*args, **kwargs)`, HPKE opens, their thread CPU counted (raising or not)."""
        return _timed(self._counts[("hpke", role)], fn, *args, **kwargs)

    def prep(self, role: RoleName, fn: Callable[_P, _R], *args: _P.args, **kwargs: _P.kwargs) -> _R:
        """`fn(*args, **kwargs)`, a preparation step, its thread CPU counted."""
        return _timed(self._counts[("prep", role)], fn, *args, **kwargs)


def _timed(
    count: Callable[[float], None], fn: Callable[_P, _R], *args: _P.args, **kwargs: _P.kwargs
) -> _R:
    start = time.thread_time()
    try:
        return fn(*args, **kwargs)
    finally:
        count(time.thread_time() - start)
