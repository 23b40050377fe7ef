"""The interop test runner's sequence against four real processes (interop draft §5; digest §11).

Leader and helper are two `sagg interop aggregator` processes, plus one collector and one
client, each on a free loopback port with its own temporary SQLite store. The test speaks
only the test API (and, for the auth check, DAP to the helper), as the Janus runner
(`interop_binaries/tests/end_to_end.rs`) does: ready, endpoint_for_task on leader then helper,
collector add_task, leader then helper add_task, N uploads, collection_start, then
collection_poll until it is no longer "in progress". Every wait has a deadline and the
processes are always stopped.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from client_sdk.upload import ClientTask, fetch_hpke_config
from deploy.launcher import free_ports
from shared.b64url import b64url_encode
from shared.dap.ids import TaskId
from shared.dap.messages import MEDIA_REPORT
from shared.vdaf.prio3 import VERIFY_KEY_SIZE

REPO = Path(__file__).resolve().parents[2]
#: The Janus runner's values (digest §11).
TIME_PRECISION = 3600
POLL_DEADLINE_S = 60.0
STARTUP_DEADLINE_S = 40.0


def b64url(data: bytes) -> str:
    return b64url_encode(data)


@dataclass
class Cluster:
    leader: int
    helper: int
    collector: int
    client: int
    http: httpx.Client

    def call(self, port: int, command: str, body: Any) -> dict[str, Any]:
        response = self.http.post(f"http://127.0.0.1:{port}/internal/test/{command}", json=body)
        assert response.status_code == 200, (command, response.status_code, response.text)
        answer: dict[str, Any] = response.json()
        return answer


def _start(role: str, port: int, data: Path, logs: Path) -> subprocess.Popen[bytes]:
    # Small aggregation jobs, so that the many-reports case is split into several (§5).
    env = {**os.environ, "PYTHONPATH": str(REPO), "SAGG_AGGREGATOR_MAX_JOB_SIZE": "25"}
    log = (logs / f"{role}-{port}.log").open("wb")
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "deploy.interop",
            role,
            "--port",
            str(port),
            "--data-dir",
            str(data / f"{role}-{port}"),
        ],
        cwd=REPO,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    base = tmp_path_factory.mktemp("interop")
    names = ("leader", "helper", "collector", "client")
    ports = dict(zip(names, free_ports(len(names)), strict=True))
    roles = {"leader": "aggregator", "helper": "aggregator"}
    processes = [_start(roles.get(name, name), port, base, base) for name, port in ports.items()]
    http = httpx.Client(timeout=30.0)
    try:
        # Runner step 1: `ready` on every container until it succeeds.
        deadline = time.monotonic() + STARTUP_DEADLINE_S
        for port in ports.values():
            while True:
                with contextlib.suppress(httpx.TransportError):
                    ready = http.post(f"http://127.0.0.1:{port}/internal/test/ready", json={})
                    if ready.status_code == 200:
                        break
                dead = [p.args for p in processes if p.poll() is not None]
                if dead or time.monotonic() > deadline:
                    logs = "\n".join(f.read_text()[-2000:] for f in base.glob("*.log"))
                    pytest.fail(f"interop processes did not start ({dead}):\n{logs}")
                time.sleep(0.2)
        yield Cluster(http=http, **ports)
    finally:
        http.close()
        for process in processes:
            process.terminate()
        for process in processes:
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)


@dataclass
class Task:
    task_id: str
    leader: str
    helper: str
    vdaf: dict[str, str]
    collector_token: str


def provision(
    c: Cluster,
    vdaf: dict[str, str],
    *,
    min_batch_size: int,
    query_type: int = 1,
    max_batch_size: int | None = None,
    max_batch_query_count: int = 1,
    collector_token_for_collector: str | None = None,
) -> Task:
    """Runner steps 2-5: ids and secrets, endpoint_for_task, add_task on all three."""
    task_id = TaskId.random().to_b64url()
    leader_token, collector_token = secrets.token_urlsafe(16), secrets.token_urlsafe(16)
    endpoints = {}
    for role, port in (("leader", c.leader), ("helper", c.helper)):
        answer = c.call(
            port,
            "endpoint_for_task",
            {"task_id": task_id, "role": role, "hostname": "127.0.0.1"},
        )
        assert answer["status"] == "success", answer
        # A relative endpoint is resolved against the container's address (§4.4.1).
        endpoints[role] = httpx.URL(f"http://127.0.0.1:{port}/").join(answer["endpoint"])
    leader, helper = str(endpoints["leader"]), str(endpoints["helper"])

    answer = c.call(
        c.collector,
        "add_task",
        {
            "task_id": task_id,
            "leader": leader,
            "vdaf": vdaf,
            "collector_authentication_token": collector_token_for_collector or collector_token,
            "query_type": query_type,
        },
    )
    assert answer["status"] == "success", answer
    hpke_config = answer["collector_hpke_config"]
    common = {
        "task_id": task_id,
        "leader": leader,
        "helper": helper,
        "vdaf": vdaf,
        "leader_authentication_token": leader_token,
        "vdaf_verify_key": b64url(secrets.token_bytes(VERIFY_KEY_SIZE)),
        "max_batch_query_count": max_batch_query_count,
        "query_type": query_type,
        "min_batch_size": min_batch_size,
        "max_batch_size": max_batch_size,
        "time_precision": TIME_PRECISION,
        "collector_hpke_config": hpke_config,
    }
    for role, port in (("leader", c.leader), ("helper", c.helper)):
        body = {**common, "role": role}
        if role == "leader":
            body["collector_authentication_token"] = collector_token
        answer = c.call(port, "add_task", body)
        assert answer["status"] == "success", (role, answer)
    return Task(task_id, leader, helper, vdaf, collector_token)


def upload(c: Cluster, task: Task, measurement: Any, when: int | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {
        "task_id": task.task_id,
        "leader": task.leader,
        "helper": task.helper,
        "vdaf": task.vdaf,
        "measurement": measurement,
        "time_precision": TIME_PRECISION,
    }
    if when is not None:
        body["time"] = when
    return c.call(c.client, "upload", body)


def collect(c: Cluster, task: Task, query: dict[str, Any]) -> dict[str, Any]:
    """Runner step 7: collection_start, then collection_poll every 0.5 s for up to 60 s."""
    started = c.call(
        c.collector, "collection_start", {"task_id": task.task_id, "agg_param": "", "query": query}
    )
    assert started["status"] == "success", started
    deadline = time.monotonic() + POLL_DEADLINE_S
    while time.monotonic() < deadline:
        answer = c.call(c.collector, "collection_poll", {"handle": started["handle"]})
        if answer["status"] != "in progress":
            return answer
        time.sleep(0.5)
    pytest.fail(f"collection still in progress after {POLL_DEADLINE_S} s")


def interval_query(now: int) -> dict[str, Any]:
    """The Janus runner's interval: twice the precision from now truncated to the precision."""
    return {
        "type": 1,
        "batch_interval_start": now - now % TIME_PRECISION,
        "batch_interval_duration": 2 * TIME_PRECISION,
    }


