"""The collection poller against a fake leader with real DAP-09 answers (DAP-09 §4.6.1)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from services.collector.store import JobState
from shared.dap.problems import ProblemType
from tests.collector.fakes import FakeLeader
from tests.collector.helpers import AUTH, START, JobRig, make_task, provision

HISTOGRAM = [0, 1, 3, 3, 2, 3, 0, 3]
EXPECTED = [2, 1, 1, 4]


class Rig(JobRig):
    """One task and job of the DAP-09 fake leader."""

    leader: FakeLeader

    def __init__(self, tmp_path: Path, *, query: dict[str, Any] | None = None, **leader: Any):
        super().__init__(tmp_path)
        query = query or {"type": "time_interval", "start": START, "duration": 3600}
        self.task = make_task(
            query_type="fixed_size" if query["type"] != "time_interval" else "time_interval"
        )
        config = provision(self.store, self.task, self.ms)
        vdaf = self.task.vdaf.instance()
        self.leader = FakeLeader(self.task.id, vdaf, AUTH, HISTOGRAM, config, **leader)
        self.create_job(self.task.task_id, query)


def test_pending_then_complete_honoring_retry_after(tmp_path: Path) -> None:
    rig = Rig(tmp_path, pending_polls=2, retry_after="5")
    poller = rig.poller()
    assert rig.run(poller) == 1
    assert [m for m, _ in rig.leader.requests] == ["PUT", "POST"]
    job = rig.job()
    assert job.state is JobState.POLLING and job.next_attempt_ms == rig.ms + 5000
    assert rig.run(poller) == 0  # not due yet
    rig.clock.advance(5)
    assert rig.run(poller) == 1
    rig.clock.advance(5)
    assert rig.run(poller) == 1
    job = rig.job()
    assert job.state is JobState.COMPLETE
    assert json.loads(job.result or "") == EXPECTED
    assert job.report_count == len(HISTOGRAM)
    assert (job.interval_start, job.interval_duration) == (START - START % 3600, 3600)
    assert rig.leader.polls == 3
    assert rig.run(poller) == 0  # complete jobs are left alone


def test_exponential_backoff_without_retry_after(tmp_path: Path) -> None:
    rig = Rig(tmp_path, pending_polls=10)
    poller = rig.poller(poll_interval=1.0, max_backoff=4.0)
    delays = []
    for _ in range(5):
        before = rig.ms
        assert rig.run(poller) == 1
        delays.append(rig.job().next_attempt_ms - before)
        rig.clock.advance(10)
    assert delays == [1000, 2000, 4000, 4000, 4000]


def test_transient_errors_are_retried_then_give_up(tmp_path: Path) -> None:
    rig = Rig(
        tmp_path, failures=[httpx.Response(503), httpx.Response(502, headers={"Retry-After": "7"})]
    )
    poller = rig.poller(poll_interval=1.0)
    rig.run(poller)
    job = rig.job()
    assert (job.state, job.failures, job.next_attempt_ms - rig.ms) == (JobState.NEW, 1, 1000)
    rig.clock.advance(1)
    rig.run(poller)
    job = rig.job()
    assert (job.failures, job.next_attempt_ms - rig.ms) == (2, 7000)
    rig.clock.advance(7)
    rig.run(poller)
    assert rig.job().state is JobState.COMPLETE

    flaky = Rig(tmp_path / "b", failures=[httpx.Response(500)] * 3)
    poller = flaky.poller(max_transient_failures=3, poll_interval=0.001)
    for _ in range(3):
        flaky.run(poller)
        flaky.clock.advance(1)
    job = flaky.job()
    assert job.state is JobState.FAILED and "gave up after 3" in (job.error or "")


@pytest.mark.parametrize(
    ("setup", "expected"),
    [
        (lambda leader: setattr(leader, "put_problem", ProblemType.BATCH_INVALID), "batchInvalid"),
        (
            lambda leader: setattr(leader, "poll_problem", ProblemType.INVALID_BATCH_SIZE),
            "invalidBatchSize",
        ),
        (lambda leader: setattr(leader, "auth_token", "x" * 32), "unauthorizedRequest"),
        (lambda leader: leader.failures.append(httpx.Response(404)), "HTTP 404"),
    ],
)
def test_permanent_leader_errors_fail_the_job(
    tmp_path: Path, setup: Callable[[FakeLeader], None], expected: str
) -> None:
    rig = Rig(tmp_path)
    setup(rig.leader)
    rig.run(rig.poller())
    job = rig.job()
    assert job.state is JobState.FAILED and expected in (job.error or "")


def test_a_collection_that_does_not_decrypt_fails_the_job(tmp_path: Path) -> None:
    rig = Rig(tmp_path)
    rig.leader.collector_config = provision(rig.store, make_task(), rig.ms)  # some other key
    rig.run(rig.poller())
    job = rig.job()
    assert job.state is JobState.FAILED and "does not decrypt" in (job.error or "")


def test_fixed_size_current_batch_records_the_batch_id(tmp_path: Path) -> None:
    rig = Rig(tmp_path, query={"type": "current_batch"})
    rig.run(rig.poller())
    job = rig.job()
    assert job.state is JobState.COMPLETE
    assert job.batch_id == rig.leader.batch_id.to_b64url()
    assert json.loads(job.result or "") == EXPECTED


def test_two_pollers_never_drive_one_job_at_once(tmp_path: Path) -> None:
    # Retry-After keeps the job from becoming due again within this test.
    rig = Rig(tmp_path, pending_polls=1, retry_after="5")
    a, b = rig.poller("a"), rig.poller("b")

    async def both() -> list[int]:
        return list(await asyncio.gather(a.run_once(), b.run_once()))

    assert sorted(asyncio.run(both())) == [0, 1]
    assert [m for m, _ in rig.leader.requests].count("PUT") == 1


def test_restart_resumes_and_takes_over_expired_leases(tmp_path: Path) -> None:
    rig = Rig(tmp_path, pending_polls=1, retry_after="0")
    # A collector that leased the job and died: nobody else may touch it until the lease ends.
    assert [j.job_id for j in rig.store.acquire_jobs("dead", rig.ms, 60_000, 10)] == [rig.job_id]
    fresh = rig.poller("fresh", lease_seconds=60)
    assert rig.run(fresh) == 0
    rig.clock.advance(61)
    assert rig.run(fresh) == 1  # PUT + pending poll
    rig.clock.advance(1)  # Retry-After: 0 is floored at poll_interval
    # Restart again mid-poll: a new process (new owner) finishes from the stored state.
    assert rig.run(rig.poller("after-restart")) == 1
    assert rig.job().state is JobState.COMPLETE
    assert [m for m, _ in rig.leader.requests] == ["PUT", "POST", "POST"]
