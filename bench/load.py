"""Issue #8 item 4: a bounded, loopback-only load generator for a running deployment.

It uploads reports for minutes and prints, every `--interval` seconds, the accepted reports/s,
p50/p99 upload latency and the resident memory (VmRSS) of the leader and helper processes, so
one can see whether memory stays flat under sustained load. It always stops by itself: after
`--duration` seconds or `--max-reports` uploads, whichever comes first.

Reports must be fresh (a reused report id is a replay), and sharding plus sealing costs the
client ~0.3-0.7 ms per report. So one child process builds batches of sealed reports ahead of
the uploads (`client_sdk.upload.ClientTask.build_reports`) while the asyncio uploader of
`bench.deployment` sends them over keep-alive connections; if the child cannot keep up, the
printed rate is the generator's, which `gen wait` then shows.

Against `sagg up` (defaults from `.data/deployment.json` and `.data/pids.json`):

    python -m bench.load --duration 300 --vdaf '{"type": "Prio3Count"}'

`run()` (for `make bench`) spawns its own leader/helper/collector on SQLite and runs 30 s.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import json
import multiprocessing
import random
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from bench.common import Result, print_table
from bench.deployment import (
    PutStats,
    Uploader,
    machine_cpu_seconds,
    percentile,
    provision,
    rss_kib,
    spawn_deployment,
)
from client_sdk.http import http_client
from client_sdk.upload import ClientTask, fetch_hpke_config
from deploy.config import load_deployment
from deploy.measurements import random_measurements
from services.common.admin_client import PartyTokens
from services.common.provisioning import TaskParams, create_task
from shared.dap.ids import TaskId
from shared.dap.messages import HpkeConfig
from shared.transport import TransportPolicy
from shared.vdaf.spec import VdafSpec

__all__ = ["Interval", "LoadConfig", "LoadSummary", "generate_load", "run"]

#: Reports per batch the generator process builds: big enough for `shard_batch` to pay off,
#: small enough that the first uploads start within a second.
BATCH = 250
#: Batches built ahead of the uploader; bounds the generator's memory.
AHEAD = 3


@dataclass(frozen=True)
class LoadConfig:
    task: ClientTask
    duration: float = 60.0
    max_reports: int = 1_000_000
    concurrency: int = 16
    #: Upper bound on uploads per second (None: as fast as the leader accepts them).
    rate: float | None = None
    interval: float = 5.0
    #: Processes whose VmRSS is printed, by name (leader, helper...).
    pids: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Interval:
    at: float  # seconds since the start, at the end of the interval
    accepted: int
    failed: int
    rate: float
    p50_ms: float
    p99_ms: float
    rss_kib: dict[str, int]
    gen_wait_s: float  # how long uploaders waited for the generator in this interval
    #: Busy cores of the whole machine (everything: services, generator, other users); near
    #: the core count means the numbers are CPU-bound, possibly by someone else's work.
    machine_busy: float


@dataclass
class LoadSummary:
    accepted: int
    failed: int
    elapsed: float
    p50_ms: float
    p99_ms: float
    rss_start_kib: dict[str, int]
    rss_end_kib: dict[str, int]
    intervals: list[Interval]
    errors: dict[str, int]

    @property
    def rate(self) -> float:
        return self.accepted / self.elapsed if self.elapsed > 0 else 0.0


def _build_batch(
    task_json: str, leader_config: bytes, helper_config: bytes, count: int, seed: int
) -> list[bytes]:
    """In the generator process: `count` fresh sealed reports, encoded (picklable in and out)."""
    task = ClientTask.model_validate_json(task_json)
    measurements = random_measurements(task.vdaf, count, random.Random(seed))
    reports = task.build_reports(
        measurements,
        HpkeConfig.decode(leader_config),
        HpkeConfig.decode(helper_config),
        int(time.time()),
    )
    return [report.encode() for report in reports]


class _Supply:
    """Bodies from the generator process, `AHEAD` batches in flight, at most `limit` in all."""

    def __init__(
        self,
        pool: concurrent.futures.ProcessPoolExecutor,
        task: ClientTask,
        configs: tuple[bytes, bytes],
        limit: int,
    ) -> None:
        self._pool = pool
        self._args = (task.model_dump_json(), *configs)
        self._left_to_build = limit
        self._left_to_hand_out = limit
        self._pending: list[asyncio.Future[list[bytes]]] = []
        self._ready: list[bytes] = []
        self._seed = 0
        self._lock = asyncio.Lock()
        self.wait_s = 0.0

    def _refill(self) -> None:
        loop = asyncio.get_running_loop()
        while len(self._pending) < AHEAD and self._left_to_build > 0:
            count = min(BATCH, self._left_to_build)
            self._left_to_build -= count
            self._seed += 1
            future = self._pool.submit(_build_batch, *self._args, count, self._seed)
            self._pending.append(asyncio.wrap_future(future, loop=loop))

    async def next(self) -> bytes | None:
        if self._left_to_hand_out <= 0:
            return None
        if not self._ready:
            # One waiter fetches the next batch; the others queue on the lock behind it.
            async with self._lock:
                if not self._ready:
                    self._refill()
                    if not self._pending:
                        return None
                    start = time.perf_counter()
                    batch = await self._pending.pop(0)
                    self.wait_s += time.perf_counter() - start
                    batch.reverse()  # pop() from the end hands them out in order
                    self._ready = batch
                    self._refill()
        if not self._ready:
            return None
        self._left_to_hand_out -= 1
        return self._ready.pop()

    def cancel(self) -> None:
        for future in self._pending:
            future.cancel()


class _Pacer:
    """At most `rate` request starts per second, spread evenly across the workers."""

    def __init__(self, rate: float) -> None:
        self._gap = 1.0 / rate
        self._next = time.perf_counter()

    async def wait(self) -> None:
        now = time.perf_counter()
        slot = max(self._next, now)
        self._next = slot + self._gap
        if slot > now:
            await asyncio.sleep(slot - now)


def _rss(pids: dict[str, int]) -> dict[str, int]:
    return {name: rss_kib(pid) for name, pid in pids.items()}


def _print_interval(row: Interval, total: int) -> None:
    memory = "  ".join(f"{name} {kib / 1024:7.1f} MiB" for name, kib in row.rss_kib.items())
    print(
        f"{row.at:7.1f} s  {row.rate:8.1f} reports/s  p50 {row.p50_ms:7.1f} ms  "
        f"p99 {row.p99_ms:7.1f} ms  total {total:>8}  failed {row.failed:>4}  "
        f"gen wait {row.gen_wait_s:4.1f} s  busy {row.machine_busy:3.1f} cores  {memory}",
        flush=True,
    )


async def _load(config: LoadConfig, configs: tuple[bytes, bytes], quiet: bool) -> LoadSummary:
    stats = PutStats()
    uploader = Uploader(config.task.leader, config.task.task_id, config.concurrency)
    # spawn, not fork: a forked copy of a process with a running event loop and threads is
    # not safe, and the child needs nothing of ours but the arguments.
    context = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(1, mp_context=context) as pool:
        supply = _Supply(pool, config.task, configs, config.max_reports)
        pacer = _Pacer(config.rate) if config.rate else None

        async def next_body() -> bytes | None:
            body = await supply.next()
            if body is not None and pacer is not None:
                await pacer.wait()
            return body

        # Warm the generator (imports, numba compilation) before the clock starts.
        first = await supply.next()
        rss_start = _rss(config.pids)
        start = time.perf_counter()
        deadline = start + config.duration
        pending_first = [first] if first is not None else []

        async def with_first() -> bytes | None:
            return pending_first.pop() if pending_first else await next_body()

        upload = asyncio.ensure_future(uploader.put_stream(with_first, stats, deadline))
        intervals: list[Interval] = []
        seen_latencies = seen_failed = 0
        # The warm-up batch's wait is before the clock started: not the first interval's.
        last_at, last_accepted, last_wait = start, 0, supply.wait_s
        last_busy = machine_cpu_seconds()
        try:
            while not upload.done():
                await asyncio.wait({upload}, timeout=config.interval)
                now = time.perf_counter()
                if upload.done() and stats.accepted + stats.failed == last_accepted + seen_failed:
                    break  # nothing happened after the last row
                window = stats.latencies[seen_latencies:]
                row = Interval(
                    at=now - start,
                    accepted=stats.accepted - last_accepted,
                    failed=stats.failed - seen_failed,
                    rate=(stats.accepted - last_accepted) / (now - last_at),
                    p50_ms=percentile(window, 0.5) * 1e3,
                    p99_ms=percentile(window, 0.99) * 1e3,
                    rss_kib=_rss(config.pids),
                    gen_wait_s=supply.wait_s - last_wait,
                    machine_busy=(machine_cpu_seconds() - last_busy) / (now - last_at),
                )
                intervals.append(row)
                if not quiet:
                    _print_interval(row, stats.accepted)
                seen_latencies, seen_failed = len(stats.latencies), stats.failed
                last_at, last_accepted, last_wait = now, stats.accepted, supply.wait_s
                last_busy = machine_cpu_seconds()
            await upload
        finally:
            upload.cancel()
            supply.cancel()
        elapsed = time.perf_counter() - start
    return LoadSummary(
        accepted=stats.accepted,
        failed=stats.failed,
        elapsed=elapsed,
        p50_ms=percentile(stats.latencies, 0.5) * 1e3,
        p99_ms=percentile(stats.latencies, 0.99) * 1e3,
        rss_start_kib=rss_start,
        rss_end_kib=_rss(config.pids),
        intervals=intervals,
        errors=stats.errors,
    )


def generate_load(config: LoadConfig, *, quiet: bool = False) -> LoadSummary:
    """Upload fresh reports of `config.task` until the duration or the count is reached.

    The report generator is a spawned process, which re-imports the caller's main module: call
    this from a script only under `if __name__ == "__main__":`."""
    if config.duration <= 0 or config.max_reports <= 0:
        raise ValueError("duration and max_reports must be positive")
    task_id = TaskId.from_b64url(config.task.task_id)
    with http_client(TransportPolicy(), timeout=10.0) as http:
        configs = (
            fetch_hpke_config(http, config.task.leader, task_id).encode(),
            fetch_hpke_config(http, config.task.helper, task_id).encode(),
        )
    return asyncio.run(_load(config, configs, quiet))


# --- command line ----------------------------------------------------------------------------


def _pids(args: argparse.Namespace, data_dir: str | None) -> dict[str, int]:
    if args.pid:
        pairs = [item.split("=", 1) for item in args.pid]
        return {name: int(pid) for name, pid in pairs}
    path = Path(args.pids) if args.pids else Path(data_dir or ".data") / "pids.json"
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        print(f"no pids file at {path}: memory is not shown", file=sys.stderr)
        return {}
    return {name: int(doc[name]) for name in ("leader", "helper") if name in doc}


def _task(args: argparse.Namespace) -> ClientTask:
    if args.task:
        return ClientTask.model_validate_json(Path(args.task).read_text())
    deployment = load_deployment(args.deployment)
    if deployment is None:
        raise SystemExit("no --task and no deployment file (run `sagg up` or pass --deployment)")
    params = TaskParams(
        vdaf=VdafSpec.model_validate_json(args.vdaf),
        # Never collectable by accident in the middle of a run; this task is for load only.
        min_batch_size=args.max_reports,
        leader=args.leader or deployment.leader,
        helper=args.helper or deployment.helper,
        collector=deployment.collector,
    )
    leader, helper, collector = (
        deployment.admin_token(p) for p in ("leader", "helper", "collector")
    )
    if leader is None or helper is None or collector is None:
        raise SystemExit("the deployment file lacks an admin token of leader, helper or collector")
    info = create_task(params, PartyTokens(leader, helper, collector))
    print(f"created task {info['task_id']} ({params.vdaf.describe()})", file=sys.stderr)
    return ClientTask.model_validate(info)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Bounded loopback load against a deployment.")
    parser.add_argument("--deployment", help="deployment.json (default .data/deployment.json)")
    parser.add_argument("--task", help="a task JSON as `sagg task create` prints it")
    parser.add_argument("--vdaf", default='{"type": "Prio3Count"}', help="VDAF of a new task")
    parser.add_argument("--leader", help="leader URL (default: the deployment's)")
    parser.add_argument("--helper", help="helper URL (default: the deployment's)")
    parser.add_argument("--duration", type=float, default=60.0, help="seconds (default 60)")
    parser.add_argument("--max-reports", type=int, default=1_000_000)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--rate", type=float, help="cap on uploads per second")
    parser.add_argument("--interval", type=float, default=5.0, help="seconds per printed row")
    parser.add_argument("--pids", help="pids.json of `sagg up` (default <data dir>/pids.json)")
    parser.add_argument("--pid", action="append", help="name=pid of a process to watch")
    args = parser.parse_args(argv)
    deployment = load_deployment(args.deployment) if not args.pid else None
    task = _task(args)
    config = LoadConfig(
        task=task,
        duration=args.duration,
        max_reports=args.max_reports,
        concurrency=args.concurrency,
        rate=args.rate,
        interval=args.interval,
        pids=_pids(args, deployment.data_dir if deployment else None),
    )
    summary = generate_load(config)
    print_table(_results(summary, "cli"), f"Load: {task.vdaf.describe()}, task {task.task_id}")
    if summary.errors:
        print(f"failures: {summary.errors}", file=sys.stderr)


def _results(summary: LoadSummary, case: str) -> list[Result]:
    rows = [
        Result("load", case, "accepted", summary.rate, "reports/s"),
        Result("load", case, "upload latency p50", summary.p50_ms, "ms"),
        Result("load", case, "upload latency p99", summary.p99_ms, "ms"),
        Result("load", case, "failed uploads", float(summary.failed), "reports"),
    ]
    for name, start in summary.rss_start_kib.items():
        end = summary.rss_end_kib.get(name, 0)
        rows.append(Result("load", case, f"{name} RSS at end", end / 1024, "MiB"))
        rows.append(Result("load", case, f"{name} RSS growth, all", (end - start) / 1024, "MiB"))
        if len(summary.intervals) >= 2:
            # The first interval holds the one-off growth (numba kernels compiled on the first
            # aggregation job, caches filling); a leak shows in what comes after it.
            warm = summary.intervals[0].rss_kib.get(name, 0)
            growth = (end - warm) / 1024
            rows.append(
                Result("load", case, f"{name} RSS growth after 1st interval", growth, "MiB")
            )
    return rows


def run(duration: float = 30.0) -> list[Result]:
    """`make bench`: 30 s of Count uploads against a fresh SQLite deployment of our own."""
    work = Path(tempfile.mkdtemp(prefix="sagg-bench-load-"))
    try:
        with spawn_deployment("sqlite", work) as spawned:
            task = ClientTask.model_validate(provision(spawned, VdafSpec(type="Prio3Count"), 1))
            pids = {name: spawned.pid(name) for name in ("leader", "helper")}
            summary = generate_load(LoadConfig(task=task, duration=duration, pids=pids), quiet=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return _results(summary, f"Count, sqlite, {duration:g} s")


if __name__ == "__main__":
    main()
