"""Issue 12 item 5: flood a real leader with hostile traffic and watch its memory.

Spawns leader, helper and collector (`bench.deployment.spawn_deployment`, SQLite), provisions a
Prio3Count task and then, from several threads for a bounded time, sends the leader what an
attacker would: uploads declaring a 4 GiB body, chunked uploads one byte past the task's
largest report, oversized admin requests, garbage reports, uploads and HPKE config requests
for random task ids, reports sealed to random HPKE config ids, and connections that trickle
their headers (slowloris) - mixed with honest uploads, which must still be accepted. Every
request is a fresh connection, read to the server's close; one that gets no answer within
`REQUEST_TIMEOUT_S` counts as ``timeout`` (the server waited for a body never sent).

The leader's VmRSS is sampled every 50 ms. After a warm-up of the same traffic (imports,
caches, thread pools, allocator arenas settle), the printed growth is the peak over the flood
minus the RSS at the end of the warm-up; tests/faults/test_flood.py bounds it.

    python -m bench.flood --duration 30 --threads 8
"""

from __future__ import annotations

import argparse
import random
import secrets
import shutil
import socket
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import httpx

from bench.common import Result, print_table
from bench.deployment import provision, rss_kib, spawn_deployment
from client_sdk.upload import ClientTask, fetch_hpke_config
from shared.dap.ids import TaskId
from shared.dap.messages import MEDIA_REPORT, HpkeCiphertext, Report
from shared.dap.sizes import max_report_len
from shared.vdaf.spec import VdafSpec

__all__ = ["FloodSummary", "flood", "main", "run"]

REQUEST_TIMEOUT_S = 10.0
#: The leader's read deadlines during the flood: short, so slowloris connections are cut
#: (and counted) within the run.
LEADER_ENV = {"HEADER_TIMEOUT_S": "2", "BODY_TIMEOUT_S": "2"}
#: Honest reports built ahead (each is uploaded once: a second upload would be a replay);
#: once they are used up, honest uploads are skipped (`NONE_LEFT`, not counted).
HONEST_REPORTS = 6000
NONE_LEFT = "none left"


@dataclass
class FloodSummary:
    duration_s: float
    requests: int
    statuses: Counter[str] = field(default_factory=Counter)
    by_kind: dict[str, Counter[str]] = field(default_factory=dict)
    rss_warm_kib: int = 0
    rss_peak_kib: int = 0
    rss_end_kib: int = 0

    @property
    def growth_mib(self) -> float:
        return (self.rss_peak_kib - self.rss_warm_kib) / 1024


def _exchange(host: str, port: int, head: bytes, body: bytes = b"") -> str:
    """Send one request on a fresh connection; the answer's status, or what went wrong."""
    try:
        with socket.create_connection((host, port), timeout=REQUEST_TIMEOUT_S) as sock:
            sock.sendall(head + body)
            data = b""
            while b"\r\n" not in data:
                part = sock.recv(4096)
                if not part:
                    return "closed"
                data += part
            while sock.recv(65536):
                pass  # read to the close, as a client that waits for the whole answer
            return data.split(b" ", 2)[1].decode()
    except TimeoutError:
        return "timeout"
    except OSError:
        return "reset"


