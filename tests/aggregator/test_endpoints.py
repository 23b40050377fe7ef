"""Every check of the digest's "who checks what" table (§8), on the real endpoints.

Each test asserts the exact DAP problem type (or PrepareError) and that the task id is echoed
in the problem document.
"""

from __future__ import annotations

import hashlib
from typing import Any

import httpx
import pytest

from client_sdk.upload import Uploader
from services.common.clock import TestClock
from shared.dap.ids import AggregationJobId, BatchId, CollectionJobId, ReportId, TaskId
from shared.dap.messages import (
    MEDIA_AGGREGATE_SHARE,
    MEDIA_AGGREGATE_SHARE_REQ,
    MEDIA_AGGREGATION_JOB_CONTINUE_REQ,
    MEDIA_AGGREGATION_JOB_INIT_REQ,
    MEDIA_AGGREGATION_JOB_RESP,
    MEDIA_COLLECT_REQ,
    MEDIA_HPKE_CONFIG_LIST,
    MEDIA_REPORT,
    AggregateShare,
    AggregateShareReq,
    AggregationJobContinueReq,
    AggregationJobInitReq,
    AggregationJobResp,
    BatchSelector,
    CollectionReq,
    Extension,
    FixedSizeQuery,
    HpkeCiphertext,
    HpkeConfigList,
    Interval,
    PartialBatchSelector,
    PrepareContinue,
    PrepareError,
    PrepareInit,
    PrepareRespState,
    Query,
    Report,
    Role,
)
from shared.dap.problems import MEDIA_PROBLEM, ProblemType
from tests.aggregator import helpers
from tests.aggregator.env import Env, aggregator_auth, collector_auth, make_env
from tests.aggregator.helpers import TaskParams

NOW = 1_700_006_400
TP = 3600


@pytest.fixture
def env(db_factory: Any, clock: TestClock) -> Env:
    return make_env(db_factory, clock, TaskParams(task_expiration=NOW + 10 * 86400))


def assert_problem(response: httpx.Response, problem: ProblemType, task_id: str | None) -> None:
    assert response.status_code in (400, 403, 409, 413, 415), response.text
    assert response.headers["content-type"] == MEDIA_PROBLEM
    body = response.json()
    assert body["type"] == problem.urn, body
    if task_id is not None:
        assert body["taskid"] == task_id
    if problem is ProblemType.UNAUTHORIZED_REQUEST:
        assert response.status_code == 403


# --- HPKE config and admin API ------------------------------------------------------------


def test_hpke_config(env: Env) -> None:
    response = env.leader.get("/hpke_config", params={"task_id": env.tid})
    assert response.status_code == 200
    assert response.headers["content-type"] == MEDIA_HPKE_CONFIG_LIST
    assert response.headers["cache-control"] == "max-age=86400"
    configs = HpkeConfigList.decode(response.content).configs
    assert configs[0] == env.leader_config
    unknown = TaskId.random().to_b64url()
    assert_problem(
        env.leader.get("/hpke_config", params={"task_id": unknown}),
        ProblemType.UNRECOGNIZED_TASK,
        unknown,
    )


def test_admin_api(env: Env) -> None:
    params = TaskParams()
    path = f"/internal/tasks/{params.task_id.to_b64url()}"
    body = params.definition("helper")
    assert env.helper.put(path, json=body).status_code == 401
    assert (
        env.helper.put(path, json=body, headers={"Authorization": "Bearer nope"}).status_code == 403
    )
    created = env.helper.put(path, json=body, headers=helpers.admin_headers())
    assert created.status_code == 201 and created.json() == {"task_id": params.task_id.to_b64url()}
    assert env.helper.put(path, json=body, headers=helpers.admin_headers()).status_code == 200
    other = dict(body, min_batch_size=7)
    assert env.helper.put(path, json=other, headers=helpers.admin_headers()).status_code == 409
    shown = env.helper.get(path, headers=helpers.admin_headers()).json()
    assert "aggregator_auth_token" not in shown and helpers.AGGREGATOR_TOKEN not in str(shown)
    assert shown["min_batch_size"] == 1
    bad = dict(body, vdaf_verify_key="short", aggregator_auth_token="x" * 20)
    response = env.helper.put(path, json=bad, headers=helpers.admin_headers())
    assert response.status_code == 400
    fresh = TaskParams()
    bad = dict(fresh.definition("helper"), vdaf_verify_key="c2hvcnQ")
    response = env.helper.put(
        f"/internal/tasks/{fresh.task_id.to_b64url()}", json=bad, headers=helpers.admin_headers()
    )
    assert response.status_code == 400 and "c2hvcnQ" not in response.text
    assert env.helper.delete(path, headers=helpers.admin_headers()).status_code == 204
    assert env.helper.get(path, headers=helpers.admin_headers()).status_code == 404
    assert env.helper.get("/healthz").json() == {"status": "ok"}


