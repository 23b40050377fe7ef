"""A leader and a helper, each on its own store, the leader's drivers talking to the helper over
httpx: reports sharded and sealed like a real client, collected through the leader's API, both
aggregate shares opened with the collector's key and unsharded to exactly the true aggregate."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from services.aggregator.drivers.aggregation import create_jobs, delete_expired_tasks
from services.common.clock import TestClock
from services.common.db import TransientDbError
from shared.dap.ids import BatchId
from shared.dap.messages import (
    MEDIA_COLLECT_REQ,
    BatchSelector,
    Collection,
    CollectionReq,
    FixedSizeQuery,
    Interval,
    Query,
    QueryType,
    Role,
)
from shared.dap.problems import ProblemType
from tests.aggregator import helpers
from tests.aggregator.env import Env, collector_auth, make_env, only_job
from tests.aggregator.helpers import VDAFS, TaskParams

NOW = 1_700_006_400
TP = 3600


def measurement(vdaf: str, rng: random.Random) -> Any:
    if vdaf == "count":
        return rng.randrange(2)
    if vdaf == "sum":
        return rng.randrange(256)
    if vdaf == "sumvec":
        return [rng.randrange(16) for _ in range(4)]
    return rng.randrange(5)


def expected(vdaf: str, measurements: list[Any]) -> Any:
    if vdaf in ("count", "sum"):
        return sum(measurements)
    if vdaf == "sumvec":
        return [sum(col) for col in zip(*measurements, strict=True)]
    return [sum(1 for m in measurements if m == b) for b in range(5)]


def unshard(env: Env, collection: Collection, selector: BatchSelector) -> Any:
    leader = helpers.decrypt_agg_share(
        env.params, Role.LEADER, selector, collection.leader_encrypted_agg_share
    )
    helper = helpers.decrypt_agg_share(
        env.params, Role.HELPER, selector, collection.helper_encrypted_agg_share
    )
    return env.params.prio3.unshard([leader, helper], collection.report_count)


def selector_for(query: Query, collection: Collection) -> BatchSelector:
    if query.query_type == QueryType.TIME_INTERVAL:
        assert query.batch_interval is not None
        return BatchSelector.time_interval(query.batch_interval)
    batch_id = collection.part_batch_selector.batch_id
    assert batch_id is not None
    return BatchSelector.fixed_size(batch_id)


@pytest.mark.parametrize("query_type", ["time_interval", "fixed_size"])
@pytest.mark.parametrize("vdaf", list(VDAFS))
def test_end_to_end(db_factory: Any, clock: TestClock, vdaf: str, query_type: str) -> None:
    n = 23
    fixed = query_type == "fixed_size"
    params = TaskParams(
        vdaf=dict(VDAFS[vdaf]),
        query_type=query_type,
        min_batch_size=n,
        max_batch_size=n if fixed else None,
    )
    env = make_env(db_factory, clock, params, max_job_size=7)
    rng = random.Random(f"{vdaf}-{query_type}")
    measurements = [measurement(vdaf, rng) for _ in range(n)]
    reports = [env.report(m, NOW + rng.randrange(200)) for m in measurements]
    for report in reports:
        assert env.upload(report).status_code == 201
    # A replayed report is refused and counted once.
    assert env.upload(reports[0]).status_code == 400
    # A report from an older bucket is not part of a time_interval batch.
    if not fixed:
        assert env.upload(env.report(measurements[0], NOW - TP)).status_code == 201

    query = (
        Query.fixed_size(FixedSizeQuery.current_batch())
        if fixed
        else Query.time_interval(Interval(NOW, TP))
    )
    collection = env.collect(query)
    assert collection.report_count == n
    assert collection.interval == Interval(NOW, TP)
    assert unshard(env, collection, selector_for(query, collection)) == expected(vdaf, measurements)


def test_time_interval_recollection_after_late_report(db_factory: Any, clock: TestClock) -> None:
    """Interop case: a late report into a collected interval is refused, and collecting the same
    interval again gives the same result."""
    env = make_env(db_factory, clock, TaskParams(min_batch_size=3))
    for m in (1, 1, 0, 1):
        assert env.upload(env.report(m, NOW + 1)).status_code == 201
    query = Query.time_interval(Interval(NOW, TP))
    first = env.collect(query)
    late = env.upload(env.report(1, NOW + 2))
    assert late.status_code == 400
    assert late.json()["type"] == ProblemType.REPORT_REJECTED.urn
    second = env.collect(query)
    selector = BatchSelector.time_interval(Interval(NOW, TP))
    assert first.report_count == second.report_count == 4
    assert unshard(env, first, selector) == unshard(env, second, selector) == 3


def test_fixed_size_current_batch_picks_distinct_batches(db_factory: Any, clock: TestClock) -> None:
    params = TaskParams(query_type="fixed_size", min_batch_size=5, max_batch_size=6)
    env = make_env(db_factory, clock, params, max_job_size=4)
    for _ in range(12):
        assert env.upload(env.report(1, NOW)).status_code == 201
    query = Query.fixed_size(FixedSizeQuery.current_batch())
    first = env.collect(query)
    second = env.collect(query)
    assert first.part_batch_selector.batch_id != second.part_batch_selector.batch_id
    assert first.report_count == second.report_count == 6
    batch_id = first.part_batch_selector.batch_id
    assert batch_id is not None
    again = env.collect(Query.fixed_size(FixedSizeQuery.by_batch_id(batch_id)))
    assert again.report_count == 6
    assert unshard(env, again, BatchSelector.fixed_size(batch_id)) == 6
    unknown = env.leader.put(
        f"/tasks/{env.tid}/collection_jobs/{'A' * 22}",
        content=CollectionReq(
            Query.fixed_size(FixedSizeQuery.by_batch_id(BatchId.random())), b""
        ).encode(),
        headers={"Content-Type": MEDIA_COLLECT_REQ, **collector_auth()},
    )
    assert unknown.json()["type"] == ProblemType.BATCH_INVALID.urn


class FlakyHelper:
    """Fails the first `failures` requests like an unreachable (or 503) helper."""

    def __init__(self, inner: Any, failures: int, status: int | None = None) -> None:
        self.inner = inner
        self.failures = failures
        self.status = status
        self.calls = 0

    def _maybe_fail(self, method: str, url: str) -> httpx.Response | None:
        self.calls += 1
        if self.calls > self.failures:
            return None
        if self.status is None:
            raise httpx.ConnectError("helper down", request=httpx.Request(method, url))
        return httpx.Response(self.status, request=httpx.Request(method, url))

    def put(self, url: str, **kw: Any) -> httpx.Response:
        return self._maybe_fail("PUT", url) or self.inner.put(url, **kw)

    def post(self, url: str, **kw: Any) -> httpx.Response:
        return self._maybe_fail("POST", url) or self.inner.post(url, **kw)

    def delete(self, url: str, **kw: Any) -> httpx.Response:
        return self._maybe_fail("DELETE", url) or self.inner.delete(url, **kw)


@pytest.mark.parametrize("status", [None, 503])
def test_driver_retries_when_helper_is_down(
    db_factory: Any, clock: TestClock, status: int | None
) -> None:
    env = make_env(db_factory, clock, TaskParams(min_batch_size=3))
    flaky = FlakyHelper(env.helper, failures=2, status=status)
    env.runner.aggregation.http = flaky  # type: ignore[assignment]
    env.runner.collection.http = flaky  # type: ignore[assignment]
    for m in (1, 0, 1):
        assert env.upload(env.report(m, NOW)).status_code == 201
    env.drive()
    assert flaky.calls == 1
    # Backoff: nothing happens until the retry time.
    env.drive()
    assert flaky.calls == 1
    clock.advance(60)
    collection = env.collect(Query.time_interval(Interval(NOW, TP)))
    assert flaky.calls >= 3
    assert unshard(env, collection, BatchSelector.time_interval(Interval(NOW, TP))) == 2


def _job_whose_finish_fails(
    db_factory: Any, clock: TestClock, monkeypatch: pytest.MonkeyPatch, error: Exception
) -> tuple[Env, Callable[[], None]]:
    """Four reports (three 1s) in one leader job whose finishing transaction, after the helper
    has answered, raises `error` until the returned function puts the real one back."""
    env = make_env(db_factory, clock, TaskParams(min_batch_size=4))
    for m in (1, 1, 1, 0):
        assert env.upload(env.report(m, NOW)).status_code == 201
    ds = env.leader_agg.ds
    real = ds.finish_leader_job

    def fail(*args: Any, **kw: Any) -> Any:
        raise error

    monkeypatch.setattr(ds, "finish_leader_job", fail)
    create_jobs(env.leader_agg)
    return env, lambda: monkeypatch.setattr(ds, "finish_leader_job", real)


def _assert_counted_once(env: Env) -> None:
    collection = env.collect(Query.time_interval(Interval(NOW, TP)))
    assert collection.report_count == 4
    assert unshard(env, collection, BatchSelector.time_interval(Interval(NOW, TP))) == 3


def test_crash_between_helper_answer_and_commit_counts_once(
    db_factory: Any, clock: TestClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The leader dies after the helper aggregated the job but before its own commit: the
    re-sent request gets the helper's stored answer and every report counts exactly once."""
    env, restore = _job_whose_finish_fails(
        db_factory, clock, monkeypatch, RuntimeError("process killed")
    )
    with pytest.raises(RuntimeError):
        env.runner.aggregation.run_once()
    restore()
    # Until the lease expires no other worker takes the job.
    assert env.runner.aggregation.run_once() == 0
    clock.advance(env.leader_agg.settings.lease_duration_s + 1)
    _assert_counted_once(env)