class _Attacker:
    """The requests of the flood, one method per kind."""

    def __init__(self, leader: str, task: ClientTask, honest: list[bytes], sample: Report):
        url = urlsplit(leader)
        self.host, self.port = url.hostname or "127.0.0.1", url.port or 80
        self.task_id = task.task_id
        self.cap = max_report_len(task.vdaf.instance(), token=False, binding=False)
        self.honest = honest
        self.lock = threading.Lock()
        self.sample = sample

    def _put(self, path: str, body: bytes, media: str = MEDIA_REPORT) -> str:
        head = (
            f"PUT {path} HTTP/1.1\r\nHost: {self.host}\r\nContent-Type: {media}\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
        ).encode()
        return _exchange(self.host, self.port, head, body)

    def honest_upload(self) -> str:
        with self.lock:
            if not self.honest:
                return NONE_LEFT
            body = self.honest.pop()
        return self._put(f"/tasks/{self.task_id}/reports", body)

    def declared_4gib(self) -> str:
        head = (
            f"PUT /tasks/{self.task_id}/reports HTTP/1.1\r\nHost: {self.host}\r\n"
            f"Content-Type: {MEDIA_REPORT}\r\nContent-Length: {4 << 30}\r\n\r\n"
        ).encode()
        return _exchange(self.host, self.port, head)

    def chunked_past_cap(self) -> str:
        size = self.cap + 1
        head = (
            f"PUT /tasks/{self.task_id}/reports HTTP/1.1\r\nHost: {self.host}\r\n"
            f"Content-Type: {MEDIA_REPORT}\r\nTransfer-Encoding: chunked\r\n\r\n"
        ).encode()
        return _exchange(self.host, self.port, head, f"{size:x}\r\n".encode() + b"a" * size)

    def oversized_admin(self) -> str:
        head = (
            f"PUT /internal/tasks/{self.task_id} HTTP/1.1\r\nHost: {self.host}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {1 << 30}\r\n\r\n"
        ).encode()
        return _exchange(self.host, self.port, head)

    def garbage(self) -> str:
        return self._put(f"/tasks/{self.task_id}/reports", secrets.token_bytes(self.cap))

    def unknown_task(self) -> str:
        return self._put(f"/tasks/{TaskId.random().to_b64url()}/reports", self.sample.encode())

    def unknown_task_config(self) -> str:
        head = (
            f"GET /hpke_config?task_id={TaskId.random().to_b64url()} HTTP/1.1\r\n"
            f"Host: {self.host}\r\nConnection: close\r\n\r\n"
        ).encode()
        return _exchange(self.host, self.port, head)

    def unknown_config_id(self) -> str:
        share = self.sample.leader_encrypted_input_share
        moved = Report(
            self.sample.report_metadata,
            self.sample.public_share,
            HpkeCiphertext((share.config_id + random.randrange(1, 256)) % 256, share.enc, b"x"),
            self.sample.helper_encrypted_input_share,
        )
        return self._put(f"/tasks/{self.task_id}/reports", moved.encode())

    def slowloris(self) -> str:
        """Trickle a header block, a line per 100 ms, until the server answers or cuts."""
        try:
            with socket.create_connection((self.host, self.port), timeout=REQUEST_TIMEOUT_S) as s:
                s.sendall(f"PUT /tasks/{self.task_id}/reports HTTP/1.1\r\n".encode())
                s.settimeout(0.1)
                for _ in range(int(REQUEST_TIMEOUT_S / 0.1)):
                    s.sendall(b"X-Slow: a\r\n")
                    try:
                        answer = s.recv(4096)
                    except TimeoutError:
                        continue
                    return answer.split(b" ", 2)[1].decode() if answer else "closed"
                return "timeout"
        except OSError:
            return "reset"

    def kinds(self) -> dict[str, Callable[[], str]]:
        return {
            "honest upload": self.honest_upload,
            "4 GiB declared upload": self.declared_4gib,
            "chunked upload past the cap": self.chunked_past_cap,
            "1 GiB declared admin request": self.oversized_admin,
            "garbage report": self.garbage,
            "random task id upload": self.unknown_task,
            "random task id hpke_config": self.unknown_task_config,
            "random HPKE config id": self.unknown_config_id,
        }


