"""Test doubles for the collector: a leader whose answers are real DAP-09 math.

`aggregate_shares` runs the VDAF for real: it shards measurements as a client would, prepares
them as leader and helper would (ping-pong, VDAF-08 §5.8), sums the output shares into the two
aggregate shares and seals each to the collector (DAP-09 §4.6.4). Nothing is precomputed.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass, field
from typing import Any

import httpx

from shared import hpke
from shared.dap.hpke_context import aggregate_share_aad, aggregate_share_info
from shared.dap.ids import BatchId, TaskId
from shared.dap.messages import (
    MEDIA_COLLECT_REQ,
    MEDIA_COLLECTION,
    BatchSelector,
    Collection,
    CollectionReq,
    HpkeCiphertext,
    HpkeConfig,
    Interval,
    PartialBatchSelector,
    QueryType,
    Role,
)
from shared.dap.problems import MEDIA_PROBLEM, ProblemType
from shared.vdaf import ping_pong
from shared.vdaf.prio3 import Prio3


def aggregate_shares(vdaf: Prio3, measurements: list[Any]) -> tuple[bytes, bytes]:
    """The leader's and helper's encoded aggregate shares over `measurements`."""
    verify_key = secrets.token_bytes(16)
    nonces = [secrets.token_bytes(16) for _ in measurements]
    rands = [secrets.token_bytes(vdaf.RAND_SIZE) for _ in measurements]
    sharded = vdaf.shard_batch(measurements, nonces, rands)
    public = [p for p, _ in sharded]
    leader_batch, outbound = ping_pong.leader_init(
        vdaf, verify_key, nonces, public, [s[1][0] for s in sharded]
    )
    assert all(m is not None for m in outbound)
    helper_batch, replies = ping_pong.helper_init(
        vdaf, verify_key, nonces, public, [s[1][1] for s in sharded], [m or b"" for m in outbound]
    )
    assert helper_batch.ok.all()
    finished = ping_pong.leader_continued(vdaf, leader_batch, replies)
    assert finished.all()
    leader = vdaf.encode_agg_share(vdaf.aggregate(leader_batch.out_shares))
    helper = vdaf.encode_agg_share(vdaf.aggregate(helper_batch.out_shares))
    return leader, helper


def seal_share(
    config: HpkeConfig, role: Role, task_id: TaskId, selector: BatchSelector, share: bytes
) -> HpkeCiphertext:
    aad = aggregate_share_aad(task_id, b"", selector)
    enc, payload = hpke.seal(config.public_key, aggregate_share_info(role), aad, share)
    return HpkeCiphertext(config.id, enc, payload)


def make_collection(
    task_id: TaskId,
    vdaf: Prio3,
    collector_config: HpkeConfig,
    measurements: list[Any],
    *,
    query_type: QueryType,
    aad_interval: Interval | None = None,
    batch_id: BatchId | None = None,
    interval: Interval | None = None,
) -> Collection:
    leader, helper = aggregate_shares(vdaf, measurements)
    if interval is None:
        interval = Interval(1_700_000_000 - 1_700_000_000 % 3600, 3600)
    if query_type == QueryType.TIME_INTERVAL:
        assert aad_interval is not None
        selector = BatchSelector.time_interval(aad_interval)
        part = PartialBatchSelector.time_interval()
    else:
        assert batch_id is not None
        selector = BatchSelector.fixed_size(batch_id)
        part = PartialBatchSelector.fixed_size(batch_id)
    return Collection(
        part,
        len(measurements),
        interval,
        seal_share(collector_config, Role.LEADER, task_id, selector, leader),
        seal_share(collector_config, Role.HELPER, task_id, selector, helper),
    )


def _problem(kind: ProblemType, status: int | None = None) -> httpx.Response:
    body = {"type": kind.urn, "title": kind.value, "status": status or kind.http_status}
    return httpx.Response(
        status or kind.http_status,
        content=json.dumps(body),
        headers={"Content-Type": MEDIA_PROBLEM},
    )


@dataclass
class FakeLeader:
    """An httpx handler playing a DAP-09 leader's collection endpoints (§4.6.1).

    `measurements` is what the batch holds; the job answers 202 `pending_polls` times (with
    `retry_after` if set), then the Collection. `failures` queues canned responses (e.g. 503)
    returned before anything else; `put_problem`/`poll_problem` make the leader refuse.
    """

    task_id: TaskId
    vdaf: Prio3
    auth_token: str
    measurements: list[Any]
    collector_config: HpkeConfig | None = None
    pending_polls: int = 0
    retry_after: str | None = None
    failures: list[httpx.Response] = field(default_factory=list)
    put_problem: ProblemType | None = None
    poll_problem: ProblemType | None = None
    batch_id: BatchId = field(default_factory=BatchId.random)
    requests: list[tuple[str, str]] = field(default_factory=list)
    jobs: dict[str, CollectionReq] = field(default_factory=dict)
    polls: int = 0

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append((request.method, request.url.path))
        if self.failures:
            return self.failures.pop(0)
        if request.headers.get("Authorization") != f"Bearer {self.auth_token}":
            return _problem(ProblemType.UNAUTHORIZED_REQUEST)
        parts = request.url.path.strip("/").split("/")[-4:]  # after any path prefix
        if len(parts) != 4 or parts[0] != "tasks" or parts[2] != "collection_jobs":
            return httpx.Response(404)
        if parts[1] != self.task_id.to_b64url():
            return _problem(ProblemType.UNRECOGNIZED_TASK)
        job = parts[3]
        if request.method == "PUT":
            assert request.headers["Content-Type"] == MEDIA_COLLECT_REQ
            if self.put_problem is not None:
                return _problem(self.put_problem)
            req = CollectionReq.decode(request.content)
            if job in self.jobs and self.jobs[job] != req:
                return httpx.Response(409)
            self.jobs[job] = req
            return httpx.Response(201)
        if request.method == "POST":
            if job not in self.jobs:
                return httpx.Response(404)
            self.polls += 1
            if self.poll_problem is not None:
                return _problem(self.poll_problem)
            if self.pending_polls > 0:
                self.pending_polls -= 1
                headers = {"Retry-After": self.retry_after} if self.retry_after else {}
                return httpx.Response(202, headers=headers)
            return self._collection(self.jobs[job])
        return httpx.Response(405)

    def _collection(self, req: CollectionReq) -> httpx.Response:
        assert self.collector_config is not None, "set collector_config once the task exists"
        query = req.query
        collection = make_collection(
            self.task_id,
            self.vdaf,
            self.collector_config,
            self.measurements,
            query_type=query.query_type,
            aad_interval=query.batch_interval,
            batch_id=self.batch_id if query.query_type == QueryType.FIXED_SIZE else None,
        )
        return httpx.Response(
            200, content=collection.encode(), headers={"Content-Type": MEDIA_COLLECTION}
        )