def test_admin_api_takes_rate_validation(env: Env) -> None:
    """001 §4.8: the setting is stored and shown back, M defaulting to 2; nonsense is a 400
    that names the member."""
    params = TaskParams()
    path = f"/internal/tasks/{params.task_id.to_b64url()}"
    body = dict(params.definition("helper"), rate_validation={"expected_reports_per_bucket": 30})
    assert env.helper.put(path, json=body, headers=helpers.admin_headers()).status_code == 201
    shown = env.helper.get(path, headers=helpers.admin_headers()).json()
    assert shown["rate_validation"] == {"expected_reports_per_bucket": 30, "max_multiple": 2.0}
    task = env.helper_agg.task(params.task_id.to_b64url())
    assert task.rate_limit is not None and task.rate_limit.max_reports_per_bucket == 60
    for bad in (
        {"expected_reports_per_bucket": 0},
        {"expected_reports_per_bucket": 4, "max_multiple": 0.5},
        {"expected_reports_per_bucket": 4, "window": 3600},
    ):
        fresh = TaskParams()
        response = env.helper.put(
            f"/internal/tasks/{fresh.task_id.to_b64url()}",
            json=dict(fresh.definition("helper"), rate_validation=bad),
            headers=helpers.admin_headers(),
        )
        assert response.status_code == 400
        assert "rate_validation" in response.json()["detail"]


def test_key_rotation_keeps_old_keys(env: Env) -> None:
    old = env.leader_config
    response = env.leader.post("/internal/hpke_keys/rotate", headers=helpers.admin_headers())
    assert response.status_code == 200
    new_id = response.json()["config_id"]
    configs = helpers.hpke_config(env.leader, env.params.task_id)
    assert configs.id == new_id != old.id
    # A client that still has the old config is served.
    assert env.upload(env.report(1)).status_code == 201


# --- upload (leader) ------------------------------------------------------------------------


def test_upload_accepts_a_report(env: Env) -> None:
    response = env.upload(env.report(1))
    assert response.status_code == 201
    assert env.leader_agg.ds.count_rows("client_reports", env.params.task_id.value) == 1


def test_upload_unknown_task(env: Env) -> None:
    other = TaskParams(task_id=TaskId.random())
    response = helpers.upload(env.leader, other, env.report(1))
    assert_problem(response, ProblemType.UNRECOGNIZED_TASK, other.task_id.to_b64url())
    # A task this aggregator serves as helper is unknown to its upload endpoint.
    response = helpers.upload(env.helper, env.params, env.report(1))
    assert_problem(response, ProblemType.UNRECOGNIZED_TASK, env.tid)


def test_upload_outdated_config(env: Env) -> None:
    report = env.report(1)
    ct = report.leader_encrypted_input_share
    stale = HpkeCiphertext((ct.config_id + 1) % 256, ct.enc, ct.payload)
    bad = Report(
        report.report_metadata, report.public_share, stale, report.helper_encrypted_input_share
    )
    assert_problem(env.upload(bad), ProblemType.OUTDATED_CONFIG, env.tid)


def test_upload_undecryptable_share(env: Env) -> None:
    report = env.report(1)
    # Sealed to the helper's key under the leader's config id: the leader cannot open it.
    swapped = HpkeCiphertext(
        report.leader_encrypted_input_share.config_id,
        report.helper_encrypted_input_share.enc,
        report.helper_encrypted_input_share.payload,
    )
    bad = Report(
        report.report_metadata, report.public_share, swapped, report.helper_encrypted_input_share
    )
    assert_problem(env.upload(bad), ProblemType.REPORT_REJECTED, env.tid)


