"""A DAP-19 task end to end in one process (digest dap-19.md §5-§8): a client's bulk upload,
the leader's drivers aggregating with the helper over DAP-19, the collector's CollectionJobReq
and GET polling, and the aggregate opened with the collector's key and unsharded to exactly
the measurements, in both batch modes. Reports and requests come from `dap19_client`, built
from the digest, not from the aggregator's code."""

from __future__ import annotations

from typing import Any

import httpx

from services.aggregator.drivers.runner import DriverRunner
from services.common.clock import TestClock
from shared.dap.ids import CollectionJobId
from shared.dap.messages import MEDIA_COLLECT_REQ, Collection, CollectionReq, Interval
from shared.dap.messages import Query as Query09
from shared.dap.messages19 import CollectionJobReq, CollectionJobResp, Query
from tests.aggregator import dap19_client as c19
from tests.aggregator import helpers
from tests.aggregator.conftest import DbFactory
from tests.aggregator.env import Env, collector_auth, make_env
from tests.aggregator.helpers import TaskParams

HISTOGRAM = {"type": "Prio3Histogram", "length": 4, "chunk_length": 2}
COUNT = {"type": "Prio3Count"}
TP09 = TaskParams().time_precision


def start(env: Env, task: c19.Task19, request: CollectionJobReq) -> httpx.Response:
    response: httpx.Response = env.leader.post(
        f"/tasks/{env.tid}/collection_jobs",
        content=request.encode(),
        headers={"Content-Type": c19.COLLECTION_JOB_REQ, **collector_auth()},
    )
    return response


def collect(env: Env, task: c19.Task19, request: CollectionJobReq) -> tuple[str, CollectionJobResp]:
    created = start(env, task, request)
    assert created.status_code in (200, 201), created.text
    location = created.headers["location"]
    assert location.startswith(f"/tasks/{env.tid}/collection_jobs/")
    # 16-byte ids: 22 unpadded base64url characters (digest §4.3).
    assert len(location.rsplit("/", 1)[1]) == 22
    for _ in range(30):
        env.drive()
        polled = env.leader.get(location, headers=collector_auth())
        assert polled.status_code == 200, polled.text
        if polled.content:
            assert (
                polled.headers["content-type"] == "application/ppm-dap;message=collection-job-resp"
            )
            return location, CollectionJobResp.decode(polled.content)
        assert "retry-after" in polled.headers
        env.advance(1)
    raise AssertionError("collection did not finish")


def setup(db_factory: DbFactory, clock: TestClock, task: c19.Task19) -> tuple[Env, Any, Any]:
    env = make_env(db_factory, clock, task.params)
    return env, c19.hpke_config(env.leader), c19.hpke_config(env.helper)


