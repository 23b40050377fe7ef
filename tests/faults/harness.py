"""A seeded, bounded fault-injection harness for the three-process deployment.

`Deployment` starts leader, helper and collector as real processes (`python -m
services.aggregator`, `python -m services.collector`), each in its own process group, on free
loopback ports with its own store (SQLite files in a temporary directory, or fresh PostgreSQL
databases that are dropped afterwards). Between leader and helper sits a `FaultProxy`: the
task's helper endpoint is the proxy's URL, so every aggregation-job and aggregate-share request
crosses it, and a seeded `Schedule` decides per request whether to pass it, drop it, forward it
but drop the answer (the helper did the work, the leader never hears back), delay it, deliver it
twice, or answer 503. A hook can also kill -9 a process at the moment a chosen request crosses
the proxy.

The client side (`Uploader`) builds every report once and keeps its bytes, so a report whose
upload got no answer is re-sent identically; it records what the leader said about each one.
`Ledger` turns that into the aggregate a collection must give.

Everything has a deadline; `Deployment.close()` (a context manager exit) kills every process
group it started, stops the proxy and drops the databases.
"""

from __future__ import annotations

import atexit
import contextlib
import http.server
import os
import random
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

import httpx
import psycopg
from psycopg import sql

from client_sdk.reports import AnyReport
from client_sdk.upload import ClientTask, fetch_hpke_config
from deploy.launcher import free_port
from deploy.measurements import expected_aggregate
from services.common.provisioning import TaskParams, create_task
from shared.dap.ids import TaskId
from shared.dap.messages import MEDIA_REPORT
from shared.vdaf.spec import VdafSpec
from tests import pg

REPO = Path(__file__).resolve().parents[2]
ADMIN_TOKEN = "faults-admin-token-" + "x" * 16

#: Driver settings small enough that several aggregation jobs are in flight, leases expire
#: quickly after a kill, and retries come within a second or two.
AGGREGATOR_ENV = {
    "SAGG_AGGREGATOR_MIN_JOB_SIZE": "5",
    "SAGG_AGGREGATOR_MAX_JOB_SIZE": "20",
    "SAGG_AGGREGATOR_MAX_REPORT_WAIT_S": "1",
    # Groups of 8 or more of a task's reports (a DAP-19 request of 10, a busy DAP-09 leader)
    # make their jobs at upload, smaller ones through the creator: crashes hit both paths.
    "SAGG_AGGREGATOR_UPLOAD_JOB_GROUP_MIN": "8",
    "SAGG_AGGREGATOR_DRIVER_POLL_S": "0.1",
    "SAGG_AGGREGATOR_DRIVER_BATCH": "2",
    "SAGG_AGGREGATOR_LEASE_DURATION_S": "3",
    "SAGG_AGGREGATOR_MAX_JOB_ATTEMPTS": "100",
    "SAGG_AGGREGATOR_RETRY_BASE_S": "0.5",
    "SAGG_AGGREGATOR_RETRY_MAX_S": "1",
    "SAGG_AGGREGATOR_COLLECTION_RETRY_S": "1",
    "SAGG_AGGREGATOR_HELPER_TIMEOUT_S": "2",
    # A seeded schedule acts on the n-th leader->helper request: one aggregation thread per
    # driver process keeps their order, and so a replay, the same (several processes race on
    # purpose in test_scaleout).
    "SAGG_AGGREGATOR_AGGREGATION_WORKERS": "1",
}
COLLECTOR_ENV = {
    "SAGG_COLLECTOR_POLL_INTERVAL": "0.3",
    "SAGG_COLLECTOR_MAX_BACKOFF": "1",
    "SAGG_COLLECTOR_LEASE_SECONDS": "6",
    "SAGG_COLLECTOR_REQUEST_TIMEOUT": "3",
    "SAGG_COLLECTOR_MAX_TRANSIENT_FAILURES": "1000",
    "SAGG_COLLECTOR_LOG_LEVEL": "warning",
}


class HarnessError(Exception):
    """The deployment did not reach a state in time; the message says which."""