CASES = [
    pytest.param({"type": "Prio3Count"}, ["0", "1", "1", "0", "1", "1"], "4", id="count"),
    pytest.param(
        {"type": "Prio3Sum", "bits": "8"}, ["0", "255", "17", "3", "100"], "375", id="sum"
    ),
    pytest.param(
        {"type": "Prio3SumVec", "bits": "8", "length": "4", "chunk_length": "2"},
        [["1", "2", "3", "4"], ["255", "0", "0", "1"], ["0", "0", "7", "0"]],
        ["256", "2", "10", "5"],
        id="sumvec",
    ),
    pytest.param(
        {"type": "Prio3Histogram", "length": "4", "chunk_length": "2"},
        ["0", "3", "3", "1", "3"],
        ["1", "1", "0", "3"],
        id="histogram",
    ),
]


@pytest.mark.parametrize(("vdaf", "measurements", "expected"), CASES)
def test_time_interval_collection(
    cluster: Cluster, vdaf: dict[str, str], measurements: list[Any], expected: Any
) -> None:
    task = provision(cluster, vdaf, min_batch_size=len(measurements))
    now = int(time.time())
    for measurement in measurements:
        answer = upload(cluster, task, measurement, now)
        assert answer == {"status": "success"}, answer
    query = interval_query(now)
    result = collect(cluster, task, query)
    assert result["status"] == "complete", result
    assert result["result"] == expected
    assert result["report_count"] == len(measurements)
    # The Collection's interval spans the reports' timestamps, not the query (DAP-09 §4.6.1):
    # every report here falls in the first hour of the queried two.
    assert result["interval_start"] == query["batch_interval_start"]
    assert result["interval_duration"] == TIME_PRECISION
    assert "batch_id" not in result


