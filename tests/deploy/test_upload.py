"""The DAP upload client (`client_sdk.upload`) against aggregators that really decrypt (DAP-09
§4.4).

The fake aggregators serve their HPKE configs, the fake leader stores each Report; the test then
opens both input shares with the aggregators' private keys, prepares them with Prio3 and checks
that the output shares add up to the measurements.
"""

from __future__ import annotations

import json
import random
import secrets
from typing import Any

import httpx
import pytest

from client_sdk.upload import ClientTask, UploadError, upload_reports
from deploy.collect import format_result
from deploy.measurements import expected_aggregate, random_measurements
from shared import hpke
from shared.dap.hpke_context import input_share_aad, input_share_info
from shared.dap.ids import TaskId
from shared.dap.messages import (
    MEDIA_HPKE_CONFIG_LIST,
    MEDIA_REPORT,
    HpkeConfig,
    HpkeConfigList,
    PlaintextInputShare,
    Report,
    Role,
)
from shared.vdaf import ping_pong
from shared.vdaf.plain_aggregate import PlainAggregate
from shared.vdaf.spec import VdafSpec

LEADER, HELPER = "http://leader.test", "http://helper.test"


class Aggregators:
    def __init__(self, task_id: TaskId) -> None:
        self.task_id = task_id
        self.keys = {LEADER: hpke.generate_keypair(3), HELPER: hpke.generate_keypair(9)}
        self.reports: list[Report] = []
        self.reject_after: int | None = None

    def __call__(self, request: httpx.Request) -> httpx.Response:
        base = f"{request.url.scheme}://{request.url.host}"
        if request.method == "GET" and request.url.path == "/hpke_config":
            assert request.url.params["task_id"] == self.task_id.to_b64url()
            key = self.keys[base]
            config = HpkeConfig(key.config_id, key.kem_id, key.kdf_id, key.aead_id, key.public_key)
            # An unsupported suite listed first must be skipped by the client.
            odd = HpkeConfig(200, 0x0010, 1, 1, b"\x04" * 65)
            body = HpkeConfigList((odd, config)).encode()
            return httpx.Response(
                200, content=body, headers={"Content-Type": MEDIA_HPKE_CONFIG_LIST}
            )
        if request.method == "PUT" and base == LEADER:
            assert request.url.path == f"/tasks/{self.task_id.to_b64url()}/reports"
            assert request.headers["Content-Type"] == MEDIA_REPORT
            if self.reject_after is not None and len(self.reports) >= self.reject_after:
                return httpx.Response(
                    400, text='{"type":"urn:ietf:params:ppm:dap:error:reportRejected"}'
                )
            self.reports.append(Report.decode(request.content))
            return httpx.Response(201)
        return httpx.Response(404)

    def open_all(self, role: Role) -> list[bytes]:
        key = self.keys[LEADER if role == Role.LEADER else HELPER]
        payloads = []
        for report in self.reports:
            ct = (
                report.leader_encrypted_input_share
                if role == Role.LEADER
                else report.helper_encrypted_input_share
            )
            assert ct.config_id == key.config_id
            aad = input_share_aad(self.task_id, report.report_metadata, report.public_share)
            plain = hpke.open(key, ct.enc, input_share_info(role), aad, ct.payload)
            share = PlaintextInputShare.decode(plain)
            assert share.extensions == ()
            payloads.append(share.payload)
        return payloads


def _task(vdaf: dict[str, Any], precision: int = 300) -> tuple[ClientTask, Aggregators]:
    task_id = TaskId.random()
    task = ClientTask(
        task_id=task_id.to_b64url(),
        leader=LEADER,
        helper=HELPER,
        vdaf=VdafSpec.model_validate(vdaf),
        time_precision=precision,
    )
    return task, Aggregators(task_id)


@pytest.mark.parametrize(
    ("vdaf", "measurements", "expected"),
    [
        (
            {"type": "Prio3Histogram", "length": 5, "chunk_length": 2},
            [0, 4, 4, 2] * 10,
            [10, 0, 10, 0, 20],
        ),
        ({"type": "Prio3Sum", "bits": 5}, list(range(32)), sum(range(32))),
        ({"type": "Prio3Count"}, [1, 0, 1], 2),
    ],
)
def test_uploaded_reports_decrypt_and_verify(
    vdaf: dict[str, Any], measurements: list[Any], expected: Any
) -> None:
    task, aggs = _task(vdaf)
    with httpx.Client(transport=httpx.MockTransport(aggs)) as http:
        result = upload_reports(task, measurements, report_time=1_700_000_123, http=http)
    assert (result.uploaded, result.rejected) == (len(measurements), [])
    assert len({r.report_metadata.report_id for r in aggs.reports}) == len(measurements)
    assert {r.report_metadata.time for r in aggs.reports} == {1_700_000_123 - 1_700_000_123 % 300}

    prio3 = task.vdaf.instance()
    verify_key = secrets.token_bytes(16)
    nonces = [r.report_metadata.report_id.value for r in aggs.reports]
    publics = [r.public_share for r in aggs.reports]
    leader, outbound = ping_pong.leader_init(
        prio3, verify_key, nonces, publics, aggs.open_all(Role.LEADER)
    )
    helper, replies = ping_pong.helper_init(
        prio3, verify_key, nonces, publics, aggs.open_all(Role.HELPER), [m or b"" for m in outbound]
    )
    assert ping_pong.leader_continued(prio3, leader, replies).all()
    shares = [
        prio3.encode_agg_share(prio3.aggregate(batch.out_shares)) for batch in (leader, helper)
    ]
    assert prio3.unshard(shares, len(measurements)) == expected


