"""A doorbell between the threads of one process: whoever makes work rings it, and a worker
that found none waits on it instead of only sleeping out its poll interval.

The leader's drivers poll the store for jobs, as work may come from another process that
shares it (Janus's job drivers do the same); a poll interval long enough to keep an idle leader
quiet was also the time a job made in this process waited for its driver. A ring counts: a
worker reads `rings()` before it looks for work and waits for a later one, so a ring between
its look and its wait is not lost.
"""

from __future__ import annotations

import threading

__all__ = ["Doorbell"]


class Doorbell:
    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._rings = 0

    def rings(self) -> int:
        """How often it has rung so far: read before looking for work, then pass to `wait`."""
        with self._cond:
            return self._rings

    def ring(self) -> None:
        """Wake every waiting worker: there is work (or a reason to stop)."""
        with self._cond:
            self._rings += 1
            self._cond.notify_all()

    def wait(self, since: int, timeout: float) -> bool:
        """Until it rings after `since` was read (at once if it has), or `timeout` seconds have
        passed; whether it rang."""
        with self._cond:
            return self._cond.wait_for(lambda: self._rings != since, timeout)
