"""Malformed input never yields a 500: truncated, bit-flipped and extreme messages get DAP
problem documents or per-report rejections. (TestClient re-raises any server exception.)"""

from __future__ import annotations

import random
from typing import Any

import pytest

from services.common.clock import TestClock
from shared.dap import messages as dap
from shared.dap.ids import AggregationJobId, CollectionJobId, ReportId
from shared.dap.problems import MEDIA_PROBLEM
from tests.aggregator.env import Env, aggregator_auth, collector_auth, make_env
from tests.aggregator.helpers import TaskParams, prepare_init

NOW = 1_700_006_400
U64_MAX = 2**64 - 1


def mutations(data: bytes, rng: random.Random) -> list[bytes]:
    out = [b"", data[:1], data[: len(data) // 2], data[:-1], data + b"\x00"]
    for _ in range(12):
        flipped = bytearray(data)
        i = rng.randrange(len(flipped))
        flipped[i] ^= 1 << rng.randrange(8)
        out.append(bytes(flipped))
    return out


def check(response: Any) -> None:
    assert response.status_code < 500, response.text
    if response.status_code >= 400:
        assert response.headers["content-type"] == MEDIA_PROBLEM


@pytest.fixture
def env(db_factory: Any, clock: TestClock) -> Env:
    return make_env(db_factory, clock, TaskParams(vdaf={"type": "Prio3Sum", "bits": 4}))


def test_fuzzed_requests(env: Env) -> None:
    rng = random.Random(7)
    report = env.report(3, NOW).encode()
    init = dap.AggregationJobInitReq(
        b"",
        dap.PartialBatchSelector.time_interval(),
        (prepare_init(env.params, env.helper_config, 3, NOW),),
    ).encode()
    cont = dap.AggregationJobContinueReq(1, (dap.PrepareContinue(ReportId.random(), b""),)).encode()
    share = dap.AggregateShareReq(
        dap.BatchSelector.time_interval(dap.Interval(NOW, 3600)), b"", 1, bytes(32)
    ).encode()
    collect = dap.CollectionReq(dap.Query.time_interval(dap.Interval(NOW, 3600)), b"").encode()
    job = f"/tasks/{env.tid}/aggregation_jobs"
    collection_job = f"/tasks/{env.tid}/collection_jobs/{CollectionJobId.random().to_b64url()}"
    # (client, method, path, media type, auth, a valid body to mutate), one row per endpoint.
    endpoints: list[tuple[Any, str, str, str, dict[str, str], bytes]] = [
        (env.leader, "PUT", f"/tasks/{env.tid}/reports", dap.MEDIA_REPORT, {}, report),
        (env.helper, "PUT", f"{job}/{AggregationJobId.random().to_b64url()}",
         dap.MEDIA_AGGREGATION_JOB_INIT_REQ, aggregator_auth(), init),
        (env.helper, "POST", f"{job}/{AggregationJobId.random().to_b64url()}",
         dap.MEDIA_AGGREGATION_JOB_CONTINUE_REQ, aggregator_auth(), cont),
        (env.helper, "POST", f"/tasks/{env.tid}/aggregate_shares",
         dap.MEDIA_AGGREGATE_SHARE_REQ, aggregator_auth(), share),
        (env.leader, "PUT", collection_job, dap.MEDIA_COLLECT_REQ, collector_auth(), collect),
    ]  # fmt: skip
    for client, method, path, media, auth, valid in endpoints:
        for body in mutations(valid, rng):
            check(
                client.request(method, path, content=body, headers={"Content-Type": media, **auth})
            )
    for path in ("not-base64!", "AAAA", "A" * 43):
        check(
            env.leader.put(
                f"/tasks/{path}/reports", content=report, headers={"Content-Type": dap.MEDIA_REPORT}
            )
        )
        check(env.leader.post(f"/tasks/{env.tid}/collection_jobs/{path}", headers=collector_auth()))
        check(
            env.helper.delete(
                f"/tasks/{env.tid}/aggregation_jobs/{path}", headers=aggregator_auth()
            )
        )


def test_extreme_times_and_intervals(env: Env) -> None:
    far = env.report(3, U64_MAX)
    check(env.upload(far))
    assert env.upload(far).json()["type"].endswith("reportTooEarly")
    pi = prepare_init(env.params, env.helper_config, 3, U64_MAX)
    body = dap.AggregationJobInitReq(b"", dap.PartialBatchSelector.time_interval(), (pi,)).encode()
    response = env.helper.put(
        f"/tasks/{env.tid}/aggregation_jobs/{AggregationJobId.random().to_b64url()}",
        content=body,
        headers={"Content-Type": dap.MEDIA_AGGREGATION_JOB_INIT_REQ, **aggregator_auth()},
    )
    assert response.status_code == 201
    (resp,) = dap.AggregationJobResp.decode(response.content).prepare_resps
    assert resp.prepare_error == dap.PrepareError.REPORT_TOO_EARLY
    huge = dap.Interval(U64_MAX - U64_MAX % 3600 - 3600, 3600)
    check(
        env.helper.post(
            f"/tasks/{env.tid}/aggregate_shares",
            content=dap.AggregateShareReq(
                dap.BatchSelector.time_interval(huge), b"", 1, bytes(32)
            ).encode(),
            headers={"Content-Type": dap.MEDIA_AGGREGATE_SHARE_REQ, **aggregator_auth()},
        )
    )
    check(
        env.leader.put(
            f"/tasks/{env.tid}/collection_jobs/{CollectionJobId.random().to_b64url()}",
            content=dap.CollectionReq(dap.Query.time_interval(huge), b"").encode(),
            headers={"Content-Type": dap.MEDIA_COLLECT_REQ, **collector_auth()},
        )
    )
    # A report whose metadata was tampered with after sealing fails decryption, not the server.
    report = env.report(3, NOW)
    moved = dap.Report(
        dap.ReportMetadata(report.report_metadata.report_id, NOW - 3600),
        report.public_share,
        report.leader_encrypted_input_share,
        report.helper_encrypted_input_share,
    )
    assert env.upload(moved).json()["type"].endswith("reportRejected")