def wait_until(
    what: str, predicate: Callable[[], bool], timeout: float, pause: float = 0.1
) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise HarnessError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(pause)


# --- processes ---------------------------------------------------------------------------------

#: Every service ever started, so that even an interrupted run (Ctrl-C, a failing fixture)
#: leaves no process behind: they live in their own sessions and would outlive pytest.
_LIVE: set[Service] = set()


@atexit.register
def _kill_leftovers() -> None:
    for service in list(_LIVE):
        with contextlib.suppress(Exception):
            service.kill9()


class Service:
    """One service process: same argv, env, port and store across restarts.

    A process without HTTP (the driver-only aggregator) is ready once its log shows
    `ready_line` after its latest start."""

    def __init__(
        self,
        name: str,
        module: str,
        env: dict[str, str],
        port: int,
        log: Path,
        *,
        ready_line: str | None = None,
    ):
        self.name = name
        self.module = module
        self.env = env
        self.port = port
        self.log = log
        self.ready_line = ready_line
        self.process: subprocess.Popen[bytes] | None = None
        self.starts = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 60.0) -> None:
        assert self.process is None or self.process.poll() is not None, f"{self.name} is running"
        self.starts += 1
        _LIVE.add(self)
        with self.log.open("ab") as out:
            out.write(f"\n===== start {self.starts} of {self.name} =====\n".encode())
            self.process = subprocess.Popen(
                [sys.executable, "-m", self.module],
                env=self.env,
                cwd=REPO,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group, killed as a whole
            )
        self.wait_healthy(timeout)

    def wait_healthy(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process is None or self.process.poll() is not None:
                raise HarnessError(f"{self.name} exited at start-up:\n{self.tail()}")
            if self._ready():
                return
            time.sleep(0.1)
        raise HarnessError(f"{self.name} not healthy within {timeout:g} s:\n{self.tail()}")

    def _ready(self) -> bool:
        if self.ready_line is not None:
            return self.ready_line in self.current_log()
        try:
            return httpx.get(f"{self.url}/healthz", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    def current_log(self) -> str:
        """The log since the latest start."""
        try:
            text = self.log.read_text(errors="replace")
        except OSError:
            return ""
        return text.rpartition(f"===== start {self.starts} of {self.name} =====")[2]

    def kill9(self) -> None:
        """SIGKILL the whole process group and reap it: no cleanup code runs."""
        process = self.process
        if process is None or process.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=10)

    def restart(self, timeout: float = 60.0) -> None:
        self.kill9()
        self.start(timeout)

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def tail(self, chars: int = 3000) -> str:
        try:
            return self.log.read_text(errors="replace")[-chars:]
        except OSError:
            return ""


# --- the leader <-> helper proxy ---------------------------------------------------------------


class Action(Enum):
    PASS = "pass"
    DROP_REQUEST = "drop_request"  # close the connection; the helper never sees the request
    DROP_RESPONSE = "drop_response"  # forward; the helper answers; the leader hears nothing
    DELAY = "delay"  # forward after a pause (below the leader's helper timeout)
    UNAVAILABLE = "503"  # answer 503 without forwarding
    DUPLICATE = "duplicate"  # forward two copies at once; the leader gets one answer


@dataclass(frozen=True)
class Crossing:
    """One request that crossed the proxy, and what happened to it."""

    index: int  # 0-based among the requests faults apply to
    method: str
    path: str
    action: Action
    upstream_status: int | None  # None: not forwarded, or no answer from the helper

    @property
    def kind(self) -> str:
        return "aggregate_share" if self.path.endswith("/aggregate_shares") else "aggregation_job"


@dataclass
class Schedule:
    """Per-request fault choice: seeded random weights, plus fixed actions by request index."""

    seed: int
    weights: dict[Action, float] = field(default_factory=lambda: {Action.PASS: 1.0})
    fixed: dict[int, Action] = field(default_factory=dict)
    delay_s: tuple[float, float] = (0.2, 1.0)

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed)
        self._lock = threading.Lock()

    def choose(self, index: int) -> tuple[Action, float]:
        with self._lock:
            actions = list(self.weights)
            drawn = self._rng.choices(actions, [self.weights[a] for a in actions])[0]
            delay = self._rng.uniform(*self.delay_s)
        return self.fixed.get(index, drawn), delay


