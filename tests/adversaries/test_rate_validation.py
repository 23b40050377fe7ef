"""Sybil-surge rate validation (001 §4.8, "Rate validation by leader and helper").

001 §4.8: "Based on the recipe, and the number of devices, the leader and the helper have an
expectation on the rate at which contributions arrive [...] the leader (or helper) could reject
batches when the rate of contributions exceeds twice the expected rate in a certain window."
With the honest rate near its expectation, a batch that passes holds at least half honest
contributions, so an attacker controlling the rest costs only a factor of about sqrt(2) in
privacy.

What these tests pin down (`shared.dap.task.RateValidation`):

- Both aggregators' task definitions take an optional
  ``"rate_validation": {"expected_reports_per_bucket": R, "max_multiple": M}``: R reports per
  `time_precision` bucket (computed by the recipe server from the recipe and logged with it);
  M = 2 by default.
- A batch with reports in a bucket holding more than M x R aggregated reports is refused:
  the helper answers an AggregateShareReq for it with 400 `invalidBatchSize` (the DAP token for
  "wrong number of reports in batch"), and the leader fails the collection job with the same
  type. A batch whose every bucket is within M x R is collected as usual.
- fixed_size batches are checked on the buckets of their reports' client times, each counted
  over every aggregated report of the task: a surge split over several small leader-selected
  batches is refused too.
- A refusal changes nothing: the batch is not collected, no query is spent, no report is lost.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from services.aggregator.metrics import AggregatorCollector
from services.aggregator.service import Aggregator
from shared.dap import messages as dap
from shared.dap.ids import AggregationJobId, BatchId, CollectionJobId
from tests.adversaries import harness
from tests.adversaries.conftest import DbFactory

RATE = {"expected_reports_per_bucket": 4, "max_multiple": 2}
PREVIOUS = dap.Interval(harness.NOW - harness.PRECISION, harness.PRECISION)


def _deploy(tmp_path: Path, databases: DbFactory | None = None, **extra: Any) -> harness.Deployment:
    tmp_path.mkdir(exist_ok=True)
    task = harness.Task({"type": "Prio3Count"}, min_batch_size=2)
    for role in ("leader", "helper"):
        task.per_role[role] = {"rate_validation": RATE, **extra}
    return harness.deploy(tmp_path, task, databases=databases)


def _upload_at(dep: harness.Deployment, times: list[int]) -> None:
    for t in times:
        response = dep.upload(dep.seal_report(dep.shard(1, time=t)))
        assert response.status_code in (200, 201), response.text


def test_helper_refuses_a_batch_above_twice_the_expected_rate(
    tmp_path: Path, databases: DbFactory
) -> None:
    """A sybil surge: 9 > 2 x 4 reports in one hour. The helper refuses the aggregate share."""
    dep = _deploy(tmp_path, databases)
    shards = [dep.shard(1) for _ in range(9)]
    resps = dep.helper_resps([dep.prepare_init(s) for s in shards]).prepare_resps
    assert len(resps) == 9
    ids = [s.report_id for s in shards]
    refused = dep.aggregate_share(harness.BUCKET, 9, harness.checksum(ids))
    assert harness.problem_type(refused) == "invalidBatchSize"
    assert refused.json()["taskid"] == dep.tid
    assert "rate validation" in refused.json()["detail"]


def test_leader_fails_the_collection_of_a_surging_batch(
    tmp_path: Path, databases: DbFactory
) -> None:
    dep = _deploy(tmp_path, databases)
    dep.upload_measurements([1] * 9)
    response = dep.poll(dep.start_collection(harness.BUCKET))
    assert harness.problem_type(response) == "invalidBatchSize"
    assert response.json()["taskid"] == dep.tid
    assert "rate validation" in response.json()["detail"]


def test_a_batch_within_the_rate_is_collected(tmp_path: Path, databases: DbFactory) -> None:
    """The check must not refuse normal fluctuation: 8 = 2 x 4 reports are collected."""
    dep = _deploy(tmp_path, databases)
    dep.upload_measurements([1] * 8)
    assert dep.collect(harness.BUCKET) == (8, 8)


def test_every_bucket_of_an_interval_is_checked(tmp_path: Path) -> None:
    """The limit is per bucket, not per batch: a two-hour batch of 8 + 8 reports passes, one
    of 8 + 9 is refused for its second hour."""
    within = _deploy(tmp_path / "within")
    _upload_at(within, [PREVIOUS.start] * 8 + [harness.NOW] * 8)
    assert within.collect(dap.Interval(PREVIOUS.start, 2 * harness.PRECISION)) == (16, 16)

    surge = _deploy(tmp_path / "surge")
    _upload_at(surge, [PREVIOUS.start] * 8 + [harness.NOW] * 9)
    response = surge.poll(
        surge.start_collection(dap.Interval(PREVIOUS.start, 2 * harness.PRECISION))
    )
    assert harness.problem_type(response) == "invalidBatchSize"


def test_a_refused_batch_is_neither_collected_nor_consumed(
    tmp_path: Path, databases: DbFactory
) -> None:
    """The refusal runs before any share is released and stores nothing but a counter: the
    reports stay in an uncollected batch, the query budget (max_batch_query_count = 1) is
    untouched, and the task's other buckets are collected as usual, also those of a refused
    interval (nothing of it was released, so no overlap rule applies)."""
    dep = _deploy(tmp_path, databases)
    _upload_at(dep, [harness.NOW] * 9 + [PREVIOUS.start] * 3)
    both = dep.poll(dep.start_collection(dap.Interval(PREVIOUS.start, 2 * harness.PRECISION)))
    assert harness.problem_type(both) == "invalidBatchSize"
    response = dep.poll(dep.start_collection(harness.BUCKET))
    assert harness.problem_type(response) == "invalidBatchSize"

    for client in (dep.leader, dep.helper):
        stats = dep.stats(client)
        assert stats["batches_collected"] == 0
        assert stats["batches_refused"] == ({"rate_exceeded": 2} if client is dep.leader else {})
    open_batches = {b["reports"] for b in dep.stats(dep.leader)["open_batches"]}
    assert open_batches == {9, 3}
    # The bucket is not collected: a late report into it is still accepted.
    _upload_at(dep, [harness.NOW])
    dep.drive()

    # The same query again is accepted (no query was spent) and refused again on its merits.
    again = dep.poll(dep.start_collection(harness.BUCKET))
    assert harness.problem_type(again) == "invalidBatchSize"
    assert dep.stats(dep.leader)["batches_refused"] == {"rate_exceeded": 3}

    # The helper, asked directly, refuses every time without recording a query either.
    for _ in range(2):
        direct = dep.aggregate_share(harness.BUCKET, 10, bytes(32))
        assert harness.problem_type(direct) == "invalidBatchSize"
    assert dep.stats(dep.helper)["batches_refused"] == {"rate_exceeded": 2}
    registry = CollectorRegistry()
    registry.register(AggregatorCollector(dep.leader_agg.ds))
    refused = {"task": dep.tid, "role": "leader", "reason": "rate_exceeded"}
    assert registry.get_sample_value("sagg_batches_refused_total", refused) == 3

    # The earlier hour is within the rate and collects, reports intact.
    assert dep.collect(PREVIOUS) == (3, 3)


# --- fixed_size: leader-selected batches ----------------------------------------------------------

FIXED: dict[str, Any] = {"query_type": "fixed_size", "max_batch_size": 5}


def _collect_garbage(agg: Aggregator) -> None:
    """Everything garbage collection may delete (report_expiry_age passed for every report)."""
    for task in agg.ds.all_tasks():
        garbage = agg.ds.collect_garbage(
            task.task_id,
            report_horizon=harness.NOW + harness.PRECISION,
            token_horizon=0,
            limit=1000,
        )
        assert garbage.aggregation_jobs > 0


def _collect_current_batch(dep: harness.Deployment) -> Any:
    job = CollectionJobId.random().to_b64url()
    query = dap.Query.fixed_size(dap.FixedSizeQuery.current_batch())
    response = dep.leader.put(
        f"/tasks/{dep.tid}/collection_jobs/{job}",
        content=dap.CollectionReq(query, b"").encode(),
        headers={"Content-Type": dap.MEDIA_COLLECT_REQ, **harness.collector_auth()},
    )
    assert response.status_code == 201, response.text
    return dep.poll(job)


def test_fixed_size_batches_are_checked_per_time_bucket(
    tmp_path: Path, databases: DbFactory
) -> None:
    """Batches of (at most) 5 never hold more than 5 <= 8 reports of one hour, but 12 reports
    in one hour fill batches of 5, 5 and 2: each is refused, since its hour holds 12 > 8
    aggregated reports. The same 12 reports spread over two hours (6 + 6) are collected batch
    by batch."""
    spread = _deploy(tmp_path / "spread", databases, **FIXED)
    _upload_at(spread, [PREVIOUS.start] * 6 + [harness.NOW] * 6)
    spread.drive()
    counts = []
    for _ in range(3):
        response = _collect_current_batch(spread)
        assert response.status_code == 200, response.text
        counts.append(dap.Collection.decode(response.content).report_count)
    assert sorted(counts) == [2, 5, 5]

    surge = _deploy(tmp_path / "surge", databases, **FIXED)
    _upload_at(surge, [harness.NOW] * 12)
    surge.drive()
    first = _collect_current_batch(surge)
    assert harness.problem_type(first) == "invalidBatchSize"
    # The counts outlive garbage collection of the reports' jobs and replay records.
    _collect_garbage(surge.leader_agg)
    # The refused batch stays tied to its failed job, so current_batch moves on to the next
    # batch (also refused) rather than offering the same one again.
    second = _collect_current_batch(surge)
    assert harness.problem_type(second) == "invalidBatchSize"
    stats = surge.stats(surge.leader)
    assert stats["batches_collected"] == 0
    assert stats["batches_refused"] == {"rate_exceeded": 2}
    assert sorted(b["reports"] for b in stats["open_batches"]) == [2, 5, 5]


@pytest.mark.parametrize(
    ("second_time", "refused"), [(harness.NOW, True), (harness.NOW - harness.PRECISION, False)]
)
def test_helper_checks_fixed_size_buckets_across_batches(
    tmp_path: Path, second_time: int, refused: bool
) -> None:
    """A leader of its own making sends the helper two batches of 5; the first batch's share
    is refused when the second batch put its hour above 8 reports, and released otherwise."""
    dep = _deploy(tmp_path, None, **FIXED)
    first, second = BatchId.random(), BatchId.random()
    first_shards = [dep.shard(1) for _ in range(5)]
    for batch_id, shards in (
        (first, first_shards),
        (second, [dep.shard(1, time=second_time) for _ in range(5)]),
    ):
        inits = tuple(dep.prepare_init(s) for s in shards)
        body = dap.AggregationJobInitReq(b"", dap.PartialBatchSelector.fixed_size(batch_id), inits)
        response = dep.helper.put(
            f"/tasks/{dep.tid}/aggregation_jobs/{AggregationJobId.random().to_b64url()}",
            content=body.encode(),
            headers={
                "Content-Type": dap.MEDIA_AGGREGATION_JOB_INIT_REQ,
                **harness.aggregator_auth(),
            },
        )
        assert response.status_code == 201, response.text
        resps = dap.AggregationJobResp.decode(response.content).prepare_resps
        assert [r.prepare_resp_state for r in resps] == [dap.PrepareRespState.CONTINUE] * 5

    helper_agg: Aggregator = dep.helper.app.state.aggregator  # type: ignore[attr-defined]
    _collect_garbage(helper_agg)
    selector = dap.BatchSelector.fixed_size(first)
    request = dap.AggregateShareReq(
        selector, b"", 5, harness.checksum([s.report_id for s in first_shards])
    )
    response = dep.helper.post(
        f"/tasks/{dep.tid}/aggregate_shares",
        content=request.encode(),
        headers={"Content-Type": dap.MEDIA_AGGREGATE_SHARE_REQ, **harness.aggregator_auth()},
    )
    if refused:
        assert harness.problem_type(response) == "invalidBatchSize"
        return
    assert response.status_code == 200, response.text
    sealed = dap.AggregateShare.decode(response.content).encrypted_aggregate_share
    share = dep.open_agg_share(dap.Role.HELPER, selector, sealed)
    prio3 = dep.task.prio3
    assert prio3.decode_agg_share(share).shape[0] == prio3.flp.OUTPUT_LEN