def test_store_failure_after_the_helper_answered_retries_at_once_and_counts_once(
    db_factory: Any, clock: TestClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The leader's finishing transaction fails past its retries (PostgreSQL's serialization
    conflicts under load): the job is due again at once, not after its lease, the failure is
    not one of its attempts, and the re-sent request counts every report exactly once."""
    env, restore = _job_whose_finish_fails(
        db_factory, clock, monkeypatch, TransientDbError("could not serialize access")
    )
    assert env.runner.aggregation.run_once() == 1
    job_id = only_job(env, "aggregation_jobs")
    row = env.leader_agg.ds.db.run(
        "job",
        lambda tx: tx.query_one(
            "SELECT state, lease_expiry, lease_token, lease_attempts FROM aggregation_jobs"
            " WHERE task_id = :t AND job_id = :j",
            {"t": env.params.task_id.value, "j": job_id},
        ),
    )
    assert row is not None
    assert (row["state"], row["lease_token"], row["lease_attempts"]) == ("in_progress", None, 0)
    assert row["lease_expiry"] <= clock.now()
    restore()
    # Due again on the same clock: no waiting out the lease.
    assert env.runner.aggregation.run_once() == 1
    _assert_counted_once(env)


def test_store_failure_of_a_collection_step_retries_at_once(
    db_factory: Any, clock: TestClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The collection driver's store fails past its retries: the collection job is due again
    on the same clock, that was not one of its attempts, and it then collects every report."""
    env = make_env(db_factory, clock, TaskParams(min_batch_size=4))
    for m in (1, 1, 1, 0):
        assert env.upload(env.report(m, NOW)).status_code == 201
    env.drive()
    ds = env.leader_agg.ds
    real = ds.start_collection

    def conflict(*args: Any, **kw: Any) -> Any:
        raise TransientDbError("could not serialize access")

    monkeypatch.setattr(ds, "start_collection", conflict)
    job = env.start_collection(Query.time_interval(Interval(NOW, TP)))
    assert env.runner.collection.run_once() == 1
    row = ds.db.run(
        "job",
        lambda tx: tx.query_one(
            "SELECT lease_expiry, lease_token, lease_attempts FROM collection_jobs"
            " WHERE task_id = :t",
            {"t": env.params.task_id.value},
        ),
    )
    assert row is not None
    assert (row["lease_token"], row["lease_attempts"]) == (None, 0)
    assert row["lease_expiry"] <= clock.now()
    monkeypatch.setattr(ds, "start_collection", real)
    assert env.runner.collection.run_once() == 1
    response = env.poll(job)
    assert response.status_code == 200, response.text
    collection = Collection.decode(response.content)
    assert collection.report_count == 4
    assert unshard(env, collection, BatchSelector.time_interval(Interval(NOW, TP))) == 3