def test_time_interval_histogram(db_factory: DbFactory, clock: TestClock) -> None:
    task = c19.make_task(HISTOGRAM)
    env, lc, hc = setup(db_factory, clock, task)
    now = clock.now()
    measurements = [0, 1, 1, 3, 2, 3, 3, 0, 1, 3]
    reports = [c19.make_report(task, lc, hc, m, now + i) for i, m in enumerate(measurements)]
    response = c19.upload(env.leader, task, reports)
    assert response.status_code == 200 and response.content == b"", response.text

    request = CollectionJobReq(Query.time_interval(Interval(now // task.tp, 1)), b"")
    _, resp = collect(env, task, request)
    assert resp.report_count == len(measurements)
    # The covering interval in time_precision units (digest §7.2 step 6).
    assert resp.interval == Interval(now // task.tp, 1)
    assert c19.unshard(task, request, resp) == [measurements.count(b) for b in range(4)]


def test_leader_selected_count_next_batches(db_factory: DbFactory, clock: TestClock) -> None:
    task = c19.make_task(COUNT, query_type="fixed_size", min_batch_size=3)
    env, lc, hc = setup(db_factory, clock, task)
    now = clock.now()
    first = [1, 0, 1]
    response = c19.upload(env.leader, task, [c19.make_report(task, lc, hc, m, now) for m in first])
    assert response.status_code == 200 and response.content == b""
    env.drive()
    request = CollectionJobReq(Query.leader_selected(), b"")
    location, resp = collect(env, task, request)
    assert resp.report_count == 3
    assert c19.unshard(task, request, resp) == sum(first)

    # The same 9-byte request asks for the next batch once the first job finished
    # (digest §16 item 3): a new job, pending until the batch fills.
    second = [1, 1, 1]
    reports = [c19.make_report(task, lc, hc, m, now + 5) for m in second]
    assert c19.upload(env.leader, task, reports).status_code == 200
    location2, resp2 = collect(env, task, request)
    assert location2 != location
    assert resp2.report_count == 3
    assert c19.unshard(task, request, resp2) == 3


def test_leader_selected_job_survives_a_lost_location(
    db_factory: DbFactory, clock: TestClock
) -> None:
    """A collector that stopped between its POST and storing the Location asks again after the
    job finished: it gets the same job and its batch, not the next one; once a poll has
    delivered that result, the request means the next batch again."""
    task = c19.make_task(COUNT, query_type="fixed_size", min_batch_size=3)
    env, lc, hc = setup(db_factory, clock, task)
    now = clock.now()
    first = [1, 1, 0]
    assert c19.upload(env.leader, task, [c19.make_report(task, lc, hc, m, now) for m in first])
    env.drive()
    request = CollectionJobReq(Query.leader_selected(), b"")
    lost = start(env, task, request)
    assert lost.status_code == 201
    for _ in range(5):
        env.drive()
        env.advance(1)
    # Later uploads fill a second batch, which a new job would collect.
    second = [1, 1, 1]
    reports = [c19.make_report(task, lc, hc, m, now + 5) for m in second]
    assert c19.upload(env.leader, task, reports).status_code == 200
    env.drive()

    location, resp = collect(env, task, request)
    assert location == lost.headers["location"]
    assert c19.unshard(task, request, resp) == sum(first)
    location2, resp2 = collect(env, task, request)
    assert location2 != location
    assert c19.unshard(task, request, resp2) == sum(second)


def test_derived_configuration(db_factory: DbFactory, clock: TestClock) -> None:
    """Provisioned without a TaskConfiguration, the aggregators bind the one the digest's
    fields give with an empty task_info (#787): the client's hand-made bytes decrypt."""
    task = c19.make_task(COUNT, task_info=b"", provision_blob=False)
    env, lc, hc = setup(db_factory, clock, task)
    now = clock.now()
    reports = [c19.make_report(task, lc, hc, 1, now) for _ in range(2)]
    assert c19.upload(env.leader, task, reports).content == b""
    request = CollectionJobReq(Query.time_interval(Interval(now // task.tp, 1)), b"")
    _, resp = collect(env, task, request)
    assert c19.unshard(task, request, resp) == 2


def test_both_versions_side_by_side(db_factory: DbFactory, clock: TestClock) -> None:
    """One deployment, a task of each version: each is uploaded, aggregated and collected in
    its own version, and each version's upload method is refused for the other's task (the
    task's version picks the route, digest §15)."""
    task = c19.make_task(COUNT)
    env, lc, hc = setup(db_factory, clock, task)
    old = TaskParams()
    helpers.provision(env.leader, old, "leader")
    helpers.provision(env.helper, old, "helper")
    now = clock.now()
    old_report = helpers.make_report(old, lc, hc, 1, now)
    new_report = c19.make_report(task, lc, hc, 1, now)

    wrong = env.leader.put(
        f"/tasks/{env.tid}/reports",
        content=old_report.encode(),
        headers={"Content-Type": "application/dap-report"},
    )
    assert wrong.status_code == 405 and wrong.headers["allow"] == "POST"
    wrong = env.leader.post(
        f"/tasks/{old.task_id.to_b64url()}/reports",
        content=new_report.encode(),
        headers={"Content-Type": c19.UPLOAD_REQ},
    )
    assert wrong.status_code == 405 and wrong.headers["allow"] == "PUT"

    assert helpers.upload(env.leader, old, old_report).status_code == 201
    assert c19.upload(env.leader, task, [new_report]).content == b""
    request = CollectionJobReq(Query.time_interval(Interval(now // task.tp, 1)), b"")
    _, resp = collect(env, task, request)
    assert c19.unshard(task, request, resp) == 1
    job = CollectionJobId.random().to_b64url()
    put = env.leader.put(
        f"/tasks/{old.task_id.to_b64url()}/collection_jobs/{job}",
        content=CollectionReq(
            Query09.time_interval(Interval(now, old.time_precision)), b""
        ).encode(),
        headers={"Content-Type": MEDIA_COLLECT_REQ, **collector_auth()},
    )
    assert put.status_code == 201, put.text
    for _ in range(10):
        env.drive()
        polled = env.leader.post(
            f"/tasks/{old.task_id.to_b64url()}/collection_jobs/{job}", headers=collector_auth()
        )
        if polled.status_code == 200:
            assert Collection.decode(polled.content).report_count == 1
            return
        env.advance(1)
    raise AssertionError("the DAP-09 collection did not finish")


def test_time_interval_collection_after_helper_outage(
    db_factory: DbFactory, clock: TestClock
) -> None:
    """A helper outage longer than the leader's retries fails the collection job; a DAP-19
    time-interval CollectionJobReq has one encoding per interval (no extension sagg takes), so
    the collector's only way to ask again is the identical request. It must reach the batch
    once the helper is back, not name the failed job forever."""
    task = c19.make_task(COUNT)
    env = make_env(db_factory, clock, task.params, max_job_attempts=2)
    lc, hc = c19.hpke_config(env.leader), c19.hpke_config(env.helper)
    now = clock.now()
    reports = [c19.make_report(task, lc, hc, m, now) for m in (1, 0, 1)]
    assert c19.upload(env.leader, task, reports).status_code == 200
    env.drive()  # aggregated with the helper up

    def down(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("helper down", request=request)

    healthy = env.runner
    unreachable = httpx.Client(transport=httpx.MockTransport(down))
    env.runner = DriverRunner(env.leader_agg, http=unreachable)
    request = CollectionJobReq(Query.time_interval(Interval(now // task.tp, 1)), b"")
    created = start(env, task, request)
    assert created.status_code == 201
    failed = c19.poll_collection(env, created.headers["location"], rounds=200)
    assert failed.status_code == 502, failed.text  # helper unavailable

    env.runner = healthy
    location, resp = collect(env, task, request)
    assert location != created.headers["location"]
    assert resp.report_count == 3
    assert c19.unshard(task, request, resp) == 2
