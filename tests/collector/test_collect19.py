"""DAP-19 collection: the CollectionJobReq bytes, the -19 aggregate-share AAD and info (both
written out by hand from the digest, §7.1, §7.4), and the poller against a fake DAP-19 leader
(POST with Location, GET polling with Retry-After, empty 2xx = pending; digest §4, §2)."""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from services.collector.collect import (
    CollectionError,
    check_query,
    collection_job_req,
    decrypt_collection_job,
    parse_query,
    query_json,
)
from services.collector.poller import CollectionPoller
from services.collector.store import JobState, JobUpdate
from shared import hpke
from shared.b64url import b64url_encode
from shared.dap import messages19 as m19
from shared.dap.ids import TaskId
from shared.dap.messages import HpkeCiphertext, HpkeConfig, Url
from shared.dap.task import CollectorTask
from tests.collector.helpers import AUTH, LEADER, START, JobRig, provision

TP = 3600
#: Field64's modulus (VDAF-20 §6.1: 2^32 * 4294967295 + 1), for Prio3Count shares by hand.
P64 = 0xFFFFFFFF00000001


def _config(batch_mode: int) -> bytes:
    return m19.TaskConfiguration(
        b"t", Url(LEADER.encode()), Url(b"https://helper.test"), TP, 3, batch_mode, b"", 1, b""
    ).encode()


CONFIG = _config(1)
LEADER_INFO = bytes.fromhex("6461702d3139206167677265676174652073686172650200")
HELPER_INFO = bytes.fromhex("6461702d3139206167677265676174652073686172650300")


def _task(**kw: Any) -> CollectorTask:
    return CollectorTask.model_validate(
        {
            "task_id": TaskId.random().to_b64url(),
            "leader_endpoint": LEADER,
            "query_type": "time_interval",
            "vdaf": {"version": "VDAF-20", "type": "Prio3Count"},
            "dap": "dap-19",
            "task_configuration": b64url_encode(CONFIG),
            "collector_auth_token": AUTH,
            "min_batch_size": 3,
            "time_precision": TP,
            **kw,
        }
    )


