"""Sybil-surge rate validation (001 §4.8, "Rate validation by leader and helper"): NOT BUILT YET.

001 §4.8: "Based on the recipe, and the number of devices, the leader and the helper have an
expectation on the rate at which contributions arrive [...] the leader (or helper) could reject
batches when the rate of contributions exceeds twice the expected rate in a certain window."
With the honest rate near its expectation, a batch that passes holds at least half honest
contributions, so an attacker controlling the rest costs only a factor of about sqrt(2) in
privacy.

Expected behaviour, which these tests pin down (they are strict xfails until the aggregator
implements it; the aggregator code is not owned by this test suite):

- Both aggregators' task definitions take an optional
  ``"rate_validation": {"expected_reports_per_bucket": R, "max_multiple": M}``: R reports per
  `time_precision` bucket, expected from the recipe (sampling rate q x the population estimate
  / the number of buckets of the recipe's collection window, computed and provisioned by the
  recipe server, and logged with the recipe so devices can audit it); M = 2 by default.
- A batch containing a bucket with more than M x R aggregated reports is refused:
  the helper answers an AggregateShareReq for it with 400 `invalidBatchSize` (the DAP token for
  "wrong number of reports in batch"), and the leader fails the collection job with the same
  type. A batch whose every bucket is within M x R is collected as usual.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.adversaries.harness import BUCKET, Deployment, Task, checksum, deploy, problem_type

RATE = {"expected_reports_per_bucket": 4, "max_multiple": 2}
REASON = (
    "001 §4.8 rate validation is not implemented: the task definition has no rate_validation "
    "and neither aggregator compares a batch's per-bucket report count with M x the expected "
    "rate (see the module docstring for the expected behaviour)"
)


def _deploy(tmp_path: Path) -> Deployment:
    task = Task({"type": "Prio3Count"}, min_batch_size=2)
    for role in ("leader", "helper"):
        task.per_role[role] = {"rate_validation": RATE}
    return deploy(tmp_path, task)


@pytest.mark.xfail(strict=True, reason=REASON)
def test_helper_refuses_a_batch_above_twice_the_expected_rate(tmp_path: Path) -> None:
    """A sybil surge: 9 > 2 x 4 reports in one hour. The helper refuses the aggregate share."""
    dep = _deploy(tmp_path)
    shards = [dep.shard(1) for _ in range(9)]
    resps = dep.helper_resps([dep.prepare_init(s) for s in shards]).prepare_resps
    assert len(resps) == 9
    ids = [s.report_id for s in shards]
    assert problem_type(dep.aggregate_share(BUCKET, 9, checksum(ids))) == "invalidBatchSize"


@pytest.mark.xfail(strict=True, reason=REASON)
def test_leader_fails_the_collection_of_a_surging_batch(tmp_path: Path) -> None:
    dep = _deploy(tmp_path)
    dep.upload_measurements([1] * 9)
    response = dep.poll(dep.start_collection(BUCKET))
    assert problem_type(response) == "invalidBatchSize"


@pytest.mark.xfail(strict=True, reason=REASON)
def test_a_batch_within_the_rate_is_collected(tmp_path: Path) -> None:
    """The check must not refuse normal fluctuation: 8 = 2 x 4 reports are collected."""
    dep = _deploy(tmp_path)
    dep.upload_measurements([1] * 8)
    assert dep.collect(BUCKET) == (8, 8)
