"""Process entry points: migrate, make sure an HPKE key exists, then serve (and run the drivers)
or only run the drivers.

Several processes may share one PostgreSQL store (architecture: "several processes can run
them against one PostgreSQL"): API processes behind a load balancer with `run_drivers` off,
and any number of driver-only processes (`python -m services.aggregator.drivers`); leases
keep two drivers from stepping the same job.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import logging
import signal
import sys
import threading
from types import FrameType

import uvicorn

from services.aggregator.app import create_app, open_aggregator
from services.aggregator.drivers.runner import DriverRunner
from services.aggregator.settings import AggregatorSettings
from services.common.logs import configure_logging
from services.common.serving import server_options

log = logging.getLogger(__name__)


#: Container allocations (net of deallocations) between two young collections; Python's
#: default is 700.
_GC_YOUNG_THRESHOLD = 10_000
#: Seconds a thread may hold the GIL while another waits for it (`sys.setswitchinterval`,
#: `_lengthen_gil_turns`); Python's default is 5 ms.
_GIL_SWITCH_INTERVAL_S = 0.02

# mallopt(3) parameters (glibc's malloc.h).
_M_TRIM_THRESHOLD = -1
_M_TOP_PAD = -2
_M_MMAP_THRESHOLD = -3
_M_ARENA_MAX = -8
#: Allocations up to 32 MiB (glibc's largest threshold) come from the heaps, whose free tops
#: are kept up to 64 MiB and grown 16 MiB at a time: an aggregation job's numpy temporaries
#: (a few MiB a batch) then reuse pages instead of mapping and faulting in new ones. One heap
#: for every thread: Python threads allocate holding the GIL, so they seldom meet on its lock,
#: while a heap per thread (the event loop, the upload validation and writer, the drivers)
#: grew and faulted in pages of its own.
_MALLOC_SETTINGS = (
    (_M_MMAP_THRESHOLD, 32 << 20),
    (_M_TRIM_THRESHOLD, 64 << 20),
    (_M_TOP_PAD, 16 << 20),
    (_M_ARENA_MAX, 1),
)


def _freeze_startup_heap() -> None:
    """Keep what startup built out of every later garbage collection (`gc.freeze`), and
    collect the young generation less often.

    An aggregator starts with ~150,000 container objects (FastAPI, pydantic, numpy, numba) that
    live as long as the process, and aggregation churns through enough short-lived ones that
    the collector's full pass comes around every few thousand reports: each traversed them all
    again (~100 ms of CPU on this 2-core machine, tens of µs per report). Frozen, a full pass
    sees only what was allocated since. The per-report objects (decoded messages, rows) die by
    reference counting; at the default threshold a young collection still ran every few
    reports and traversed those in flight, 4-6 µs of CPU per report in each aggregator
    (DAP-19 Histogram(100) deployment bench), under 1 µs at this one. Cyclic garbage waits
    for at most that many allocations longer."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(_GC_YOUNG_THRESHOLD, 10, 10)


def _lengthen_gil_turns() -> None:
    """Let a thread run Python for `_GIL_SWITCH_INTERVAL_S` before another that waits for the
    GIL takes it over.

    An aggregator's threads (the event loop, the upload validation and writer, the drivers,
    the DAP request threads) share one GIL, and on a 2-core machine most of them want it at
    once. Every forced handover is a context switch, and the thread taking over works on other
    data, so the one it displaced finds its working set (a batch's field arrays, X25519's code)
    evicted when it resumes. Threads still hand the GIL over whenever they wait (I/O, a lock,
    a GIL-releasing call); one that waits behind a computing thread waits up to the interval
    instead of 5 ms. Measured in `bench.deployment` (DAP-19 Histogram(100), runs alternated
    with 5 ms): server CPU ~10% lower on both stores (SQLite medians 394 -> 354 µs a report,
    PostgreSQL 388 -> 342), half of it in the servers' own preparation and HPKE opens, and
    uploads no slower (PostgreSQL p50 latency 675 -> 551 ms)."""
    sys.setswitchinterval(_GIL_SWITCH_INTERVAL_S)


def keep_job_memory() -> bool:
    """Have glibc's malloc keep the memory aggregation jobs use (`_MALLOC_SETTINGS`); False
    where it cannot (another C library: its allocator stays as it is).

    With glibc's defaults a job's arrays above its dynamic mmap threshold were mapped afresh and
    the heaps' free tops given back, so each job faulted its pages in again, inside the
    preparation's CPU time. DAP-19 Histogram(100) `bench.deployment` on SQLite, three runs
    each, alternated with the code before: server CPU 267-270 -> 233-246 µs a report, the
    servers' own preparation and opens 144-145 -> 121-126 µs; peak RSS 296-297 -> 303-307 MiB
    (leader), 238-240 -> 240 (helper). Minor page faults over one such run: leader 187,199 ->
    56,442, helper 120,859 -> 39,641. One heap instead of one per thread (#15, seven pairs of
    runs alternated): server CPU medians 230 -> 220 µs a report, the leader's page faults
    1.5-1.9 -> 1.0-1.5 a report."""
    try:
        mallopt = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    return all(mallopt(param, value) == 1 for param, value in _MALLOC_SETTINGS)


class _Server(uvicorn.Server):
    """Uvicorn re-raises SIGTERM/SIGINT after its own shutdown, which would kill the process
    before the drivers are stopped; here a signal only asks for a graceful exit."""

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if self.should_exit and sig == signal.SIGINT:
            self.force_exit = True
        self.should_exit = True


def serve(settings: AggregatorSettings) -> None:
    """Run until SIGINT/SIGTERM; the drivers stop after their current step."""
    configure_logging(settings.log_level)
    keep_job_memory()
    app = create_app(settings)
    _freeze_startup_heap()
    _lengthen_gil_turns()
    runner = DriverRunner(app.state.aggregator) if settings.run_drivers else None
    if runner is not None:
        runner.start()
    # The access log costs ~60 µs per upload on the event loop and would record report traffic.
    # log_config=None: uvicorn's lines go through the JSON handler too.
    config = uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        access_log=False,
        log_config=None,
        log_level=settings.log_level.lower(),
        ssl_certfile=settings.tls_cert_file,
        ssl_keyfile=settings.tls_key_file,
        **server_options(settings),
    )
    server = _Server(config)
    try:
        server.run()
    finally:
        if runner is not None:
            runner.stop()
        app.state.aggregator.uploads.close()
        app.state.aggregator.ds.db.close()
        log.info("aggregator stopped")


def drive(settings: AggregatorSettings) -> None:
    """Run only the leader's drivers, without HTTP, until SIGINT/SIGTERM."""
    configure_logging(settings.log_level)
    keep_job_memory()
    agg = open_aggregator(settings)
    _freeze_startup_heap()
    _lengthen_gil_turns()
    stop = threading.Event()

    def on_signal(sig: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    runner = DriverRunner(agg)
    runner.start()
    log.info("drivers started")
    try:
        stop.wait()
    finally:
        runner.stop()
        agg.ds.db.close()
        log.info("drivers stopped")