def test_fixed_size_current_batch(cluster: Cluster) -> None:
    measurements = ["1", "0", "1", "1"]
    task = provision(
        cluster,
        {"type": "Prio3Count"},
        min_batch_size=len(measurements),
        max_batch_size=len(measurements),
        query_type=2,
    )
    for measurement in measurements:
        assert upload(cluster, task, measurement) == {"status": "success"}
    result = collect(cluster, task, {"type": 2, "subtype": 1})
    assert result["status"] == "complete", result
    assert result["result"] == "3"
    assert result["report_count"] == 4
    assert isinstance(result["batch_id"], str) and result["batch_id"]

    # by_batch_id (subtype 0) for the batch just collected gives the same answer again.
    again = collect(cluster, task, {"type": 2, "subtype": 0, "batch_id": result["batch_id"]})
    assert again["status"] == "complete", again
    assert (again["result"], again["batch_id"]) == ("3", result["batch_id"])


def test_recollect_same_batch_and_overlap(cluster: Cluster) -> None:
    """The interop draft's late-report case and max_batch_query_count = 1 (§5)."""
    task = provision(cluster, {"type": "Prio3Count"}, min_batch_size=3)
    now = int(time.time())
    for measurement in ("1", "1", "0"):
        assert upload(cluster, task, measurement, now) == {"status": "success"}
    query = interval_query(now)
    first = collect(cluster, task, query)
    assert (first["status"], first["result"], first["report_count"]) == ("complete", "2", 3)

    # A late report into the collected interval must not change what the batch gives (the
    # leader refuses it outright: its batch is collected).
    upload(cluster, task, "1", now)
    second = collect(cluster, task, query)
    assert (second["status"], second["result"], second["report_count"]) == ("complete", "2", 3)

    # A different interval overlapping the collected one is refused (DAP-09 §4.6.5).
    overlapping = {**query, "batch_interval_duration": TIME_PRECISION}
    refused = collect(cluster, task, overlapping)
    assert refused["status"] == "error", refused
    assert refused["error"]


def test_far_future_upload_rejected(cluster: Cluster) -> None:
    task = provision(cluster, {"type": "Prio3Count"}, min_batch_size=1)
    answer = upload(cluster, task, "1", int(time.time()) + 30 * 86_400)
    assert answer["status"] == "error"
    assert answer["error"]


def test_wrong_collector_token_rejected(cluster: Cluster) -> None:
    task = provision(
        cluster,
        {"type": "Prio3Count"},
        min_batch_size=1,
        collector_token_for_collector=secrets.token_urlsafe(16),
    )
    now = int(time.time())
    assert upload(cluster, task, "1", now) == {"status": "success"}
    result = collect(cluster, task, interval_query(now))
    assert result["status"] == "error", result


def test_wrong_leader_token_rejected_by_helper(cluster: Cluster) -> None:
    task = provision(cluster, {"type": "Prio3Count"}, min_batch_size=1)
    job_id = b64url(secrets.token_bytes(16))
    response = cluster.http.put(
        f"{task.helper.rstrip('/')}/tasks/{task.task_id}/aggregation_jobs/{job_id}",
        content=b"\x00",
        headers={
            "Content-Type": "application/dap-aggregation-job-init-req",
            "DAP-Auth-Token": secrets.token_urlsafe(16),
        },
    )
    assert response.status_code in (400, 401, 403), response.text
    assert "unauthorizedRequest" in response.text


