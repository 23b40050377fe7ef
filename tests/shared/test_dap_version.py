"""Tests for shared.dap.version, the wire facts the client and the aggregators share.

Oracles: divviup-ts DAP-09 reports (shared/test-vectors/dap-09-divviup-ts, the AAD hex and
plaintexts it recorded), Janus's DAP-19 InputShareAad bytes (transcribed in
`tests.shared.test_dap19_messages`), and times, labels and contexts spelled out from DAP-09
§4.1, §4.4.1, §4.4.2 and DAP-19 §4.1.1, §4.4.2 (digest dap-19.md §10).
"""

from __future__ import annotations

from typing import Any

import pytest

from shared import hpke
from shared.codec import DecodeError
from shared.dap import messages19 as m19
from shared.dap.ids import TaskId
from shared.dap.messages import HpkeCiphertext, Role
from shared.dap.version import Dap09Wire, Dap19Wire
from tests.shared.test_dap19_messages import EXT_0123, EXT_0123_HEX, JANUS_TC_HEX
from tests.shared.test_dap_messages import RID_A, RID_A_HEX, rep, unhex
from tests.shared.test_divviup_reports import CASES, REPORTS, _keypair

JANUS_TASK = TaskId(b"\x0c" * 32)


def _dap19() -> Dap19Wire:
    raw = unhex(JANUS_TC_HEX)
    return Dap19Wire(JANUS_TASK, m19.TaskConfiguration.decode(raw), raw)


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_dap09_wire_opens_divviup_ts_reports(case: dict[str, Any]) -> None:
    wire = Dap09Wire(TaskId(bytes.fromhex(REPORTS["task_id_hex"])), 1)
    report = wire.decode_report(bytes.fromhex(case["report_hex"]))
    metadata = report.report_metadata
    assert wire.seconds(metadata.time) == case["time"]
    aad = wire.input_share_aad(metadata.encode(), report.public_share)
    assert aad.hex() == case["input_share_aad_hex"]
    for role, ciphertext, expected in (
        (Role.LEADER, report.leader_encrypted_input_share, case["leader_input_share_hex"]),
        (Role.HELPER, report.helper_encrypted_input_share, case["helper_input_share_hex"]),
    ):
        keypair = _keypair("leader" if role == Role.LEADER else "helper")
        info = wire.input_share_info(role)
        plaintext = hpke.open(keypair, ciphertext.enc, info, aad, ciphertext.payload)
        assert wire.decode_plaintext_input_share(plaintext).payload.hex() == expected


def test_dap19_input_share_aad_is_janus_bytes() -> None:
    metadata = m19.ReportMetadata(RID_A, 54321, EXT_0123)
    aad = _dap19().input_share_aad(metadata.encode(), b"0123")
    expected = (
        f"{rep('0C')} {JANUS_TC_HEX} {RID_A_HEX} 000000000000D431 {EXT_0123_HEX} 00000004 30313233"
    )
    assert aad == unhex(expected)


def test_dap19_aggregate_share_aad_is_task_configuration_and_request() -> None:
    request = m19.CollectionJobReq(m19.Query.leader_selected(), b"").encode()
    assert _dap19().aggregate_share_aad(request) == b"\x0c" * 32 + unhex(JANUS_TC_HEX) + request


def test_times() -> None:
    """1_000_000 s at a 3600 s precision (the Janus configuration's) is unit 277, whose first
    second is 997_200: the client's DAP-09 time rounds down to it, the aggregator's DAP-09
    `units` keeps a time as it is."""
    dap09, dap19 = Dap09Wire(JANUS_TASK, 3600), _dap19()
    assert dap19.time_precision == 3600
    assert dap09.report_time(1_000_000) == 997_200
    assert dap09.report_time(997_200) == 997_200
    assert dap09.units(1_000_000) == 1_000_000
    assert dap09.seconds(997_200) == 997_200
    assert dap19.report_time(1_000_000) == 277
    assert dap19.units(997_200) == 277
    assert dap19.seconds(277) == 997_200


def test_labels_and_context() -> None:
    dap09, dap19 = Dap09Wire(JANUS_TASK, 3600), _dap19()
    assert (dap09.dap, dap19.dap) == ("dap-09", "dap-19")
    assert dap09.input_share_info(Role.HELPER) == b"dap-09 input share\x01\x03"
    assert dap09.aggregate_share_info(Role.LEADER) == b"dap-09 aggregate share\x02\x00"
    assert dap19.input_share_info(Role.LEADER) == b"dap-19 input share\x01\x02"
    assert dap19.aggregate_share_info(Role.HELPER) == b"dap-19 aggregate share\x03\x00"
    assert dap09.ctx == b""
    assert dap19.ctx == b"dap-19" + b"\x0c" * 32


def test_plaintext_input_share_payload_rules() -> None:
    """DAP-19's payload is never empty (DAP-19 §4.4.2); DAP-09's may be."""
    dap09, dap19 = Dap09Wire(JANUS_TASK, 3600), _dap19()
    empty = dap09.plaintext_input_share(EXT_0123, b"")
    assert empty == unhex(f"{EXT_0123_HEX} 00000000")
    assert dap09.decode_plaintext_input_share(empty).extensions == EXT_0123
    with pytest.raises(DecodeError):
        dap19.decode_plaintext_input_share(empty)
    share = dap19.plaintext_input_share(EXT_0123, b"\x07")
    assert share == unhex(f"{EXT_0123_HEX} 00000001 07")
    assert dap19.decode_plaintext_input_share(share).payload == b"\x07"


def test_reports_carry_their_versions_metadata() -> None:
    """A DAP-19 ReportMetadata has a public extension list (two more bytes when empty)."""
    ct = HpkeCiphertext(1, b"e", b"p")
    for wire, metadata_hex in (
        (Dap09Wire(JANUS_TASK, 3600), f"{RID_A_HEX} 0000000000000115"),
        (_dap19(), f"{RID_A_HEX} 0000000000000115 0000"),
    ):
        report = wire.report(wire.report_metadata(RID_A, 277), b"", ct, ct)
        encoded = report.encode()
        assert encoded.startswith(unhex(metadata_hex + " 00000000"))
        assert wire.decode_report(encoded) == report