#: Called with the crossing just decided (upstream_status known when forwarded) before the
#: proxy answers the leader: a scenario kills processes here, and may return another action
#: for the answer (DROP_RESPONSE: the leader hears nothing although the helper answered).
Hook = Callable[[Crossing], Action | None]


def _faultable(path: str) -> bool:
    # DAP-09 jobs are PUT at .../aggregation_jobs/{id}; DAP-19 ones POSTed to .../aggregation_jobs.
    return "/aggregation_jobs" in path or path.endswith("/aggregate_shares")


class FaultProxy:
    """An HTTP/1.1 proxy on a free loopback port, forwarding to `target` (the helper).

    Only the DAP requests of the leader's drivers (aggregation jobs, aggregate shares) are
    subject to the schedule; provisioning and HPKE-config fetches always pass."""

    def __init__(self, target: str, schedule: Schedule) -> None:
        self.target = target.rstrip("/")
        self.schedule = schedule
        #: Run before the request is forwarded (an override decides whether it is) ...
        self.before_hooks: list[Hook] = []
        #: ... and after the helper answered, before the leader gets the answer.
        self.hooks: list[Hook] = []
        self.crossings: list[Crossing] = []
        self._lock = threading.Lock()
        self._upstream = httpx.Client(timeout=30.0)
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _handle(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                headers = {
                    k: v
                    for k, v in self.headers.items()
                    if k.lower() not in ("host", "content-length", "connection")
                }
                proxy.forward(self, self.command, self.path, headers, body)

            do_GET = do_PUT = do_POST = do_DELETE = _handle

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.port = int(self._server.server_address[1])
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def forward(
        self,
        handler: http.server.BaseHTTPRequestHandler,
        method: str,
        path: str,
        headers: dict[str, str],
        body: bytes,
    ) -> None:
        faultable = _faultable(path)
        action, delay = Action.PASS, 0.0
        index = -1
        if faultable:
            with self._lock:
                index = len(self.crossings)
                action, delay = self.schedule.choose(index)
                # Reserve the index now; the record is completed below.
                self.crossings.append(Crossing(index, method, path, action, None))
            for hook in list(self.before_hooks):
                override = hook(Crossing(index, method, path, action, None))
                if override is not None:
                    action = override
        upstream: httpx.Response | None = None
        if action is Action.DELAY:
            time.sleep(delay)
        if action in (Action.PASS, Action.DELAY, Action.DROP_RESPONSE, Action.DUPLICATE):

            def send() -> httpx.Response | None:
                try:
                    return self._upstream.request(
                        method, self.target + path, headers=headers, content=body
                    )
                except httpx.HTTPError:
                    return None

            if action is Action.DUPLICATE:
                # Both copies in flight at once, as a retry after a timeout races the original.
                with ThreadPoolExecutor(2) as pool:
                    first, second = pool.submit(send), pool.submit(send)
                    upstream = second.result() or first.result()
            else:
                upstream = send()
        if faultable:
            crossing = Crossing(
                index, method, path, action, None if upstream is None else upstream.status_code
            )
            with self._lock:
                self.crossings[index] = crossing
            for hook in list(self.hooks):
                override = hook(crossing)
                if override is not None:
                    action = override
            if action is not crossing.action:  # the record says what was done
                with self._lock:
                    self.crossings[index] = Crossing(
                        index, method, path, action, crossing.upstream_status
                    )
        if action is Action.UNAVAILABLE:
            self._reply(handler, 503, {"Content-Type": "text/plain"}, b"injected 503")
        elif upstream is None or action in (Action.DROP_REQUEST, Action.DROP_RESPONSE):
            # Close without a status line: the leader sees a broken connection.
            handler.close_connection = True
            with contextlib.suppress(OSError):
                handler.connection.shutdown(socket.SHUT_RDWR)
        else:
            passed = {
                k: v
                for k, v in upstream.headers.items()
                if k.lower() not in ("content-length", "connection", "transfer-encoding")
            }
            self._reply(handler, upstream.status_code, passed, upstream.content)

    @staticmethod
    def _reply(
        handler: http.server.BaseHTTPRequestHandler,
        status: int,
        headers: dict[str, str],
        body: bytes,
    ) -> None:
        with contextlib.suppress(OSError):
            handler.send_response(status)
            for k, v in headers.items():
                handler.send_header(k, v)
            handler.send_header("Content-Length", str(len(body)))
            handler.end_headers()
            handler.wfile.write(body)

    def snapshot(self) -> list[Crossing]:
        with self._lock:
            return list(self.crossings)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._upstream.close()


# --- the client side ---------------------------------------------------------------------------


class Outcome(Enum):
    ACCEPTED = "accepted"  # 201
    REPLAYED = "replayed"  # 400 "report id already seen": an earlier send was stored
    REJECTED = "rejected"  # any other refusal
    NO_ANSWER = "no_answer"  # connection error or timeout: stored or not, unknown


@dataclass
class ClientReport:
    measurement: Any
    report: AnyReport
    body: bytes
    outcomes: list[Outcome] = field(default_factory=list)

    @property
    def counted(self) -> bool | None:
        """True: it must be in the aggregate; False: it must not; None: unknown."""
        if any(o in (Outcome.ACCEPTED, Outcome.REPLAYED) for o in self.outcomes):
            return True
        if all(o is Outcome.REJECTED for o in self.outcomes):
            return False
        return None


class Uploader:
    """Builds the reports of one batch once and PUTs their exact bytes, possibly again."""

    def __init__(self, task: ClientTask, timeout: float = 5.0) -> None:
        self.task = task
        self.http = httpx.Client(timeout=timeout)
        task_id = TaskId.from_b64url(task.task_id)
        self.leader_config = fetch_hpke_config(self.http, task.leader, task_id)
        self.helper_config = fetch_hpke_config(self.http, task.helper, task_id)
        self.url = f"{task.leader.rstrip('/')}/tasks/{task.task_id}/reports"
        self.reports: list[ClientReport] = []

    def build(self, measurements: Sequence[Any], report_time: int) -> list[ClientReport]:
        built = [
            ClientReport(m, r, r.encode())
            for m, r in zip(
                measurements,
                self.task.build_reports(
                    measurements, self.leader_config, self.helper_config, report_time
                ),
                strict=True,
            )
        ]
        self.reports.extend(built)
        return built

    def put(self, report: ClientReport) -> Outcome:
        try:
            response = self.http.put(
                self.url, content=report.body, headers={"Content-Type": MEDIA_REPORT}
            )
        except httpx.HTTPError:
            outcome = Outcome.NO_ANSWER
        else:
            if response.status_code == 201:
                outcome = Outcome.ACCEPTED
            elif response.status_code == 400 and "already seen" in response.text:
                outcome = Outcome.REPLAYED
            elif response.status_code >= 500:
                outcome = Outcome.NO_ANSWER  # not refused: the client should try again
            else:
                outcome = Outcome.REJECTED
        report.outcomes.append(outcome)
        return outcome

    def send(
        self,
        reports: Sequence[ClientReport],
        *,
        concurrency: int = 8,
        after_each: Callable[[int], None] | None = None,
    ) -> list[Outcome]:
        """PUT each report once (a few in flight); `after_each(n)` runs after the n-th answer."""
        done = 0
        lock = threading.Lock()

        def one(report: ClientReport) -> Outcome:
            nonlocal done
            outcome = self.put(report)
            with lock:
                done += 1
                n = done
            if after_each is not None:
                after_each(n)
            return outcome

        with ThreadPoolExecutor(max_workers=concurrency) as pool:
            return list(pool.map(one, reports))

    def resend_unanswered(self, rounds: int = 5) -> None:
        """Re-send every report whose fate is unknown, same bytes, until each has an answer."""
        for _ in range(rounds):
            pending = [r for r in self.reports if r.counted is None]
            if not pending:
                return
            self.send(pending)
        unknown = sum(1 for r in self.reports if r.counted is None)
        raise HarnessError(f"{unknown} report(s) still unanswered after {rounds} re-sends")

    def close(self) -> None:
        self.http.close()


@dataclass(frozen=True)
class Ledger:
    """What the client knows about one batch's reports."""

    counted: list[Any]  # measurements that must be in the aggregate
    unknown: int  # reports whose fate is unknown (never re-sent)

    @classmethod
    def of(cls, reports: Sequence[ClientReport]) -> Ledger:
        return cls(
            [r.measurement for r in reports if r.counted],
            sum(1 for r in reports if r.counted is None),
        )


# --- the deployment ----------------------------------------------------------------------------


class Deployment:
    """Leader, helper, collector and the proxy; use as a context manager.

    With `leader_replicas` > 1 more leader API processes ("leader-2", ...) serve the leader's
    store; with `driver_processes` the leader's drivers run only in that many driver-only
    processes ("driver-1", ...), not in the API processes."""

    def __init__(
        self,
        tmp: Path,
        schedule: Schedule,
        *,
        postgres: bool = False,
        aggregator_env: dict[str, str] | None = None,
        leader_replicas: int = 1,
        driver_processes: int = 0,
    ) -> None:
        self.tmp = tmp
        self.schedule = schedule
        self.databases: list[str] = []
        self.proxy: FaultProxy | None = None
        base = {k: v for k, v in os.environ.items() if not k.startswith("SAGG_")}
        base["PYTHONPATH"] = str(REPO)
        urls: dict[str, str] = {}
        for role in ("leader", "helper"):
            if postgres:
                name = f"sagg_faults_{secrets.token_hex(4)}_{role}"
                urls[role] = f"{pg.SERVER}/{name}"
                self.databases.append(name)
            else:
                urls[role] = f"sqlite:///{tmp / f'{role}.db'}"
        self.services: dict[str, Service] = {}
        leaders = ["leader"] + [f"leader-{i}" for i in range(2, leader_replicas + 1)]
        drivers = [f"driver-{i}" for i in range(1, driver_processes + 1)]
        taken: set[int] = set()

        def distinct_port() -> int:
            # The kernel may hand out a just-released port again; two services must not share.
            while (port := free_port()) in taken:
                pass
            taken.add(port)
            return port

        for name in [*leaders, "helper", *drivers]:
            role = "helper" if name == "helper" else "leader"
            port = distinct_port()
            env = {**base, **AGGREGATOR_ENV, **(aggregator_env or {})}
            env.update(
                SAGG_AGGREGATOR_DATABASE_URL=urls[role],
                SAGG_AGGREGATOR_PORT=str(port),
                SAGG_AGGREGATOR_ADMIN_TOKEN=ADMIN_TOKEN,
                # The helper runs no drivers; the leader's API processes run them unless
                # driver-only processes do.
                SAGG_AGGREGATOR_RUN_DRIVERS="true" if role == "leader" and not drivers else "false",
            )
            if name in drivers:
                self.services[name] = Service(
                    name,
                    "services.aggregator.drivers",
                    env,
                    port,
                    tmp / f"{name}.log",
                    ready_line="drivers started",
                )
            else:
                self.services[name] = Service(
                    name, "services.aggregator", env, port, tmp / f"{name}.log"
                )
        port = distinct_port()
        env = dict(base, **COLLECTOR_ENV)
        env.update(
            SAGG_COLLECTOR_DATABASE_URL=f"sqlite:///{tmp / 'collector.db'}",
            SAGG_COLLECTOR_PORT=str(port),
            SAGG_COLLECTOR_ADMIN_TOKEN=ADMIN_TOKEN,
        )
        self.services["collector"] = Service(
            "collector", "services.collector", env, port, tmp / "collector.log"
        )
        self.http = httpx.Client(timeout=10.0)

    @property
    def leader(self) -> Service:
        return self.services["leader"]

    @property
    def helper(self) -> Service:
        return self.services["helper"]

    @property
    def collector(self) -> Service:
        return self.services["collector"]

    def __enter__(self) -> Deployment:
        try:
            with (
                psycopg.connect(pg.ADMIN_URL, autocommit=True, connect_timeout=5)
                if self.databases
                else contextlib.nullcontext() as conn
            ):
                for name in self.databases:
                    assert conn is not None
                    conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
            self.proxy = FaultProxy(self.helper.url, self.schedule)
            starters = [
                threading.Thread(target=s.start, daemon=True) for s in self.services.values()
            ]
            for t in starters:
                t.start()
            for t in starters:
                t.join(90)
            for s in self.services.values():
                s.wait_healthy(30)
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for s in self.services.values():
            with contextlib.suppress(Exception):
                s.kill9()
        if self.proxy is not None:
            self.proxy.close()
        self.http.close()
        if self.databases:
            with psycopg.connect(pg.ADMIN_URL, autocommit=True, connect_timeout=5) as conn:
                for name in self.databases:
                    conn.execute(
                        sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
                            sql.Identifier(name)
                        )
                    )

    def logs(self) -> str:
        return "\n".join(f"--- {s.name} ---\n{s.tail()}" for s in self.services.values())

    # --- task and collection ---

    def create_task(
        self, vdaf: dict[str, Any], min_batch_size: int, time_precision: int = 3600
    ) -> ClientTask:
        assert self.proxy is not None
        params = TaskParams(
            vdaf=VdafSpec.model_validate(vdaf),
            min_batch_size=min_batch_size,
            time_precision=time_precision,
            leader=self.leader.url,
            helper=self.proxy.url,  # the leader reaches the helper only through the proxy
            collector=self.collector.url,
        )
        info = create_task(params, ADMIN_TOKEN, http=self.http)
        self.task_id = str(info["task_id"])
        return ClientTask.model_validate(info)

    def start_collection(self, start: int, duration: int) -> str:
        response = self.http.post(
            f"{self.collector.url}/collections",
            json={
                "task_id": self.task_id,
                "query": {"type": "time_interval", "start": start, "duration": duration},
            },
            headers={"Authorization": f"Bearer {ADMIN_TOKEN}"},
        )
        if response.status_code != 201:
            raise HarnessError(f"collector refused the collection: {response.text[:300]}")
        return str(response.json()["collection_job_id"])

    def collection(self, job_id: str) -> dict[str, Any]:
        """The collector's view of the job; {"state": "unreachable"} while it is down."""
        try:
            response = self.http.get(
                f"{self.collector.url}/collections/{job_id}",
                headers={"Authorization": f"Bearer {ADMIN_TOKEN}"},
            )
        except httpx.HTTPError:
            return {"state": "unreachable"}
        response.raise_for_status()
        body: dict[str, Any] = response.json()
        return body

    def wait_collection(self, job_id: str, timeout: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            body = self.collection(job_id)
            if body["state"] in ("complete", "failed"):
                return body
            if time.monotonic() > deadline:
                raise HarnessError(f"collection {job_id} still {body['state']} after {timeout} s")
            time.sleep(0.2)

    def terminate_backends(self, role: str) -> int:
        """Kill every PostgreSQL backend of `role`'s database; how many were killed."""
        assert self.databases, "PostgreSQL deployments only"
        name = self.databases[("leader", "helper").index(role)]
        with psycopg.connect(pg.ADMIN_URL, autocommit=True, connect_timeout=5) as conn:
            rows = conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = %s AND pid <> pg_backend_pid()",
                (name,),
            ).fetchall()
        return sum(1 for (ok,) in rows if ok)


def expected(vdaf: dict[str, Any], measurements: Sequence[Any]) -> int | list[int]:
    return expected_aggregate(VdafSpec.model_validate(vdaf), measurements)


@contextlib.contextmanager
def seeded(seed: int) -> Iterator[random.Random]:
    """A Random for one scenario; the seed is printed when the scenario fails."""
    try:
        yield random.Random(seed)
    except BaseException:
        print(f"\nfault scenario failed with seed {seed} (SAGG_FAULT_SEED={seed} replays it)")
        raise
