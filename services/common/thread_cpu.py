"""CPU time of this process by thread, as ``sagg_thread_cpu_seconds_total{thread}``.

prometheus_client's ``process_cpu_seconds_total`` says how much CPU a service uses, not which of
its threads uses it: in an aggregator the event loop, the upload validation, the upload writer,
the job drivers and the DAP request thread share one process (#15 asked where a report's CPU
goes beyond its cryptography). Linux keeps each thread's user and system time in
``/proc/self/task/<tid>/stat``; Python knows each thread's name and native id. At scrape time
this collector joins the two.

The label is the thread's name without a pool's trailing index (``dap-request_0`` and
``dap-request_1`` are ``dap-request``; ``aggregation-driver-1`` is ``aggregation-driver``), so
the label set is the code's thread kinds, not the threads ever started. A thread that ends keeps
its last reading in its label's total, so the counter never goes down. A thread that may start
and end between two scrapes (the upload writer, which ends when idle) calls `retire` as it ends,
or the scrapes would never see it. Threads started outside `threading` (none in sagg) are not
seen. Elsewhere than Linux the family is empty.
"""

from __future__ import annotations

import os
import re
import threading
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Final

from prometheus_client import REGISTRY
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

__all__ = ["ThreadCpu", "retire", "thread_kind"]

_TASKS: Final = Path("/proc/self/task")
#: A pool's index at the end of a thread's name (ThreadPoolExecutor's ``_0``, ours ``-0``).
_POOL_INDEX: Final = re.compile(r"[_-]\d+$")
#: Fields of /proc/<pid>/task/<tid>/stat after the command name: utime and stime (proc(5),
#: fields 14 and 15), in clock ticks.
_UTIME, _STIME = 11, 12


def thread_kind(name: str) -> str:
    """The label of a thread named `name`."""
    return _POOL_INDEX.sub("", name)


def _thread_seconds(native_id: int, tick: float) -> float | None:
    """User + system CPU seconds of one thread of this process, None if it is gone."""
    try:
        stat = (_TASKS / str(native_id) / "stat").read_text()
    except OSError:
        return None
    # The command name may hold spaces and parentheses; the fields after the last ')' do not.
    fields = stat.rsplit(")", 1)[1].split()
    return (int(fields[_UTIME]) + int(fields[_STIME])) * tick


class ThreadCpu(Collector):
    """The process-wide collector (one per process, on the default registry: `install`)."""

    def __init__(self) -> None:
        self._tick = 1.0 / os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 0.0
        self._lock = threading.Lock()
        #: Last reading of each live thread: native id -> (label, seconds).
        self._live: dict[int, tuple[str, float]] = {}
        #: Seconds of the threads that ended, by label.
        self._ended: dict[str, float] = {}
        #: Threads that counted themselves as ended (`retire`) and have yet to end.
        self._retired: weakref.WeakSet[threading.Thread] = weakref.WeakSet()

    def retire(self) -> None:
        """Count the calling thread as ended, with its CPU so far; call it as the thread ends."""
        thread, native_id = threading.current_thread(), threading.get_native_id()
        used = _thread_seconds(native_id, self._tick)
        if used is None:
            return
        with self._lock:
            # Its reading from a scrape while it ran is superseded by this one.
            self._live.pop(native_id, None)
            label = thread_kind(thread.name)
            self._ended[label] = self._ended.get(label, 0.0) + used
            self._retired.add(thread)

    def seconds(self) -> dict[str, float]:
        """CPU seconds so far by thread label."""
        if not _TASKS.is_dir():
            return {}
        with self._lock:
            seen: dict[int, tuple[str, float]] = {}
            for thread in threading.enumerate():
                native_id = thread.native_id
                if native_id is None or thread in self._retired:
                    continue
                used = _thread_seconds(native_id, self._tick)
                if used is not None:
                    seen[native_id] = (thread_kind(thread.name), used)
            for native_id, (label, used) in self._live.items():
                now = seen.get(native_id)
                # Gone, or its id reused by a thread started since (Linux reuses tids).
                if now is None or now[0] != label or now[1] < used:
                    self._ended[label] = self._ended.get(label, 0.0) + used
            self._live = seen
            totals = dict(self._ended)
            for label, used in seen.values():
                totals[label] = totals.get(label, 0.0) + used
            return totals

    def collect(self) -> Iterator[CounterMetricFamily]:
        family = CounterMetricFamily(
            "sagg_thread_cpu_seconds",
            "User and system CPU time of this process's threads, by kind of thread.",
            labels=("thread",),
        )
        for label, used in sorted(self.seconds().items()):
            family.add_metric((label,), used)
        yield family


#: The process's collector once `install` registered it (several apps of a test process and
#: their scrapes share the default registry).
_installed: list[ThreadCpu] = []
_install_lock = threading.Lock()


def retire() -> None:
    """`ThreadCpu.retire` on this process's collector, if `install` registered one."""
    with _install_lock:
        installed = _installed[0] if _installed else None
    if installed is not None:
        installed.retire()


def install() -> ThreadCpu:
    """This process's collector, registered on the default registry once."""
    with _install_lock:
        if not _installed:
            _installed.append(ThreadCpu())
            REGISTRY.register(_installed[0])
        return _installed[0]