def test_helper_rejection_abandons_job(db_factory: Any, clock: TestClock) -> None:
    env = make_env(db_factory, clock, TaskParams(min_batch_size=1))
    flaky = FlakyHelper(env.helper, failures=1, status=400)
    env.runner.aggregation.http = flaky  # type: ignore[assignment]
    assert env.upload(env.report(1, NOW)).status_code == 201
    env.drive()
    only_job(env, "aggregation_jobs")
    stats = helpers.task_stats(env.leader, env.tid)
    assert stats["report_aggregations"] == {"failed": 1}
    assert stats["aggregation_jobs"] == {"abandoned": 1}
    # The abandoned job's report is not counted; the next report is.
    assert env.upload(env.report(1, NOW)).status_code == 201
    collection = env.collect(Query.time_interval(Interval(NOW, TP)))
    assert collection.report_count == 1


def test_job_abandoned_after_max_attempts(db_factory: Any, clock: TestClock) -> None:
    env = make_env(db_factory, clock, TaskParams(min_batch_size=1), max_job_attempts=3)
    down = FlakyHelper(env.helper, failures=10**6)
    env.runner.aggregation.http = down  # type: ignore[assignment]
    assert env.upload(env.report(1, NOW)).status_code == 201
    for _ in range(5):
        env.drive()
        clock.advance(120)
    # Three attempts, then the job is given up (no DELETE: the helper is unreachable).
    assert down.calls == 3
    only_job(env, "aggregation_jobs")
    stats = helpers.task_stats(env.leader, env.tid)
    assert stats["report_aggregations"] == {"failed": 1}
    assert stats["rejections"]["aggregation"] == {"report_dropped": 1}


