"""kill -9 during a DAP-19 task's upload, aggregation and collection loses nothing (issue #15
item 6), nor does a lossy link between leader and helper: leader and helper run as real
processes (`tests.faults.harness`), the client keeps each UploadRequest's bytes and re-sends
those that got no answer, and the collected aggregate is exactly the measurements, each counted
once."""

from __future__ import annotations

import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from shared.dap.messages import Interval
from shared.dap.messages19 import CollectionJobReq, CollectionJobResp, Query, UploadErrors
from tests import pg
from tests.aggregator import dap19_client as c19
from tests.aggregator.helpers import COLLECTOR_TOKEN
from tests.faults.harness import (
    ADMIN_TOKEN,
    Action,
    Crossing,
    Deployment,
    Schedule,
    wait_until,
)

REPORT_REPLAYED = 2  # digest §1.2
PER_REQUEST = 10
REQUESTS = 24


def _send(http: httpx.Client, url: str, body: bytes) -> bool | None:
    """True: every report is stored (accepted now, or replayed: stored by an earlier send);
    None: no answer (the leader is down), send again."""
    try:
        response = http.post(url, content=body, headers={"Content-Type": c19.UPLOAD_REQ})
    except httpx.HTTPError:
        return None
    if response.status_code >= 500:
        return None
    assert response.status_code == 200, response.text
    if response.content:
        errors = UploadErrors.decode(response.content).status
        assert {int(s.error) for s in errors} == {REPORT_REPLAYED}, errors
    return True


@pytest.mark.slow
@pytest.mark.parametrize("store", ["sqlite", "postgres"])
def test_dap19_kill9_during_upload_aggregation_and_collection(tmp_path: Path, store: str) -> None:
    if store == "postgres":
        pg.require()
    rng = random.Random(19)
    with Deployment(tmp_path, Schedule(19), postgres=store == "postgres") as dep:
        http = httpx.Client(timeout=10.0)
        task = _provision(dep, http, PER_REQUEST * REQUESTS)
        tid = task.params.task_id.to_b64url()
        lc = c19.hpke_config(http, dep.leader.url)
        hc = c19.hpke_config(http, dep.helper.url)
        now = int(time.time())
        measurements = [rng.randrange(2) for _ in range(PER_REQUEST * REQUESTS)]
        bodies = [
            b"".join(
                c19.make_report(task, lc, hc, m, now).encode()
                for m in measurements[i : i + PER_REQUEST]
            )
            for i in range(0, len(measurements), PER_REQUEST)
        ]
        url = f"{dep.leader.url}/tasks/{tid}/reports"

        # Upload, with the leader killed after the 8th answer.
        answers = 0
        lock = threading.Lock()

        def send(body: bytes) -> bool | None:
            nonlocal answers
            stored = _send(http, url, body)
            with lock:
                answers += 1
                if answers == 8:
                    dep.leader.kill9()
            return stored

        with ThreadPoolExecutor(max_workers=4) as pool:
            stored = list(pool.map(send, bodies))
        assert None in stored and True in stored
        dep.leader.start()
        for _ in range(5):
            stored = [s or _send(http, url, b) for s, b in zip(stored, bodies, strict=True)]
        assert all(stored)

        # Aggregation under way: the helper, then the leader, killed and restarted.
        time.sleep(1.5)
        dep.helper.restart()
        time.sleep(1.0)
        dep.leader.restart()

        # Collection: the leader killed right after the job is created.
        request, collector, created = _create_collection(http, dep, task, now)
        dep.leader.restart()
        job = dep.leader.url + created.headers["location"]
        resp = _await_collection(http, job, collector, timeout=90)
        assert resp.report_count == len(measurements)
        assert c19.unshard(task, request, resp) == sum(measurements)
        http.close()


def _await_collection(
    http: httpx.Client, job: str, collector: dict[str, str], timeout: float
) -> CollectionJobResp:
    """Poll a DAP-19 collection job (GET its Location) until the leader answers with it."""
    result: list[CollectionJobResp] = []

    def done() -> bool:
        polled = http.get(job, headers=collector)
        assert polled.status_code == 200, polled.text
        if polled.content:
            result.append(CollectionJobResp.decode(polled.content))
        return bool(result)

    wait_until("the DAP-19 collection", done, timeout=timeout, pause=0.3)
    return result[0]