def test_upload_replay_is_rejected(env: Env) -> None:
    report = env.report(1)
    assert env.upload(report).status_code == 201
    assert_problem(env.upload(report), ProblemType.REPORT_REJECTED, env.tid)
    same_id = env.report(0, report_id=report.report_metadata.report_id)
    assert_problem(env.upload(same_id), ProblemType.REPORT_REJECTED, env.tid)
    assert env.leader_agg.ds.count_rows("client_reports", env.params.task_id.value) == 1


def test_the_sdk_reads_a_replay_of_its_own_resend_as_stored(env: Env) -> None:
    """A device whose report was stored but whose answer was lost sends it again: this leader's
    refusal says "already seen", which the SDK's uploader counts as sent for a report it sent
    before, and as refused for one it had not (a replay)."""
    report = env.report(1)
    assert env.upload(report).status_code == 201
    base = str(env.leader.base_url)
    uploader = Uploader(env.leader, retries=0)
    tid = env.tid
    resent = uploader.upload("dap-09", base, tid, [report.encode()], resent=[True])
    assert [r.status for r in resent] == ["sent"]
    fresh = uploader.upload("dap-09", base, tid, [report.encode()], resent=[False])
    assert [(r.status, r.detail) for r in fresh] == [
        ("rejected", "leader refused the report: reportRejected")
    ]
    assert env.leader_agg.ds.count_rows("client_reports", env.params.task_id.value) == 1


def test_upload_too_early_and_expired(env: Env) -> None:
    skew = env.leader_agg.settings.clock_skew_s
    assert env.upload(env.report(1, NOW + skew)).status_code == 201
    assert_problem(env.upload(env.report(1, NOW + skew + 1)), ProblemType.REPORT_TOO_EARLY, env.tid)
    env.advance(11 * 86400)
    late = env.report(1, NOW + 10 * 86400 + 1)
    assert_problem(env.upload(late), ProblemType.REPORT_REJECTED, env.tid)


def test_upload_malformed_and_wrong_media_type(env: Env) -> None:
    path = f"/tasks/{env.tid}/reports"
    response = env.leader.put(path, content=b"\x00\x01", headers={"Content-Type": MEDIA_REPORT})
    assert_problem(response, ProblemType.INVALID_MESSAGE, env.tid)
    response = env.leader.put(
        path, content=env.report(1).encode(), headers={"Content-Type": "application/octet-stream"}
    )
    assert response.status_code == 415
    assert_problem(response, ProblemType.INVALID_MESSAGE, env.tid)


def test_upload_with_extension_is_invalid(env: Env) -> None:
    report = env.report(1)
    vdaf = env.params.prio3
    _, shares = vdaf.shard(1, report.report_metadata.report_id.value, b"\x01" * vdaf.RAND_SIZE)
    leader = helpers.seal_share(
        env.leader_config,
        Role.LEADER,
        env.params.task_id,
        report.report_metadata,
        report.public_share,
        shares[0],
        (Extension(0, b""),),
    )
    bad = Report(
        report.report_metadata, report.public_share, leader, report.helper_encrypted_input_share
    )
    assert_problem(env.upload(bad), ProblemType.INVALID_MESSAGE, env.tid)


def test_upload_into_collected_batch(env: Env) -> None:
    for m in (1, 0, 1):
        assert env.upload(env.report(m)).status_code == 201
    start = NOW - NOW % TP
    collection = env.collect(Query.time_interval(Interval(start, TP)))
    assert collection.report_count == 3
    assert_problem(env.upload(env.report(1)), ProblemType.REPORT_REJECTED, env.tid)
    # The previous bucket is still open.
    assert env.upload(env.report(1, start - TP)).status_code == 201


# --- helper: aggregation jobs ---------------------------------------------------------------


def put_job(
    env: Env,
    inits: list[PrepareInit],
    *,
    job: AggregationJobId | None = None,
    selector: PartialBatchSelector | None = None,
    headers: dict[str, str] | None = None,
) -> tuple[str, httpx.Response]:
    job = job or AggregationJobId.random()
    body = AggregationJobInitReq(
        b"", selector or PartialBatchSelector.time_interval(), tuple(inits)
    ).encode()
    response = env.helper.put(
        f"/tasks/{env.tid}/aggregation_jobs/{job.to_b64url()}",
        content=body,
        headers={
            "Content-Type": MEDIA_AGGREGATION_JOB_INIT_REQ,
            **(aggregator_auth() if headers is None else headers),
        },
    )
    return job.to_b64url(), response


