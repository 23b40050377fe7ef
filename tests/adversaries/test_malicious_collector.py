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
from tests.adversaries import harness
from tests.adversaries.conftest import DbFactory

B = 2


@pytest.fixture
def dep(tmp_path: Path, databases: DbFactory) -> harness.Deployment:
    task = harness.Task({"type": "Prio3Count"}, min_batch_size=B)
    return harness.deploy(tmp_path, task, databases=databases)


def put(
    dep: harness.Deployment,
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
            **(harness.collector_auth() if headers is None else headers),
        },
    )
    kind = harness.problem_type(response) if response.status_code >= 400 else None
    return job, response.status_code, kind


def test_identical_recollection_reveals_nothing_new(dep: harness.Deployment) -> None:
    dep.upload_measurements([1, 0, 1])
    first = dep.collect(harness.BUCKET)
    late = dep.upload(dep.seal_report(dep.shard(1)))  # not added to the collected batch
    assert harness.problem_type(late) == "reportRejected"
    assert dep.collect(harness.BUCKET) == first == (3, 2)


def test_overlapping_batches_are_refused(dep: harness.Deployment) -> None:
    dep.upload_measurements([1, 1, 1, 0])
    assert dep.collect(harness.BUCKET) == (4, 3)
    before = dep.stats(dep.helper)["batches_collected"]
    # The first contains the collected hour.
    for interval in (
        Interval(harness.NOW - harness.PRECISION, 2 * harness.PRECISION),
        Interval(harness.NOW - 5 * harness.PRECISION, 10 * harness.PRECISION),
    ):
        _, status, kind = put(dep, interval)
        assert (status, kind) == (400, "batchOverlap")
    dep.drive()
    assert dep.stats(dep.helper)["batches_collected"] == before  # the helper was not asked


def test_too_many_distinct_queries(dep: harness.Deployment) -> None:
    dep.upload_measurements([1, 1])
    assert dep.collect(harness.BUCKET) == (2, 2)
    _, status, kind = put(dep, harness.BUCKET, agg_param=b"another parameter")
    assert (status, kind) == (400, "batchQueriedTooManyTimes")


def test_unaligned_batches_are_invalid(dep: harness.Deployment) -> None:
    dep.upload_measurements([1, 1, 1])
    for interval in (
        Interval(harness.NOW + 1, harness.PRECISION),
        Interval(harness.NOW, harness.PRECISION - 1),
        Interval(harness.NOW, harness.PRECISION + 1),
        Interval(harness.NOW, 0),
    ):
        _, status, kind = put(dep, interval)
        assert (status, kind) == (400, "batchInvalid")


def test_below_min_batch_size_the_leader_waits(dep: harness.Deployment) -> None:
    """The collector cannot force a small batch out: polls stay 202, and the helper is never
    asked for its share (it has collected nothing, and still aggregates new reports)."""
    dep.upload_measurements([1])
    job, status, _ = put(dep, harness.BUCKET)
    assert status == 201
    for _ in range(3):
        assert dep.poll(job, rounds=2).status_code == 202
    assert dep.stats(dep.helper)["batches_collected"] in (0, [], {})
    dep.upload_measurements([1])
    response = dep.poll(job)
    assert response.status_code == 200, response.text


def test_wrong_collector_token(dep: harness.Deployment) -> None:
    dep.upload_measurements([1, 1])
    for headers in ({}, {"Authorization": "Bearer wrong-collector-token-0123"}):
        _, status, kind = put(dep, harness.BUCKET, headers=headers)
        assert (status, kind) == (403, "unauthorizedRequest")
    job = dep.start_collection(harness.BUCKET)
    response = dep.leader.post(f"/tasks/{dep.tid}/collection_jobs/{job}")
    assert harness.problem_type(response) == "unauthorizedRequest"
    assert dep.collect(harness.BUCKET) == (2, 2)  # the refused requests used nothing up