def flood(
    leader: str,
    task: ClientTask,
    leader_pid: int,
    *,
    duration: float,
    warmup: float,
    threads: int,
    slow_threads: int = 2,
) -> FloodSummary:
    """Flood `leader` for `warmup` + `duration` seconds; RSS growth is measured after warmup."""
    with httpx.Client(timeout=10) as http:
        tid = TaskId.from_b64url(task.task_id)
        configs = fetch_hpke_config(http, leader, tid), fetch_hpke_config(http, task.helper, tid)
    now = int(time.time())
    reports = task.build_reports([1] * (HONEST_REPORTS + 1), *configs, now)
    assert isinstance(reports[0], Report)  # the flood speaks DAP-09
    attacker = _Attacker(leader, task, [r.encode() for r in reports[1:]], reports[0])
    kinds = attacker.kinds()
    names = sorted(kinds)

    start = time.monotonic()
    measure_from = start + warmup
    stop_at = measure_from + duration
    lock = threading.Lock()
    summary = FloodSummary(duration, 0, by_kind={name: Counter() for name in [*names, "slowloris"]})
    samples: list[tuple[float, int]] = []

    def record(kind: str, status: str) -> None:
        if time.monotonic() < measure_from or status == NONE_LEFT:
            return
        with lock:
            summary.requests += 1
            summary.statuses[status] += 1
            summary.by_kind[kind][status] += 1

    def worker(seed: int) -> None:
        rng = random.Random(seed)
        while time.monotonic() < stop_at:
            kind = rng.choice(names)
            record(kind, kinds[kind]())

    def slow_worker() -> None:
        while time.monotonic() < stop_at:
            record("slowloris", attacker.slowloris())

    def sampler() -> None:
        while time.monotonic() < stop_at + 0.5:
            samples.append((time.monotonic(), rss_kib(leader_pid)))
            time.sleep(0.05)

    pool = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(threads)]
    pool += [threading.Thread(target=slow_worker, daemon=True) for _ in range(slow_threads)]
    pool.append(threading.Thread(target=sampler, daemon=True))
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join(warmup + duration + 3 * REQUEST_TIMEOUT_S)
    warm = [rss for t, rss in samples if t <= measure_from]
    during = [rss for t, rss in samples if t > measure_from]
    summary.rss_warm_kib = warm[-1] if warm else samples[0][1]
    summary.rss_peak_kib = max(during, default=summary.rss_warm_kib)
    summary.rss_end_kib = rss_kib(leader_pid)
    return summary


def run_flood(duration: float, warmup: float, threads: int) -> FloodSummary:
    """A fresh SQLite deployment of our own, flooded, then stopped."""
    work = Path(tempfile.mkdtemp(prefix="sagg-bench-flood-"))
    try:
        with spawn_deployment("sqlite", work, aggregator_env=LEADER_ENV) as spawned:
            task = ClientTask.model_validate(provision(spawned, VdafSpec(type="Prio3Count"), 1))
            return flood(
                spawned.leader,
                task,
                spawned.pid("leader"),
                duration=duration,
                warmup=warmup,
                threads=threads,
            )
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _results(summary: FloodSummary, case: str) -> list[Result]:
    rows = [
        Result("flood", case, "requests/s", summary.requests / summary.duration_s, "1/s"),
        Result("flood", case, "leader peak RSS", summary.rss_peak_kib / 1024, "MiB"),
        Result("flood", case, "leader RSS growth after warm-up", summary.growth_mib, "MiB"),
    ]
    rows += [
        Result("flood", case, f"answers {status}", count, "requests")
        for status, count in sorted(summary.statuses.items())
    ]
    return rows


def print_mix(summary: FloodSummary) -> None:
    print("\nStatus mix by request kind")
    for kind, counts in sorted(summary.by_kind.items()):
        mix = ", ".join(f"{s}: {n}" for s, n in sorted(counts.items()))
        print(f"  {kind:30} {mix}")


def run(duration: float = 30.0, warmup: float = 5.0, threads: int = 8) -> list[Result]:
    """`make bench`: 30 s of flood after a 5 s warm-up."""
    summary = run_flood(duration, warmup, threads)
    print_mix(summary)
    return _results(summary, f"{threads} threads, sqlite, {duration:g} s")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=30.0)
    parser.add_argument("--warmup", type=float, default=5.0)
    parser.add_argument("--threads", type=int, default=8)
    args = parser.parse_args(argv)
    print_table(run(args.duration, args.warmup, args.threads), "Leader under flood")


if __name__ == "__main__":
    main()