def init(env: Env, measurement: Any = 1, time: int = NOW, **kw: Any) -> PrepareInit:
    return helpers.prepare_init(env.params, env.helper_config, measurement, time, **kw)


def states(response: httpx.Response) -> list[Any]:
    assert response.status_code == 201, response.text
    assert response.headers["content-type"] == MEDIA_AGGREGATION_JOB_RESP
    return [
        r.prepare_error if r.prepare_resp_state == PrepareRespState.REJECT else r.prepare_resp_state
        for r in AggregationJobResp.decode(response.content).prepare_resps
    ]


def test_helper_init_success_and_idempotent_resend(env: Env) -> None:
    inits = [init(env, m) for m in (1, 0, 1)]
    job, first = put_job(env, inits)
    assert states(first) == [PrepareRespState.CONTINUE] * 3
    _, again = put_job(env, inits, job=AggregationJobId.from_b64url(job))
    assert again.status_code == 201 and again.content == first.content
    _, changed = put_job(env, inits[:2], job=AggregationJobId.from_b64url(job))
    assert changed.status_code == 409
    assert_problem(changed, ProblemType.INVALID_MESSAGE, env.tid)
    # The output shares were counted once.
    ds = env.helper_agg.ds
    totals = ds.batch_totals(env.params.task_id.value, b"\x00" * 8, b"\xff" * 8)
    assert totals.report_count == 3


def test_helper_init_auth(env: Env) -> None:
    _, response = put_job(env, [init(env)], headers={})
    assert_problem(response, ProblemType.UNAUTHORIZED_REQUEST, env.tid)
    _, response = put_job(env, [init(env)], headers={"DAP-Auth-Token": "wrong-token-123456"})
    assert_problem(response, ProblemType.UNAUTHORIZED_REQUEST, env.tid)
    _, response = put_job(
        env, [init(env)], headers={"Authorization": f"Bearer {helpers.AGGREGATOR_TOKEN}"}
    )
    assert response.status_code == 201


def test_helper_init_message_checks(env: Env) -> None:
    one = init(env)
    _, response = put_job(env, [one, one])
    assert_problem(response, ProblemType.INVALID_MESSAGE, env.tid)
    _, response = put_job(
        env, [init(env)], selector=PartialBatchSelector.fixed_size(BatchId.random())
    )
    assert_problem(response, ProblemType.INVALID_MESSAGE, env.tid)
    path = f"/tasks/{env.tid}/aggregation_jobs/{AggregationJobId.random().to_b64url()}"
    response = env.helper.put(
        path,
        content=b"junk",
        headers={"Content-Type": MEDIA_AGGREGATION_JOB_INIT_REQ, **aggregator_auth()},
    )
    assert_problem(response, ProblemType.INVALID_MESSAGE, env.tid)
    response = env.helper.put(
        path, content=b"junk", headers={"Content-Type": MEDIA_REPORT, **aggregator_auth()}
    )
    assert response.status_code == 415
    other = TaskId.random().to_b64url()
    response = env.helper.put(
        f"/tasks/{other}/aggregation_jobs/{AggregationJobId.random().to_b64url()}",
        content=b"",
        headers={"Content-Type": MEDIA_AGGREGATION_JOB_INIT_REQ, **aggregator_auth()},
    )
    assert_problem(response, ProblemType.UNRECOGNIZED_TASK, other)


