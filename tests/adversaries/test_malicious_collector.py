"""A collector exceeding its query limits (DAP-09 §4.6.5; digest §7.4, §8).

- A batch can be queried with at most `max_batch_query_count` distinct aggregation
  parameters (`batchQueriedTooManyTimes`); re-collecting the identical batch returns the
  identical result, so it reveals nothing new.
- No two collected batches may overlap (`batchOverlap`): no differencing attack.
- Batches must be aligned to time_precision (`batchInvalid`), and below B the leader waits:
  the collector can poll forever, the helper is never asked.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from shared.dap.ids import CollectionJobId
from shared.dap.messages import MEDIA_COLLECT_REQ, CollectionReq, Interval, Query
from tests.adversaries.conftest import DbFactory
from tests.adversaries.harness import (
    BUCKET,
    NOW,
    PRECISION,
    Deployment,
    Task,
    collector_auth,
    deploy,
    problem_type,
)

B = 2


@pytest.fixture
def dep(tmp_path: Path, databases: DbFactory) -> Deployment:
    task = Task({"type": "Prio3Count"}, min_batch_size=B)
    return deploy(tmp_path, task, databases=databases)


def put(
    dep: Deployment,
    interval: Interval,
    agg_param: bytes = b"",
    headers: dict[str, str] | None = None,
) -> tuple[str, int, object]:
    job = CollectionJobId.random().to_b64url()
    response = dep.leader.put(
        f"/tasks/{dep.tid}/collection_jobs/{job}",
        content=CollectionReq(Query.time_interval(interval), agg_param).encode(),
        headers={
            "Content-Type": MEDIA_COLLECT_REQ,
            **(collector_auth() if headers is None else headers),
        },
    )
    kind = problem_type(response) if response.status_code >= 400 else None
    return job, response.status_code, kind


def test_identical_recollection_reveals_nothing_new(dep: Deployment) -> None:
    dep.upload_measurements([1, 0, 1])
    first = dep.collect(BUCKET)
    late = dep.upload(dep.seal_report(dep.shard(1)))  # not added to the collected batch
    assert problem_type(late) == "reportRejected"
    assert dep.collect(BUCKET) == first == (3, 2)


def test_overlapping_batches_are_refused(dep: Deployment) -> None:
    dep.upload_measurements([1, 1, 1, 0])
    assert dep.collect(BUCKET) == (4, 3)
    before = dep.stats(dep.helper)["batches_collected"]
    for interval in (
        Interval(NOW - PRECISION, 2 * PRECISION),  # contains the collected hour
        Interval(NOW - 5 * PRECISION, 10 * PRECISION),
    ):
        _, status, kind = put(dep, interval)
        assert (status, kind) == (400, "batchOverlap")
    dep.drive()
    assert dep.stats(dep.helper)["batches_collected"] == before  # the helper was not asked


def test_too_many_distinct_queries(dep: Deployment) -> None:
    dep.upload_measurements([1, 1])
    assert dep.collect(BUCKET) == (2, 2)
    _, status, kind = put(dep, BUCKET, agg_param=b"another parameter")
    assert (status, kind) == (400, "batchQueriedTooManyTimes")


def test_unaligned_batches_are_invalid(dep: Deployment) -> None:
    dep.upload_measurements([1, 1, 1])
    for interval in (
        Interval(NOW + 1, PRECISION),
        Interval(NOW, PRECISION - 1),
        Interval(NOW, PRECISION + 1),
        Interval(NOW, 0),
    ):
        _, status, kind = put(dep, interval)
        assert (status, kind) == (400, "batchInvalid")


def test_below_min_batch_size_the_leader_waits(dep: Deployment) -> None:
    """The collector cannot force a small batch out: polls stay 202, and the helper is never
    asked for its share (it has collected nothing, and still aggregates new reports)."""
    dep.upload_measurements([1])
    job, status, _ = put(dep, BUCKET)
    assert status == 201
    for _ in range(3):
        assert dep.poll(job, rounds=2).status_code == 202
    assert dep.stats(dep.helper)["batches_collected"] in (0, [], {})
    dep.upload_measurements([1])
    response = dep.poll(job)
    assert response.status_code == 200, response.text


def test_wrong_collector_token(dep: Deployment) -> None:
    dep.upload_measurements([1, 1])
    for headers in ({}, {"Authorization": "Bearer wrong-collector-token-0123"}):
        _, status, kind = put(dep, BUCKET, headers=headers)
        assert (status, kind) == (403, "unauthorizedRequest")
    job = dep.start_collection(BUCKET)
    response = dep.leader.post(f"/tasks/{dep.tid}/collection_jobs/{job}")
    assert problem_type(response) == "unauthorizedRequest"
    assert dep.collect(BUCKET) == (2, 2)  # the refused requests used nothing up
