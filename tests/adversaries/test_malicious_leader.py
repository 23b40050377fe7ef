"""A malicious leader talking to an honest helper (DAP-09 §4.5-§4.6, digest §8; 001 §4.8).

The leader runs no driver here: the test *is* the leader, and sends the helper whatever it
likes, with the right aggregator token. What the protocol guarantees:

- no aggregate share of a batch below the helper's B (`invalidBatchSize`), whatever count
  the leader claims (`batchMismatch` when it lies about report_count or the checksum);
- no differencing: a second, overlapping batch is refused (`batchOverlap`), so two
  aggregates can never be subtracted to isolate a report;
- a report is aggregated once: the same report id again gets `report_replayed`; the same
  shares under a new report id (or a new time, or another task) fail to decrypt
  (`hpke_decrypt_error`), because the helper's ciphertext is bound by its AAD to
  (task_id, report_metadata, public_share);
- a leader provisioned with a smaller B than the helper cannot collect below the helper's B,
  and with a recipe binding (B inside the encrypted shares) neither aggregator can be
  provisioned below the clients' B without losing every report.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from shared.b64url import b64url_encode
from shared.dap.extensions import RecipeBinding, encode_extensions
from shared.dap.ids import AggregationJobId, ReportId
from shared.dap.messages import (
    MEDIA_AGGREGATION_JOB_CONTINUE_REQ,
    MEDIA_AGGREGATION_JOB_INIT_REQ,
    AggregationJobContinueReq,
    AggregationJobInitReq,
    HpkeCiphertext,
    Interval,
    PartialBatchSelector,
    PrepareContinue,
    PrepareError,
    PrepareInit,
    PrepareRespState,
    ReportMetadata,
    ReportShare,
)
from tests.adversaries.conftest import DbFactory
from tests.adversaries.harness import (
    BUCKET,
    NOW,
    PRECISION,
    Deployment,
    Task,
    aggregator_auth,
    checksum,
    deploy,
    problem_type,
)

B = 3


@pytest.fixture
def dep(tmp_path: Path, databases: DbFactory) -> Deployment:
    task = Task({"type": "Prio3Count"}, min_batch_size=B)
    return deploy(tmp_path, task, databases=databases)


def _aggregate(dep: Deployment, n: int, time: int = NOW) -> list[ReportId]:
    """Have the helper aggregate n honest reports (measurement 1) at `time`."""
    shards = [dep.shard(1, time=time) for _ in range(n)]
    resps = dep.helper_resps([dep.prepare_init(s) for s in shards]).prepare_resps
    assert all(r.prepare_resp_state == PrepareRespState.CONTINUE for r in resps)
    return [s.report_id for s in shards]


def test_no_aggregate_share_below_min_batch_size(dep: Deployment) -> None:
    ids = _aggregate(dep, B - 1)
    assert problem_type(dep.aggregate_share(BUCKET, B - 1, checksum(ids))) == "invalidBatchSize"
    # Claiming B reports does not help: the helper checks the size of its own count.
    fake = [*ids, ReportId.random()]
    assert problem_type(dep.aggregate_share(BUCKET, B, checksum(fake))) == "invalidBatchSize"
    assert problem_type(dep.aggregate_share(BUCKET, B, checksum(ids))) == "invalidBatchSize"
    # Once B reports are there, the honest request is answered.
    ids += _aggregate(dep, 1)
    ok = dep.aggregate_share(BUCKET, B, checksum(ids))
    assert ok.status_code == 200, ok.text
    share = dep.decode_aggregate_share(ok, BUCKET)
    assert len(share) == dep.task.prio3.agg_share_len()


def test_lying_about_count_or_checksum_is_batch_mismatch(dep: Deployment) -> None:
    ids = _aggregate(dep, B + 1)
    swapped = [*ids[:-1], ReportId.random()]  # same count, another report set
    assert problem_type(dep.aggregate_share(BUCKET, B + 1, checksum(swapped))) == "batchMismatch"
    assert problem_type(dep.aggregate_share(BUCKET, B + 2, checksum(ids))) == "batchMismatch"
    assert problem_type(dep.aggregate_share(BUCKET, B, checksum(ids[:-1]))) == "batchMismatch"
    # The refused requests did not use up the batch's one query.
    first = dep.aggregate_share(BUCKET, B + 1, checksum(ids))
    assert first.status_code == 200, first.text
    again = dep.aggregate_share(BUCKET, B + 1, checksum(ids))  # idempotent (§4.6.2)
    assert again.status_code == 200 and again.content == first.content


def test_no_differencing_with_overlapping_batches(dep: Deployment) -> None:
    """Batch A = one hour, batch A' = A plus the hour before: A' - A would be that hour,
    and with a victim alone in it, the victim's measurement. The helper refuses A'."""
    ids = _aggregate(dep, B)
    victim = _aggregate(dep, 1, time=NOW - PRECISION)
    assert dep.aggregate_share(BUCKET, B, checksum(ids)).status_code == 200
    wide = Interval(NOW - PRECISION, 2 * PRECISION)
    response = dep.aggregate_share(wide, B + 1, checksum(ids + victim))
    assert problem_type(response) == "batchOverlap"
    # And a late report for the collected hour is not aggregated into it.
    late = dep.shard(1)
    resp = dep.helper_resps([dep.prepare_init(late)]).prepare_resps[0]
    assert resp.prepare_error == PrepareError.BATCH_COLLECTED


def test_same_report_id_again_is_report_replayed(dep: Deployment) -> None:
    s = dep.shard(1)
    first = dep.helper_resps([dep.prepare_init(s)]).prepare_resps[0]
    assert first.prepare_resp_state == PrepareRespState.CONTINUE
    again = dep.helper_resps([dep.prepare_init(s)]).prepare_resps[0]
    assert again.prepare_resp_state == PrepareRespState.REJECT
    assert again.prepare_error == PrepareError.REPORT_REPLAYED
    # Twice in one job: the whole job is refused.
    other = dep.shard(1)
    response = dep.helper_init([dep.prepare_init(other), dep.prepare_init(other)])
    assert problem_type(response) == "invalidMessage"


def _rebound(init: PrepareInit, metadata: ReportMetadata) -> PrepareInit:
    """The same public share, ciphertext and leader message under other report metadata."""
    share = init.report_share
    return PrepareInit(
        ReportShare(metadata, share.public_share, share.encrypted_input_share), init.payload
    )


def test_same_shares_under_a_new_report_id_do_not_decrypt(dep: Deployment) -> None:
    """The leader cannot count a report twice by renaming it: the helper's share is sealed
    with AAD = (task_id, report_metadata, public_share), so any change to the id or the time
    makes decryption fail. (The leader cannot re-seal: it does not have the helper's share.)"""
    s = dep.shard(1)
    init = dep.prepare_init(s)
    assert dep.helper_resps([init]).prepare_resps[0].prepare_resp_state == PrepareRespState.CONTINUE
    meta = init.report_share.report_metadata
    for moved in (
        ReportMetadata(ReportId.random(), meta.time),
        ReportMetadata(ReportId.random(), meta.time + PRECISION),  # into another batch
    ):
        resp = dep.helper_resps([_rebound(init, moved)]).prepare_resps[0]
        assert resp.prepare_resp_state == PrepareRespState.REJECT
        assert resp.prepare_error == PrepareError.HPKE_DECRYPT_ERROR
    # A re-randomised ciphertext is no better: the leader can only make garbage.
    ct = init.report_share.encrypted_input_share
    forged = HpkeCiphertext(ct.config_id, ct.enc, bytes(len(ct.payload)))
    resp = dep.helper_resps(
        [
            PrepareInit(
                ReportShare(ReportMetadata(ReportId.random(), meta.time), s.public_share, forged),
                init.payload,
            )
        ]
    ).prepare_resps[0]
    assert resp.prepare_error == PrepareError.HPKE_DECRYPT_ERROR


def test_report_of_another_task_does_not_decrypt(tmp_path: Path) -> None:
    """Moving a report from task T to task T' on the same helper: the AAD holds the task id."""
    dep = deploy(tmp_path, Task({"type": "Prio3Count"}))
    other = Task({"type": "Prio3Count"}, verify_key=dep.task.verify_key)
    response = dep.helper.put(
        f"/internal/tasks/{other.task_id.to_b64url()}",
        json=other.definition("helper"),
        headers={"Authorization": "Bearer adversaries-admin-token-0123"},
    )
    assert response.status_code == 201, response.text
    init = dep.prepare_init(dep.shard(1))
    moved = Deployment(
        other, dep.clock, dep.leader, dep.helper, dep.runner, dep.leader_config, dep.helper_config
    )
    resp = moved.helper_resps([init]).prepare_resps[0]
    assert resp.prepare_error == PrepareError.HPKE_DECRYPT_ERROR


def test_garbage_leader_prep_share_is_rejected(dep: Deployment) -> None:
    s = dep.shard(1)
    init = dep.prepare_init(s)
    bad = PrepareInit(init.report_share, init.payload[:-1] + bytes([init.payload[-1] ^ 1]))
    resp = dep.helper_resps([bad]).prepare_resps[0]
    assert resp.prepare_error == PrepareError.VDAF_PREP_ERROR


def test_leader_provisioned_with_a_smaller_b_cannot_collect_below_the_helpers(
    tmp_path: Path,
) -> None:
    """The leader's operator lowers B on the leader only: its collection of 2 reports reaches
    the helper, which refuses (`invalidBatchSize`), and the collector sees the failure."""
    task = Task(
        {"type": "Prio3Count"}, min_batch_size=B, per_role={"leader": {"min_batch_size": 1}}
    )
    dep = deploy(tmp_path, task)
    dep.upload_measurements([1, 1])
    response = dep.poll(dep.start_collection(BUCKET))
    assert problem_type(response) == "invalidBatchSize"


def test_b_inside_the_shares_defeats_a_lowered_b_on_both_aggregators(tmp_path: Path) -> None:
    """001 §4.8: clients bind (recipe digest, B) inside both encrypted input shares. If both
    aggregators were provisioned with B' = 1 < B (the leader's operator reprovisioning the
    helper too, or a stale definition), every client's binding disagrees with the task, so
    both refuse every report (`binding_mismatch`): nothing is ever collected below B."""
    digest = bytes(range(32))
    task = Task({"type": "Prio3Count"}, min_batch_size=1)
    for role in ("leader", "helper"):
        task.per_role[role] = {"recipe_digest": b64url_encode(digest)}
    dep = deploy(tmp_path, task)
    exts = encode_extensions(binding=RecipeBinding(digest, B))  # what the recipe said
    s = dep.shard(1)
    assert problem_type(dep.upload(dep.seal_report(s, exts))) == "reportRejected"
    resp = dep.helper_resps([dep.prepare_init(dep.shard(1), extensions=exts)]).prepare_resps[0]
    assert resp.prepare_resp_state == PrepareRespState.REJECT
    assert "binding_mismatch" in str(dep.stats(dep.helper)["rejections"])
    # With the recipe's B, the same client reports are accepted.
    honest = encode_extensions(binding=RecipeBinding(digest, 1))
    ok = dep.helper_resps([dep.prepare_init(dep.shard(1), extensions=honest)]).prepare_resps[0]
    assert ok.prepare_resp_state == PrepareRespState.CONTINUE


def test_wrong_or_missing_aggregator_token(dep: Deployment) -> None:
    init = dep.prepare_init(dep.shard(1))
    body_job = f"/tasks/{dep.tid}/aggregation_jobs/{AggregationJobId.random().to_b64url()}"
    body = AggregationJobInitReq(b"", PartialBatchSelector.time_interval(), (init,)).encode()
    for headers in ({}, {"DAP-Auth-Token": "not-the-token-0123456789"}):
        response = dep.helper.put(
            body_job,
            content=body,
            headers={"Content-Type": MEDIA_AGGREGATION_JOB_INIT_REQ, **headers},
        )
        assert problem_type(response) == "unauthorizedRequest"
        assert response.status_code == 403
    # The refused requests consumed nothing: with the right token the report goes through.
    response = dep.helper.put(
        body_job,
        content=body,
        headers={"Content-Type": MEDIA_AGGREGATION_JOB_INIT_REQ, **aggregator_auth()},
    )
    assert response.status_code == 201, response.text


def test_job_tricks_do_not_count_a_report_twice(dep: Deployment) -> None:
    """Re-PUT of a job (identical: same answer; altered: 409), a continuation of a finished
    one-round job, and a DELETE followed by a fresh job with the same reports: afterwards the
    helper still holds exactly B reports (its count and checksum match the honest ones)."""
    shards = [dep.shard(1) for _ in range(B)]
    inits = [dep.prepare_init(s) for s in shards]
    job = AggregationJobId.random()
    first = dep.helper_init(inits, job)
    assert first.status_code == 201, first.text
    again = dep.helper_init(inits, job)
    assert again.status_code == 201 and again.content == first.content
    altered = dep.helper_init([*inits[:-1], dep.prepare_init(dep.shard(1))], job)
    assert altered.status_code == 409 and problem_type(altered) == "invalidMessage"
    cont = AggregationJobContinueReq(1, (PrepareContinue(shards[0].report_id, b"\x02"),))
    response = dep.helper.post(
        f"/tasks/{dep.tid}/aggregation_jobs/{job.to_b64url()}",
        content=cont.encode(),
        headers={"Content-Type": MEDIA_AGGREGATION_JOB_CONTINUE_REQ, **aggregator_auth()},
    )
    assert problem_type(response) in ("stepMismatch", "invalidMessage")
    deleted = dep.helper.delete(
        f"/tasks/{dep.tid}/aggregation_jobs/{job.to_b64url()}", headers=aggregator_auth()
    )
    assert deleted.status_code < 300
    resps = dep.helper_resps(inits).prepare_resps  # the same reports in a new job
    assert [r.prepare_error for r in resps] == [PrepareError.REPORT_REPLAYED] * B
    ids = [s.report_id for s in shards]
    ok = dep.aggregate_share(BUCKET, B, checksum(ids))
    assert ok.status_code == 200, ok.text