def test_helper_init_per_report_errors(env: Env) -> None:
    skew = env.helper_agg.settings.clock_skew_s
    good = init(env)
    fresh = init(env)
    rs = fresh.report_share
    ct = rs.encrypted_input_share
    unknown_config = PrepareInit(
        type(rs)(
            rs.report_metadata,
            rs.public_share,
            HpkeCiphertext((ct.config_id + 1) % 256, ct.enc, ct.payload),
        ),
        fresh.payload,
    )
    other = init(env)
    broken_ct = PrepareInit(
        type(rs)(
            other.report_share.report_metadata,
            other.report_share.public_share,
            HpkeCiphertext(ct.config_id, ct.enc, bytes(len(ct.payload))),
        ),
        other.payload,
    )
    too_early = init(env, time=NOW + skew + 1)
    extension = init(env, extensions=(Extension(0, b""),))
    bad_prep = init(env)
    bad_prep = PrepareInit(
        bad_prep.report_share, bad_prep.payload[:-1] + bytes([bad_prep.payload[-1] ^ 1])
    )
    garbage = init(env)
    garbage = PrepareInit(garbage.report_share, b"\x07")
    _, response = put_job(
        env, [good, unknown_config, broken_ct, too_early, extension, bad_prep, garbage]
    )
    assert states(response) == [
        PrepareRespState.CONTINUE,
        PrepareError.HPKE_UNKNOWN_CONFIG_ID,
        PrepareError.HPKE_DECRYPT_ERROR,
        PrepareError.REPORT_TOO_EARLY,
        PrepareError.INVALID_MESSAGE,
        PrepareError.VDAF_PREP_ERROR,
        PrepareError.INVALID_MESSAGE,
    ]
    # The same report in a later job is a replay.
    _, response = put_job(env, [good, init(env)])
    assert states(response) == [PrepareError.REPORT_REPLAYED, PrepareRespState.CONTINUE]
    # Once the clock passes the task's expiration, reports after it are refused.
    env.advance(11 * 86400)
    _, response = put_job(env, [init(env, time=NOW + 10 * 86400 + 1), too_early])
    assert states(response) == [PrepareError.TASK_EXPIRED, PrepareRespState.CONTINUE]


def test_helper_continue_and_delete(env: Env) -> None:
    first = init(env)
    job, response = put_job(env, [first])
    assert response.status_code == 201
    rid = first.report_share.report_metadata.report_id

    def cont(step: int, job_id: str = job, ids: tuple[ReportId, ...] = (rid,)) -> Any:
        body = AggregationJobContinueReq(step, tuple(PrepareContinue(r, b"") for r in ids))
        return env.helper.post(
            f"/tasks/{env.tid}/aggregation_jobs/{job_id}",
            content=body.encode(),
            headers={"Content-Type": MEDIA_AGGREGATION_JOB_CONTINUE_REQ, **aggregator_auth()},
        )

    unknown = AggregationJobId.random().to_b64url()
    assert_problem(cont(1, unknown), ProblemType.UNRECOGNIZED_AGGREGATION_JOB, env.tid)
    assert_problem(cont(0), ProblemType.INVALID_MESSAGE, env.tid)
    assert_problem(cont(2), ProblemType.STEP_MISMATCH, env.tid)
    assert_problem(cont(1, ids=(rid, rid)), ProblemType.INVALID_MESSAGE, env.tid)
    # Prio3 finished at init: nothing is left to continue.
    assert_problem(cont(1), ProblemType.INVALID_MESSAGE, env.tid)
    path = f"/tasks/{env.tid}/aggregation_jobs/{job}"
    assert env.helper.delete(path).status_code == 403
    assert env.helper.delete(path, headers=aggregator_auth()).status_code == 204
    assert_problem(cont(1), ProblemType.UNRECOGNIZED_AGGREGATION_JOB, env.tid)
    _, again = put_job(env, [first], job=AggregationJobId.from_b64url(job))
    assert again.status_code == 409


# --- helper: aggregate shares ---------------------------------------------------------------


def share_req(
    env: Env, selector: BatchSelector, count: int, checksum: bytes, agg_param: bytes = b""
) -> Any:
    return env.helper.post(
        f"/tasks/{env.tid}/aggregate_shares",
        content=AggregateShareReq(selector, agg_param, count, checksum).encode(),
        headers={"Content-Type": MEDIA_AGGREGATE_SHARE_REQ, **aggregator_auth()},
    )


def checksum(inits: list[PrepareInit]) -> bytes:
    acc = 0
    for p in inits:
        rid = p.report_share.report_metadata.report_id.value
        acc ^= int.from_bytes(hashlib.sha256(rid).digest(), "big")
    return acc.to_bytes(32, "big")