def test_report_too_early_for_the_helper_is_retried(db_factory: Any, clock: TestClock) -> None:
    """The helper's clock allows less skew than the leader's: the report is offered again once
    it is no longer early, and then counted (DAP-09 §4.5.1.1)."""
    env = make_env(db_factory, clock, TaskParams(min_batch_size=2), too_early_retry_s=60)
    helper_agg = env.helper_agg
    helper_agg.settings = helper_agg.settings.model_copy(update={"clock_skew_s": 0})
    assert env.upload(env.report(1, NOW)).status_code == 201
    assert env.upload(env.report(1, NOW + 100)).status_code == 201
    env.drive()
    stats = helpers.task_stats(env.leader, env.tid)
    assert stats["report_aggregations"] == {"failed": 1, "finished": 1}
    assert stats["rejections"]["aggregation"] == {"report_too_early": 1}
    # Not yet: the retry waits `too_early_retry_s`.
    env.drive()
    assert env.leader_agg.ds.unaggregated_reports(env.params.task_id.value) == 1
    clock.advance(120)
    collection = env.collect(Query.time_interval(Interval(NOW, TP)))
    assert collection.report_count == 2
    assert unshard(env, collection, BatchSelector.time_interval(Interval(NOW, TP))) == 2


def test_expired_tasks_are_deleted_after_retention(db_factory: Any, clock: TestClock) -> None:
    env = make_env(
        db_factory, clock, TaskParams(task_expiration=NOW + 100), expired_task_retention_s=1000
    )
    assert env.upload(env.report(1, NOW)).status_code == 201
    assert delete_expired_tasks(env.leader_agg) == 0
    clock.advance(100 + 1000)
    assert delete_expired_tasks(env.leader_agg) == 0
    clock.advance(1)
    assert delete_expired_tasks(env.leader_agg) == 1
    assert delete_expired_tasks(env.helper_agg) == 1
    assert env.leader_agg.ds.count_rows("client_reports", env.params.task_id.value) == 0
    response = env.upload(env.report(1, NOW))
    assert response.json()["type"] == ProblemType.UNRECOGNIZED_TASK.urn
