"""Real DAP-09 reports from an independent client (@divviup/dap 0.9.1) open and verify here.

Each report in shared/test-vectors/dap-09-divviup-ts/reports.json is decoded, both input shares are
HPKE-opened with the aggregators' test keys (derived from the recorded IKM), and both aggregators
run Prio3 preparation on them through the ping-pong topology. The proofs must verify and the
unsharded output shares must equal the measurement the client encoded.
"""

from __future__ import annotations

import json
import secrets
from typing import Any

import pytest

from shared import hpke
from shared.dap.hpke_context import input_share_aad, input_share_info
from shared.dap.ids import TaskId
from shared.dap.messages import HpkeConfigList, PlaintextInputShare, Report, Role
from shared.vdaf import ping_pong
from shared.vdaf.prio3 import Prio3, prio3_count, prio3_histogram, prio3_sum, prio3_sum_vec
from tests.conftest import vectors_path

REPORTS = json.loads((vectors_path() / "dap-09-divviup-ts" / "reports.json").read_text())
CASES = REPORTS["cases"]


def _vdaf(spec: dict[str, Any]) -> Prio3:
    kind = spec["type"]
    if kind == "count":
        return prio3_count()
    if kind == "sum":
        return prio3_sum(spec["bits"])
    if kind == "sumVec":
        return prio3_sum_vec(spec["length"], spec["bits"], spec["chunkLength"])
    if kind == "histogram":
        return prio3_histogram(spec["length"], spec["chunkLength"])
    raise AssertionError(f"unknown VDAF {spec}")


def _expected(spec: dict[str, Any], measurement: Any) -> Any:
    if spec["type"] == "count":
        return int(measurement)
    if spec["type"] == "histogram":
        return [int(i == measurement) for i in range(spec["length"])]
    return measurement


def _keypair(role: str) -> hpke.HpkeKeyPair:
    entry = REPORTS["hpke"][role]
    keypair = hpke.derive_keypair(entry["config_id"], bytes.fromhex(entry["ikm_hex"]))
    assert keypair.private_key_bytes().hex() == entry["private_key_hex"]
    config = HpkeConfigList.decode(bytes.fromhex(entry["hpke_config_list_hex"])).configs[0]
    assert (config.id, config.public_key) == (keypair.config_id, keypair.public_key)
    return keypair


def test_the_vector_file_has_reports() -> None:
    assert len(CASES) >= 2


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_divviup_report_decrypts_and_verifies(case: dict[str, Any]) -> None:
    task_id = TaskId(bytes.fromhex(REPORTS["task_id_hex"]))
    report = Report.decode(bytes.fromhex(case["report_hex"]))
    assert report.report_metadata.report_id.value.hex() == case["report_id_hex"]
    assert report.report_metadata.time == case["time"]
    aad = input_share_aad(task_id, report.report_metadata, report.public_share)
    assert aad.hex() == case["input_share_aad_hex"]

    payloads = []
    for role, server_role, ciphertext, expected_hex in (
        (
            "leader",
            Role.LEADER,
            report.leader_encrypted_input_share,
            case["leader_input_share_hex"],
        ),
        (
            "helper",
            Role.HELPER,
            report.helper_encrypted_input_share,
            case["helper_input_share_hex"],
        ),
    ):
        keypair = _keypair(role)
        assert ciphertext.config_id == keypair.config_id
        plaintext = hpke.open(
            keypair, ciphertext.enc, input_share_info(server_role), aad, ciphertext.payload
        )
        share = PlaintextInputShare.decode(plaintext)
        assert share.extensions == ()
        assert share.payload.hex() == expected_hex
        payloads.append(share.payload)

    vdaf = _vdaf(case["vdaf_spec"])
    # The verify key is the aggregators' secret; any key must accept an honest report.
    verify_key = secrets.token_bytes(16)
    nonce = [report.report_metadata.report_id.value]
    public = [report.public_share]
    leader, to_helper = ping_pong.leader_init(vdaf, verify_key, nonce, public, payloads[:1])
    assert to_helper[0] is not None
    helper, to_leader = ping_pong.helper_init(
        vdaf, verify_key, nonce, public, payloads[1:], [to_helper[0]]
    )
    assert helper.ok.all()
    assert ping_pong.leader_continued(vdaf, leader, to_leader).all()
    agg_shares = [vdaf.encode_agg_share(vdaf.aggregate(b.out_shares)) for b in (leader, helper)]
    assert vdaf.unshard(agg_shares, 1) == _expected(case["vdaf_spec"], case["measurement"])


def test_a_tampered_divviup_share_is_rejected() -> None:
    case = CASES[-1]
    vdaf = _vdaf(case["vdaf_spec"])
    report = Report.decode(bytes.fromhex(case["report_hex"]))
    leader_share = bytearray.fromhex(case["leader_input_share_hex"])
    leader_share[0] ^= 1
    nonce = [report.report_metadata.report_id.value]
    verify_key = secrets.token_bytes(16)
    leader, to_helper = ping_pong.leader_init(
        vdaf, verify_key, nonce, [report.public_share], [bytes(leader_share)]
    )
    assert to_helper[0] is not None
    helper, to_leader = ping_pong.helper_init(
        vdaf,
        verify_key,
        nonce,
        [report.public_share],
        [bytes.fromhex(case["helper_input_share_hex"])],
        [to_helper[0]],
    )
    assert not helper.ok.any()
    assert to_leader == [None]
    assert not ping_pong.leader_continued(vdaf, leader, to_leader).any()