def _create_collection(
    http: httpx.Client, dep: Deployment, task: c19.Task19, now: int
) -> tuple[CollectionJobReq, dict[str, str], httpx.Response]:
    """POST the collection of `now`'s time-interval batch; (request, collector auth, answer)."""
    request = CollectionJobReq(Query.time_interval(Interval(now // task.tp, 1)), b"")
    collector = {"Authorization": f"Bearer {COLLECTOR_TOKEN}"}
    created = http.post(
        f"{dep.leader.url}/tasks/{task.params.task_id.to_b64url()}/collection_jobs",
        content=request.encode(),
        headers={"Content-Type": c19.COLLECTION_JOB_REQ, **collector},
    )
    assert created.status_code == 201, created.text
    return request, collector, created


def _provision(dep: Deployment, http: httpx.Client, min_batch_size: int) -> c19.Task19:
    assert dep.proxy is not None
    task = c19.make_task(
        {"type": "Prio3Count"},
        min_batch_size=min_batch_size,
        leader_url=dep.leader.url + "/",
        helper_url=dep.proxy.url + "/",
    )
    tid = task.params.task_id.to_b64url()
    admin = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    for role, service in (("leader", dep.leader), ("helper", dep.helper)):
        definition = task.params.definition(role)
        r = http.put(f"{service.url}/internal/tasks/{tid}", json=definition, headers=admin)
        assert r.status_code == 201, r.text
    return task


@pytest.mark.slow
def test_dap19_lossy_link_with_a_deferring_helper(tmp_path: Path) -> None:
    """Seeded drops both ways, 503s and delays on every leader->helper request of a helper
    that defers its jobs: a job created but unanswered is found again by the identical POST
    (content-derived id), a lost poll is polled again, a lost aggregate share is re-requested
    and answered from the stored one; the aggregate is exact."""
    schedule = Schedule(
        19,
        weights={
            Action.PASS: 0.45,
            Action.DROP_RESPONSE: 0.25,
            Action.DROP_REQUEST: 0.1,
            Action.UNAVAILABLE: 0.1,
            Action.DELAY: 0.1,
        },
        delay_s=(0.1, 1.0),
    )
    deferring = {
        "SAGG_AGGREGATOR_HELPER_DEFER_JOBS": "true",
        "SAGG_AGGREGATOR_HELPER_RETRY_AFTER_S": "1",
    }
    with Deployment(tmp_path, schedule, aggregator_env=deferring) as dep:
        assert dep.proxy is not None
        http = httpx.Client(timeout=10.0)
        rng = random.Random(7)
        measurements = [rng.randrange(2) for _ in range(120)]
        task = _provision(dep, http, len(measurements))
        # The first answered job creation and aggregate share are lost for sure.
        lost_once: set[str] = set()

        def lose_first(crossing: Crossing) -> Action | None:
            kind = f"{crossing.method} {crossing.kind}"
            answered = crossing.method == "POST" and crossing.upstream_status == 200
            if answered and kind not in lost_once:
                lost_once.add(kind)
                return Action.DROP_RESPONSE
            return None

        dep.proxy.hooks.append(lose_first)
        tid = task.params.task_id.to_b64url()
        lc = c19.hpke_config(http, dep.leader.url)
        hc = c19.hpke_config(http, dep.helper.url)
        now = int(time.time())
        url = f"{dep.leader.url}/tasks/{tid}/reports"
        for i in range(0, len(measurements), PER_REQUEST):
            body = b"".join(
                c19.make_report(task, lc, hc, m, now).encode()
                for m in measurements[i : i + PER_REQUEST]
            )
            assert _send(http, url, body)
        request, collector, created = _create_collection(http, dep, task, now)
        job = dep.leader.url + created.headers["location"]
        resp = _await_collection(http, job, collector, timeout=120)
        assert resp.report_count == len(measurements)
        assert c19.unshard(task, request, resp) == sum(measurements)
        crossings = dep.proxy.snapshot()
        assert lost_once == {"POST aggregation_job", "POST aggregate_share"}
        lost = [c for c in crossings if c.action is Action.DROP_RESPONSE and c.upstream_status]
        # Each lost answer's request was sent again and answered (the same job or share). A
        # lost poll of a job is followed by the job's identical creation request, which the
        # helper answers from the job's state (DAP-19 §4.5.3.2), or by another poll.
        for c in lost:
            paths = {c.path}
            if c.method == "GET" and "/aggregation_jobs/" in c.path:
                paths.add(c.path.split("/aggregation_jobs/")[0] + "/aggregation_jobs")
            later = [d for d in crossings if d.path in paths and d.index > c.index]
            assert any(d.upstream_status == 200 for d in later), (c, later)
        # The deferring helper was polled.
        assert any(c.method == "GET" for c in crossings), crossings
        http.close()
