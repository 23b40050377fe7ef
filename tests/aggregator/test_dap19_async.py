"""DAP-19's asynchronous aggregation jobs (DAP-19 §3.1, §4.5.3.2; digest dap-19.md §2, §4):
a deferring helper answers the creation POST with an empty 2xx, `Location` ...?step=0 and
Retry-After, and the leader's driver polls (GET after Retry-After, or the identical POST once
its polling budget is spent) until the job's AggregationJobResp arrives."""

from __future__ import annotations

import httpx

from services.aggregator.drivers.garbage import collect_garbage
from services.common.clock import TestClock
from services.common.http import MAX_RETRY_AFTER_S
from shared.dap.messages19 import (
    AggregationJobInitReq,
    AggregationJobResp,
    CollectionJobResp,
)
from tests.aggregator import dap19_client as c19
from tests.aggregator.conftest import DbFactory
from tests.aggregator.env import Env, collector_auth, make_env
from tests.aggregator.helpers import problem_type

AUTH = {"Authorization": "Bearer aggregator-token-0123456789"}
COUNT = {"type": "Prio3Count"}


def _collect(env: Env, task: c19.Task19, rounds: int = 20) -> int:
    request, location = c19.create_collection(env, task, env.clock.now())
    polled = c19.poll_collection(env, location, rounds)
    total: int = c19.unshard(task, request, CollectionJobResp.decode(polled.content))
    return total


def test_deferring_helper_answers_pending_then_the_job(
    db_factory: DbFactory, clock: TestClock
) -> None:
    task = c19.make_task(COUNT)
    env = make_env(db_factory, clock, task.params, helper_defer_jobs=True, helper_retry_after_s=5)
    hc = c19.hpke_config(env.helper)
    body = AggregationJobInitReq(0, b"", (), (c19.verify_init(task, hc, 1, clock.now()),)).encode()

    def post() -> tuple[int, bytes, dict[str, str]]:
        r = env.helper.post(
            f"/tasks/{env.tid}/aggregation_jobs",
            content=body,
            headers={"Content-Type": c19.INIT_REQ, **AUTH},
        )
        return r.status_code, r.content, dict(r.headers)

    status, content, headers = post()
    assert (status, content) == (200, b"")
    location = headers["location"]
    assert location.startswith(f"/tasks/{env.tid}/aggregation_jobs/")
    assert location.endswith("?step=0")
    assert headers["retry-after"] == "5"
    # Polled before Retry-After: still pending, the same answer.
    early = env.helper.get(location, headers=AUTH)
    assert (early.status_code, early.content) == (200, b"")
    env.advance(5)
    ready = env.helper.get(location, headers=AUTH)
    assert ready.status_code == 200
    assert ready.headers["content-type"] == c19.JOB_RESP
    resp = AggregationJobResp.decode(ready.content)
    assert [v.payload for v in resp.verify_resps] == [bytes.fromhex("0200000000")]
    # The identical POST now gets the job's response (idempotent creation).
    status, content, _ = post()
    assert (status, content) == (200, ready.content)


def test_leader_polls_a_deferring_helper(db_factory: DbFactory, clock: TestClock) -> None:
    """Retry-After 0: the driver's GET poll gets the job in the same step."""
    task = c19.make_task(COUNT)
    env = make_env(db_factory, clock, task.params, helper_defer_jobs=True, helper_retry_after_s=0)
    lc, hc = c19.hpke_config(env.leader), c19.hpke_config(env.helper)
    reports = [c19.make_report(task, lc, hc, m, clock.now()) for m in (1, 1, 0, 1)]
    assert c19.upload(env.leader, task, reports).content == b""
    assert _collect(env, task) == 3