def test_unknown_path_is_404(cluster: Cluster) -> None:
    for port in (cluster.leader, cluster.collector, cluster.client):
        response = cluster.http.post(f"http://127.0.0.1:{port}/internal/test/nope", json={})
        assert response.status_code == 404


@pytest.mark.parametrize("body", [b"{not json", b"[1, 2]"])
def test_malformed_body_is_a_status_error(cluster: Cluster, body: bytes) -> None:
    for port, command in (
        (cluster.leader, "add_task"),
        (cluster.collector, "collection_start"),
        (cluster.client, "upload"),
    ):
        response = cluster.http.post(
            f"http://127.0.0.1:{port}/internal/test/{command}",
            content=body,
            headers={"Content-Type": "application/json"},
        )
        assert response.status_code == 200
        answer = response.json()
        assert answer["status"] == "error" and answer["error"], answer


def test_invalid_requests_are_status_errors(cluster: Cluster) -> None:
    answer = cluster.call(cluster.collector, "collection_poll", {"handle": "no-such-job"})
    assert answer["status"] == "error"
    answer = cluster.call(
        cluster.leader,
        "add_task",
        {"task_id": TaskId.random().to_b64url(), "role": "leader"},
    )
    assert answer["status"] == "error"
    assert "vdaf" in answer["error"]
    task = provision(cluster, {"type": "Prio3Count"}, min_batch_size=1)
    unsupported = {**task.__dict__, "vdaf": {"type": "Poplar1", "bits": "8"}}
    answer = upload(cluster, Task(**unsupported), "1")
    assert answer["status"] == "error" and "Poplar1" in answer["error"]
    assert upload(cluster, task, "2")["status"] == "error"  # out of range for Count


def test_many_reports_split_into_jobs(cluster: Cluster) -> None:
    """Hundreds of reports (§5), spread over several aggregation jobs of at most 25."""
    vdaf = {"type": "Prio3Histogram", "length": "5", "chunk_length": "2"}
    buckets = [i % 5 for i in range(200)]
    task = provision(cluster, vdaf, min_batch_size=len(buckets))
    now = int(time.time())
    with ThreadPoolExecutor(max_workers=8) as pool:
        answers = list(pool.map(lambda b: upload(cluster, task, str(b), now), buckets))
    assert all(a == {"status": "success"} for a in answers), answers[:3]
    result = collect(cluster, task, interval_query(now))
    assert result["status"] == "complete", result
    assert result["result"] == ["40"] * 5
    assert result["report_count"] == 200


def test_replayed_report_counted_once(cluster: Cluster) -> None:
    """A canned report sent twice is aggregated once (§5; DAP-09 §4.4.2 replay check)."""
    vdaf = {"type": "Prio3Sum", "bits": "4"}
    task = provision(cluster, vdaf, min_batch_size=2)
    now = int(time.time())
    assert upload(cluster, task, "5", now) == {"status": "success"}
    client_task = ClientTask.model_validate(
        {**task.__dict__, "vdaf": {"type": "Prio3Sum", "bits": 4}, "time_precision": 3600}
    )
    task_id = TaskId.from_b64url(task.task_id)
    configs = [fetch_hpke_config(cluster.http, url, task_id) for url in (task.leader, task.helper)]
    (report,) = client_task.build_reports([7], configs[0], configs[1], now)
    url = f"{task.leader.rstrip('/')}/tasks/{task.task_id}/reports"
    statuses = [
        cluster.http.put(
            url, content=report.encode(), headers={"Content-Type": MEDIA_REPORT}
        ).status_code
        for _ in range(2)
    ]
    assert statuses[0] == 201
    result = collect(cluster, task, interval_query(now))
    assert (result["status"], result["result"], result["report_count"]) == ("complete", "12", 2)