def test_helper_aggregate_share_checks(db_factory: Any, clock: TestClock) -> None:
    env = make_env(db_factory, clock, TaskParams(min_batch_size=3, max_batch_query_count=1))
    start = NOW - NOW % TP
    inits = [init(env, m, start + i) for i, m in enumerate((1, 1, 0))]
    _, response = put_job(env, inits)
    assert states(response) == [PrepareRespState.CONTINUE] * 3
    batch = BatchSelector.time_interval(Interval(start, TP))
    good = checksum(inits)

    assert_problem(
        share_req(env, BatchSelector.time_interval(Interval(start + 1, TP)), 3, good),
        ProblemType.BATCH_INVALID,
        env.tid,
    )
    assert_problem(
        share_req(env, BatchSelector.time_interval(Interval(start, TP // 2)), 3, good),
        ProblemType.BATCH_INVALID,
        env.tid,
    )
    assert_problem(
        share_req(env, BatchSelector.fixed_size(BatchId.random()), 3, good),
        ProblemType.INVALID_MESSAGE,
        env.tid,
    )
    assert_problem(
        share_req(env, BatchSelector.time_interval(Interval(start + TP, TP)), 0, bytes(32)),
        ProblemType.INVALID_BATCH_SIZE,
        env.tid,
    )
    assert_problem(share_req(env, batch, 2, good), ProblemType.BATCH_MISMATCH, env.tid)
    assert_problem(
        share_req(env, batch, 3, checksum(inits[:2])), ProblemType.BATCH_MISMATCH, env.tid
    )

    ok = share_req(env, batch, 3, good)
    assert ok.status_code == 200 and ok.headers["content-type"] == MEDIA_AGGREGATE_SHARE
    again = share_req(env, batch, 3, good)
    assert again.content == ok.content
    share = AggregateShare.decode(ok.content).encrypted_aggregate_share
    plain = helpers.decrypt_agg_share(env.params, Role.HELPER, batch, share)
    assert len(plain) == env.params.prio3.agg_share_len()

    assert_problem(
        share_req(env, batch, 3, good, agg_param=b"x"),
        ProblemType.BATCH_QUERIED_TOO_MANY_TIMES,
        env.tid,
    )
    assert_problem(
        share_req(env, BatchSelector.time_interval(Interval(start, 2 * TP)), 3, good),
        ProblemType.BATCH_OVERLAP,
        env.tid,
    )
    # Reports into the collected batch are now refused.
    _, response = put_job(env, [init(env, 1, start + 5)])
    assert states(response) == [PrepareError.BATCH_COLLECTED]
    unauthenticated = env.helper.post(
        f"/tasks/{env.tid}/aggregate_shares",
        content=AggregateShareReq(batch, b"", 3, good).encode(),
        headers={"Content-Type": MEDIA_AGGREGATE_SHARE_REQ},
    )
    assert_problem(unauthenticated, ProblemType.UNAUTHORIZED_REQUEST, env.tid)
    malformed = env.helper.post(
        f"/tasks/{env.tid}/aggregate_shares",
        content=b"\x01",
        headers={"Content-Type": MEDIA_AGGREGATE_SHARE_REQ, **aggregator_auth()},
    )
    assert_problem(malformed, ProblemType.INVALID_MESSAGE, env.tid)


def test_helper_fixed_size_batches(db_factory: Any, clock: TestClock) -> None:
    env = make_env(
        db_factory, clock, TaskParams(query_type="fixed_size", min_batch_size=2, max_batch_size=3)
    )
    batch_id = BatchId.random()
    selector = PartialBatchSelector.fixed_size(batch_id)
    inits = [init(env) for _ in range(4)]
    _, response = put_job(env, inits, selector=selector)
    assert states(response) == [PrepareRespState.CONTINUE] * 3 + [PrepareError.BATCH_SATURATED]
    assert_problem(
        share_req(env, BatchSelector.fixed_size(BatchId.random()), 3, checksum(inits[:3])),
        ProblemType.BATCH_INVALID,
        env.tid,
    )
    ok = share_req(env, BatchSelector.fixed_size(batch_id), 3, checksum(inits[:3]))
    assert ok.status_code == 200


# --- leader: collection jobs ----------------------------------------------------------------


def put_collection(
    env: Env,
    query: Query,
    job: str | None = None,
    headers: dict[str, str] | None = None,
    agg_param: bytes = b"",
) -> Any:
    job = job or CollectionJobId.random().to_b64url()
    return env.leader.put(
        f"/tasks/{env.tid}/collection_jobs/{job}",
        content=CollectionReq(query, agg_param).encode(),
        headers={
            "Content-Type": MEDIA_COLLECT_REQ,
            **(collector_auth() if headers is None else headers),
        },
    )


def test_leader_collection_checks(db_factory: Any, clock: TestClock) -> None:
    env = make_env(db_factory, clock, TaskParams(min_batch_size=2))
    start = NOW - NOW % TP
    batch = Query.time_interval(Interval(start, TP))
    assert_problem(
        put_collection(env, batch, headers={}), ProblemType.UNAUTHORIZED_REQUEST, env.tid
    )
    assert_problem(
        put_collection(env, batch, headers={"Authorization": "Bearer wrong-token"}),
        ProblemType.UNAUTHORIZED_REQUEST,
        env.tid,
    )
    assert_problem(
        put_collection(env, Query.time_interval(Interval(start + 1, TP))),
        ProblemType.BATCH_INVALID,
        env.tid,
    )
    assert_problem(
        put_collection(env, Query.fixed_size(FixedSizeQuery.current_batch())),
        ProblemType.INVALID_MESSAGE,
        env.tid,
    )
    assert_problem(put_collection(env, batch, agg_param=b"x"), ProblemType.INVALID_MESSAGE, env.tid)

    job = CollectionJobId.random().to_b64url()
    assert put_collection(env, batch, job).status_code == 201
    assert put_collection(env, batch, job).status_code == 201
    assert put_collection(env, Query.time_interval(Interval(start, 2 * TP)), job).status_code == 409
    assert_problem(
        put_collection(env, Query.time_interval(Interval(start, 2 * TP))),
        ProblemType.BATCH_OVERLAP,
        env.tid,
    )
    assert_problem(
        put_collection(env, batch, agg_param=b"x"),
        ProblemType.BATCH_QUERIED_TOO_MANY_TIMES,
        env.tid,
    )

    # Below min_batch_size the leader waits (202 + Retry-After) rather than failing.
    assert env.upload(env.report(1, start)).status_code == 201
    env.drive()
    pending = env.poll(job)
    assert pending.status_code == 202 and pending.headers["retry-after"] == "1"
    assert env.upload(env.report(1, start + 1)).status_code == 201
    env.advance(2)
    env.drive()
    done = env.poll(job)
    assert done.status_code == 200, done.text
    assert (
        env.leader.delete(
            f"/tasks/{env.tid}/collection_jobs/{job}", headers=collector_auth()
        ).status_code
        == 204
    )
    assert env.poll(job).status_code == 204
    # Deleting the job does not make an overlapping interval collectable.
    assert_problem(
        put_collection(env, Query.time_interval(Interval(start - TP, 2 * TP))),
        ProblemType.BATCH_OVERLAP,
        env.tid,
    )
    unknown = CollectionJobId.random().to_b64url()
    assert env.poll(unknown).status_code == 404


def test_leader_collection_fails_on_helper_mismatch(env: Env) -> None:
    """A report the helper counted but the leader did not surfaces as batchMismatch."""
    start = NOW - NOW % TP
    assert env.upload(env.report(1, start)).status_code == 201
    # The helper aggregates one extra report the leader never saw.
    _, response = put_job(env, [init(env, 1, start + 3)])
    assert response.status_code == 201
    job = env.start_collection(Query.time_interval(Interval(start, TP)))
    for _ in range(5):
        env.drive()
        env.advance(2)
    assert_problem(env.poll(job), ProblemType.BATCH_MISMATCH, env.tid)


def test_framework_errors_are_problem_documents_with_task_id(env: Env) -> None:
    response = env.leader.get(f"/tasks/{env.tid}/reports")
    assert response.status_code == 405
    assert response.headers["content-type"] == MEDIA_PROBLEM
    assert response.json()["taskid"] == env.tid
    shown = repr(env.leader_agg.task(env.tid))
    assert helpers.b64(env.params.verify_key) not in shown
    assert repr(env.params.verify_key) not in shown