def test_leader_comes_back_after_retry_after(db_factory: DbFactory, clock: TestClock) -> None:
    """No polling budget: the driver releases the job for Retry-After and then re-sends the
    identical request, which gets the prepared job."""
    task = c19.make_task(COUNT)
    env = make_env(
        db_factory,
        clock,
        task.params,
        helper_defer_jobs=True,
        helper_retry_after_s=3,
        helper_poll_s=0,
    )
    lc, hc = c19.hpke_config(env.leader), c19.hpke_config(env.helper)
    reports = [c19.make_report(task, lc, hc, 1, clock.now()) for _ in range(2)]
    assert c19.upload(env.leader, task, reports).content == b""
    assert _collect(env, task) == 2


def test_a_bogus_retry_after_parks_a_job_for_an_hour_at_most(
    db_factory: DbFactory, clock: TestClock
) -> None:
    """A helper that defers asking for 10^9 s: the leader comes back after
    `MAX_RETRY_AFTER_S` (an hour) instead, and the job completes."""
    task = c19.make_task(COUNT)
    env = make_env(
        db_factory,
        clock,
        task.params,
        helper_defer_jobs=True,
        helper_retry_after_s=1,
        helper_poll_s=0,
    )

    def bogus(request: httpx.Request) -> httpx.Response:
        answer = env.helper.request(
            request.method, str(request.url), content=request.content, headers=request.headers
        )
        headers = dict(answer.headers)
        if "retry-after" in headers:
            headers["retry-after"] = str(10**9)
        return httpx.Response(answer.status_code, headers=headers, content=answer.content)

    env.runner.aggregation.http = httpx.Client(
        transport=httpx.MockTransport(bogus), base_url=str(env.helper.base_url)
    )
    lc, hc = c19.hpke_config(env.leader), c19.hpke_config(env.helper)
    reports = [c19.make_report(task, lc, hc, 1, clock.now()) for _ in range(2)]
    assert c19.upload(env.leader, task, reports).content == b""
    request, location = c19.create_collection(env, task, clock.now())
    env.drive()
    env.advance(int(MAX_RETRY_AFTER_S) - 2)
    env.drive()
    assert env.leader.get(location, headers=collector_auth()).content == b""  # parked
    env.advance(2)
    polled = c19.poll_collection(env, location, rounds=5)
    assert c19.unshard(task, request, CollectionJobResp.decode(polled.content)) == 2


def test_a_deferred_job_goes_on_delete_or_when_its_reports_expire(
    db_factory: DbFactory, clock: TestClock
) -> None:
    """A job the helper deferred and the leader never came back for holds its whole request:
    the leader's DELETE drops it (204, then unknown), and garbage collection drops one
    deferred before the report expiry horizon."""
    expiry = 2 * 3600
    task = c19.make_task(COUNT, definition={"report_expiry_age": expiry})
    env = make_env(db_factory, clock, task.params, helper_defer_jobs=True, helper_retry_after_s=5)
    hc = c19.hpke_config(env.helper)

    def defer() -> str:
        init = c19.verify_init(task, hc, 1, clock.now())
        r = env.helper.post(
            f"/tasks/{env.tid}/aggregation_jobs",
            content=AggregationJobInitReq(0, b"", (), (init,)).encode(),
            headers={"Content-Type": c19.INIT_REQ, **AUTH},
        )
        assert (r.status_code, r.content) == (200, b"")
        return str(r.headers["location"]).split("?")[0]

    def deferred() -> int:
        return env.helper_agg.ds.count_rows("deferred_aggregation_jobs", task.params.task_id.value)

    job = defer()
    assert env.helper.delete(job, headers=AUTH).status_code == 204
    assert deferred() == 0
    env.advance(5)
    gone = env.helper.get(job + "?step=0", headers=AUTH)
    assert problem_type(gone) == "unrecognizedAggregationJob"

    defer()
    assert (collect_garbage(env.helper_agg).aggregation_jobs, deferred()) == (0, 1)
    env.advance(expiry + 3600)
    assert (collect_garbage(env.helper_agg).aggregation_jobs, deferred()) == (1, 0)