def _request_bytes(start_s: int, duration_s: int) -> bytes:
    # digest §7.1: 01 0010 <start u64> <duration u64> 00000000 0000, times in units.
    return (
        bytes.fromhex("010010")
        + (start_s // TP).to_bytes(8, "big")
        + (duration_s // TP).to_bytes(8, "big")
        + bytes.fromhex("000000000000")
    )


def test_collection_job_req_bytes() -> None:
    task = _task()
    query = parse_query({"type": "time_interval", "start": START, "duration": 7200})
    check_query(task, query)
    assert collection_job_req(task, query).encode() == _request_bytes(START, 7200)
    selected = _task(query_type="fixed_size", task_configuration=b64url_encode(_config(2)))
    current = collection_job_req(selected, parse_query({"type": "current_batch"}))
    assert current.encode() == bytes.fromhex("020000000000000000")


def test_queries_a_dap_19_task_cannot_take() -> None:
    selected = _task(query_type="fixed_size", task_configuration=b64url_encode(_config(2)))
    by_id = parse_query({"type": "fixed_size", "batch_id": TaskId.random().to_b64url()})
    with pytest.raises(CollectionError, match="next batch only"):
        check_query(selected, by_id)
    with pytest.raises(CollectionError, match="multiples"):
        check_query(_task(), parse_query({"type": "time_interval", "start": 1, "duration": TP}))


def _sealed(
    config: HpkeConfig, task: CollectorTask, request: bytes, shares: tuple[int, int], count: int
) -> bytes:
    """A CollectionJobResp sealed by hand: AAD task_id || TaskConfiguration || request."""
    aad = task.id.value + CONFIG + request
    out = count.to_bytes(8, "big") + (START // TP).to_bytes(8, "big") + (2).to_bytes(8, "big")
    for info, share in ((LEADER_INFO, shares[0]), (HELPER_INFO, shares[1])):
        enc, payload = hpke.seal(config.public_key, info, aad, share.to_bytes(8, "little"))
        out += HpkeCiphertext(config.id, enc, payload).encode()
    return out


def test_decrypt_collection_job_by_hand() -> None:
    task = _task()
    keypair = hpke.generate_keypair(5)
    config = HpkeConfig(5, keypair.kem_id, keypair.kdf_id, keypair.aead_id, keypair.public_key)
    request = _request_bytes(START, 7200)
    # Count shares that sum to 3 mod p (Field64, little-endian: VDAF-20 §6.1.1).
    body = _sealed(config, task, request, (10, P64 - 7), 3)
    result = decrypt_collection_job(
        task, keypair, m19.CollectionJobReq.decode(request), m19.CollectionJobResp.decode(body)
    )
    assert (result.aggregate, result.report_count, result.batch_id) == (3, 3, None)
    assert (result.interval.start, result.interval.duration) == (START, 2 * TP)  # seconds
    # The AAD binds the request: an answer to another interval does not decrypt.
    other = m19.CollectionJobReq.decode(_request_bytes(START + TP, 7200))
    with pytest.raises(CollectionError, match="does not decrypt"):
        decrypt_collection_job(task, keypair, other, m19.CollectionJobResp.decode(body))


@dataclass
class FakeLeader19:
    """A DAP-19 leader's collection endpoints: POST creates (Location, empty body), GET answers
    empty 2xx `pending` times (with Retry-After), then the sealed CollectionJobResp; DELETE
    answers 200 (`on_delete` sees it first). Every request must carry `announced` as its
    DAP-Taskprov header (None: no such header)."""

    task: CollectorTask
    config: HpkeConfig | None = None
    pending: int = 0
    retry_after: str | None = None
    location: str = "/dap/tasks/{task}/collection_jobs/job-1"
    requests: list[tuple[str, str]] = field(default_factory=list)
    posted: list[bytes] = field(default_factory=list)
    announced: str | None = None
    on_delete: Callable[[], None] | None = None
    #: POST answers with the result at once (DAP-19 §4.6.1 allows it), still at `location`.
    immediate: bool = False

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append((request.method, request.url.path))
        assert request.headers["Authorization"] == f"Bearer {AUTH}"
        assert request.headers.get("DAP-Taskprov") == self.announced
        jobs = f"/dap/tasks/{self.task.task_id}/collection_jobs"
        if request.method == "DELETE":
            assert request.url.path == f"{jobs}/job-1"
            if self.on_delete is not None:
                self.on_delete()
            return httpx.Response(200)
        if request.method == "POST":
            assert request.url.path == jobs
            assert (
                request.headers["Content-Type"] == "application/ppm-dap;message=collection-job-req"
            )
            self.posted.append(request.content)
            location = {"Location": self.location.format(task=self.task.task_id)}
            if self.immediate:
                return self._result(location)
            return httpx.Response(200, headers=location)
        assert request.method == "GET" and request.url.path == f"{jobs}/job-1"
        if self.pending:
            self.pending -= 1
            headers = {"Retry-After": self.retry_after} if self.retry_after else {}
            return httpx.Response(200, headers=headers)
        return self._result({})

    def _result(self, headers: dict[str, str]) -> httpx.Response:
        assert self.config is not None
        body = _sealed(self.config, self.task, self.posted[-1], (1, 1), 2)
        media = {"Content-Type": "application/ppm-dap;message=collection-job-resp"}
        return httpx.Response(200, content=body, headers={**headers, **media})


class Rig(JobRig):
    """One DAP-19 task and job of `FakeLeader19`; pollers poll every second."""

    leader: FakeLeader19

    def __init__(self, tmp_path: Path, task: CollectorTask | None = None, **leader: Any) -> None:
        super().__init__(tmp_path)
        self.task = task or _task()
        self.leader = FakeLeader19(self.task, **leader)
        self.leader.config = provision(self.store, self.task, self.ms)
        self.create_job(
            self.task.task_id, {"type": "time_interval", "start": START, "duration": 7200}
        )

    def poller(self, owner: str = "p1", **config: Any) -> CollectionPoller:
        return super().poller(owner, **{"poll_interval": 1.0, **config})


def test_post_then_get_polling_with_retry_after(tmp_path: Path) -> None:
    rig = Rig(tmp_path, pending=1, retry_after="5")
    poller = rig.poller()
    assert rig.run(poller) == 1
    jobs = f"/dap/tasks/{rig.task.task_id}/collection_jobs"
    assert rig.leader.requests == [("POST", jobs), ("GET", f"{jobs}/job-1")]
    assert rig.leader.posted == [_request_bytes(START, 7200)]
    job = rig.job()
    assert job.state is JobState.POLLING and job.next_attempt_ms == rig.ms + 5000
    rig.clock.advance(5)
    assert rig.run(poller) == 1
    job = rig.job()
    assert job.state is JobState.COMPLETE and json.loads(job.result or "") == 2
    assert (job.interval_start, job.interval_duration) == (START, 7200)
    # No second POST; the ended job is then deleted at the leader (DAP-19 §4.6.1).
    assert rig.leader.requests[-2:] == [("GET", f"{jobs}/job-1"), ("DELETE", f"{jobs}/job-1")]


def test_a_restarted_collector_polls_the_stored_location(tmp_path: Path) -> None:
    rig = Rig(tmp_path, pending=1)
    assert rig.run(rig.poller()) == 1
    assert rig.job().location == f"{LEADER}/tasks/{rig.task.task_id}/collection_jobs/job-1"
    rig.clock.advance(5)
    assert rig.run(rig.poller()) == 1  # a new process: the Location comes from the store
    assert rig.job().state is JobState.COMPLETE
    assert [m for m, _ in rig.leader.requests] == ["POST", "GET", "GET", "DELETE"]


def test_a_polling_job_without_a_location_posts_the_identical_request_again(
    tmp_path: Path,
) -> None:
    rig = Rig(tmp_path)
    # As a collector from before the location column left a job it had created.
    assert rig.store.acquire_jobs("older", rig.ms, 1000, 1)
    rig.store.release_job(rig.job_id, "older", JobUpdate(JobState.POLLING, 0, 0, rig.ms), rig.ms)
    assert rig.job().state is JobState.POLLING and rig.job().location is None
    assert rig.run(rig.poller()) == 1
    assert rig.job().state is JobState.COMPLETE
    assert [m for m, _ in rig.leader.requests] == ["POST", "GET", "DELETE"]


@pytest.mark.parametrize(
    "location",
    ["https://elsewhere.test/dap/tasks/{task}/collection_jobs/job-1", "/dap/tasks/{task}/other/x"],
)
def test_a_location_outside_the_task_fails_the_job(tmp_path: Path, location: str) -> None:
    rig = Rig(tmp_path, location=location)
    assert rig.run(rig.poller()) == 1
    job = rig.job()
    assert job.state is JobState.FAILED and "leader named the job at" in (job.error or "")
    assert [m for m, _ in rig.leader.requests] == ["POST"]  # the credential went nowhere else


def test_an_ended_job_is_deleted_after_its_outcome_is_stored(tmp_path: Path) -> None:
    """DAP-19 §4.6.1 "Collection Job Deletion": once the result is in the store (so a crash
    after the DELETE loses nothing), the collector tells the leader it may drop the job; a
    failed job with a Location is deleted too, and neither is asked for again."""
    rig = Rig(tmp_path)
    seen: list[JobState] = []
    rig.leader.on_delete = lambda: seen.append(rig.job().state)
    poller = rig.poller()
    assert rig.run(poller) == 1
    assert seen == [JobState.COMPLETE]
    rig.clock.advance(60)
    assert rig.run(poller) == 0
    assert [m for m, _ in rig.leader.requests] == ["POST", "GET", "DELETE"]


def test_a_job_answered_at_once_is_deleted_at_the_leader_too(tmp_path: Path) -> None:
    """A leader may answer the creating POST with the result; the job still exists at its
    Location until the collector, having stored the outcome, deletes it."""
    rig = Rig(tmp_path, immediate=True)
    seen: list[JobState] = []
    rig.leader.on_delete = lambda: seen.append(rig.job().state)
    assert rig.run(rig.poller()) == 1
    job = rig.job()
    assert job.state is JobState.COMPLETE and json.loads(job.result or "") == 2
    assert seen == [JobState.COMPLETE]
    jobs = f"/dap/tasks/{rig.task.task_id}/collection_jobs"
    assert rig.leader.requests == [("POST", jobs), ("DELETE", f"{jobs}/job-1")]


@dataclass
class RefusingLeader19(FakeLeader19):
    """Creates the job, then fails it on the first GET with a problem document."""

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.method == "GET":
            self.requests.append((request.method, request.url.path))
            problem = {"type": "urn:ietf:params:ppm:dap:error:batchOverlap"}
            return httpx.Response(400, json=problem)
        return super().__call__(request)


def test_a_failed_job_is_deleted_at_the_leader(tmp_path: Path) -> None:
    rig = Rig(tmp_path)
    rig.leader = RefusingLeader19(rig.task)
    assert rig.run(rig.poller()) == 1
    assert rig.job().state is JobState.FAILED
    assert [m for m, _ in rig.leader.requests] == ["POST", "GET", "DELETE"]


def test_a_taskprov_task_announces_itself_on_every_request(tmp_path: Path) -> None:
    """Digest §11: the collector's requests carry the task's DAP-Taskprov header, the RFC 9651
    Byte Sequence of its configuration (padded base64)."""
    label = hashlib.sha256(b"dap-taskprov task id").digest()
    task_id = TaskId(hashlib.sha256(label + CONFIG).digest())
    task = _task(task_id=task_id.to_b64url(), taskprov=True)
    announced = ":" + base64.b64encode(CONFIG).decode() + ":"
    rig = Rig(tmp_path, task, announced=announced)
    assert rig.run(rig.poller()) == 1
    assert rig.job().state is JobState.COMPLETE
    assert [m for m, _ in rig.leader.requests] == ["POST", "GET", "DELETE"]
    with pytest.raises(ValueError, match="taskprov derives"):
        _task(taskprov=True)  # a random id is no taskprov task's


def test_the_completed_job_of_an_identical_query_is_found(tmp_path: Path) -> None:
    """After the leader's job is deleted, the collector answers an identical DAP-19 query from
    the job it completed (`POST /collections` answers 200 with it): only a completed job with
    exactly that query counts."""
    rig = Rig(tmp_path)
    query = query_json(parse_query({"type": "time_interval", "start": START, "duration": 7200}))
    other = query_json(parse_query({"type": "time_interval", "start": START, "duration": 3600}))
    assert rig.store.completed_job(rig.task.task_id, query) is None  # still new
    assert rig.run(rig.poller()) == 1
    assert rig.job().state is JobState.COMPLETE
    assert rig.store.completed_job(rig.task.task_id, query) == rig.job_id
    assert rig.store.completed_job(rig.task.task_id, other) is None
    assert rig.store.completed_job(TaskId.random().to_b64url(), query) is None
