"""The collector's time source. Injected everywhere so tests can drive backoff and leases.

Kept minimal until `services/common` provides the shared clock; the interface is one method.
"""

from __future__ import annotations

import time
from typing import Protocol

__all__ = ["Clock", "SystemClock"]


class Clock(Protocol):
    def now(self) -> float:
        """Seconds since the UNIX epoch."""
        ...


class SystemClock:
    def now(self) -> float:
        return time.time()


def millis(clock: Clock) -> int:
    return int(clock.now() * 1000)
