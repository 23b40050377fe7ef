"""Injected time source (DAP-09 §4.4.2 and §4.5.1.4 compare report times with "now").

Services never call `time.time()` directly: tests swap in `TestClock` to step over clock-skew
windows, task expirations and lease expiries deterministically.
"""

from __future__ import annotations

import threading
import time
from typing import Protocol


class Clock(Protocol):
    def now(self) -> int:
        """Seconds since the UNIX epoch (DAP `Time`)."""
        ...


class RealClock:
    def now(self) -> int:
        return int(time.time())


class TestClock:
    """A clock that only moves when told to; safe to share between threads."""

    __test__ = False  # not a pytest test class despite the name

    def __init__(self, start: int = 1_700_000_000) -> None:
        self._now = start
        self._lock = threading.Lock()

    def now(self) -> int:
        with self._lock:
            return self._now

    def advance(self, seconds: int) -> None:
        with self._lock:
            self._now += seconds

    def set(self, value: int) -> None:
        with self._lock:
            self._now = value