def test_bad_measurements_and_refusals_are_reported() -> None:
    task, aggs = _task({"type": "Prio3Histogram", "length": 3, "chunk_length": 2})
    with httpx.Client(transport=httpx.MockTransport(aggs)) as http:
        with pytest.raises(UploadError, match="invalid measurement"):
            upload_reports(task, [0, 3], http=http)
        aggs.reject_after = 2
        result = upload_reports(task, [0, 1, 2, 2], http=http, concurrency=1)
    assert result.uploaded == 2 and len(result.rejected) == 2
    assert "reportRejected" in result.rejected[0]

    def no_configs(request: httpx.Request) -> httpx.Response:
        return httpx.Response(400, text="{}")

    with (
        httpx.Client(transport=httpx.MockTransport(no_configs)) as http,
        pytest.raises(UploadError, match="refused the HPKE config request"),
    ):
        upload_reports(task, [0], http=http)


def test_result_formats() -> None:
    body = {
        "task_id": "T",
        "state": "complete",
        "vdaf": {"type": "Prio3Histogram", "length": 3, "chunk_length": 2},
        "report_count": 6,
        "interval": {"start": 1_700_000_000 - 1_700_000_000 % 3600, "duration": 3600},
        "result": [1, 2, 3],
    }
    table = format_result(body, "table")
    assert "Prio3Histogram(length=3, chunk_length=2)" in table
    assert "2023-11-14T22:00:00Z .. 2023-11-14T23:00:00Z (3600 s)" in table
    assert table.splitlines()[-1].split() == ["2", "3"]
    assert format_result(body, "csv") == "bucket,value\n0,1\n1,2\n2,3"
    assert json.loads(format_result(body, "json")) == body
    scalar = {**body, "result": 42, "batch_id": "B", "vdaf": {"type": "Prio3Count"}}
    assert format_result(scalar, "csv") == "result\n42"
    table = format_result(scalar, "table")
    assert (
        "result        42" in table
        and "batch         B" in table
        and "VDAF          Prio3Count" in table
    )


@pytest.mark.parametrize(
    "vdaf",
    [
        {"type": "Prio3Count"},
        {"type": "Prio3Sum", "bits": 3},
        {"type": "Prio3Histogram", "length": 4, "chunk_length": 2},
        {"type": "Prio3SumVec", "length": 3, "bits": 2, "chunk_length": 2},
        {"type": "Prio3MultiHotHistogram", "length": 5, "max_count": 2, "chunk_length": 2},
        {"version": "VDAF-20", "type": "Prio3Sum", "max_measurement": 5},
        {
            "version": "VDAF-20",
            "type": "Prio3SumVec",
            "length": 3,
            "max_measurement": 6,
            "chunk_length": 2,
        },
        {
            "version": "VDAF-20",
            "type": "Prio3MultihotCountVec",
            "length": 5,
            "max_weight": 2,
            "chunk_length": 2,
        },
        {
            "version": "VDAF-20",
            "type": "Prio3SumVecField64Multiproof",
            "length": 3,
            "max_measurement": 3,
            "chunk_length": 2,
            "proofs": 3,
        },
    ],
)
def test_random_measurements_are_valid_and_expected_matches_the_vdaf(vdaf: dict[str, Any]) -> None:
    spec = VdafSpec.model_validate(vdaf)
    measurements = random_measurements(spec, 12, random.Random(5))
    assert len(measurements) == 12
    prio3 = spec.instance()
    nonces = [secrets.token_bytes(16) for _ in measurements]
    rands = [secrets.token_bytes(prio3.RAND_SIZE) for _ in measurements]
    sharded = prio3.shard_batch(measurements, nonces, rands)  # ValueError if any is invalid
    verify_key = secrets.token_bytes(spec.verify_key_size)
    publics = [p for p, _ in sharded]
    leader, out = ping_pong.leader_init(
        prio3, verify_key, nonces, publics, [s[1][0] for s in sharded]
    )
    helper, back = ping_pong.helper_init(
        prio3, verify_key, nonces, publics, [s[1][1] for s in sharded], [m or b"" for m in out]
    )
    assert ping_pong.leader_continued(prio3, leader, back).all()
    shares = [prio3.encode_agg_share(prio3.aggregate(b.out_shares)) for b in (leader, helper)]
    aggregate = prio3.unshard(shares, len(measurements))
    assert aggregate == expected_aggregate(spec, measurements)
    # Kept in two processes' halves and merged, the plain-text total is the same.
    first, second = (PlainAggregate.of(spec, part) for part in (measurements[:5], measurements[5:]))
    first.merge(second)
    assert (first.result, first.reports) == (aggregate, 12)


def test_plain_aggregates_of_different_vdafs_do_not_merge() -> None:
    count = PlainAggregate(VdafSpec(type="Prio3Count"))
    histogram = PlainAggregate(VdafSpec(type="Prio3Histogram", length=1, chunk_length=1))
    with pytest.raises(ValueError, match="different VDAFs"):
        count.merge(histogram)
