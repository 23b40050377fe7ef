"""VDAF-20 specs as a DAP-19 TaskConfiguration names them: the codepoints and configuration
bytes of the digest's table (dap-19.md §3, DAP-19 App. B), written out by hand here."""

from __future__ import annotations

import pytest

from shared.dap.messages19 import TaskConfiguration, VdafType
from shared.dap.vdaf_codepoints import vdaf_codepoint, vdaf_spec
from shared.vdaf import prio3_20
from shared.vdaf.spec import VdafSpec


def _v20(**kw: object) -> VdafSpec:
    return VdafSpec.model_validate({"version": "VDAF-20", **kw})


CASES = [
    (_v20(type="Prio3Count"), 0x00000001, ""),
    (_v20(type="Prio3Sum", max_measurement=255), 0x00000002, "00000000000000ff"),
    (
        _v20(type="Prio3SumVec", length=10, max_measurement=255, chunk_length=9),
        0x00000003,
        "0000000a00000000000000ff00000009",
    ),
    (_v20(type="Prio3Histogram", length=4, chunk_length=2), 0x00000004, "0000000400000002"),
    (
        _v20(type="Prio3MultihotCountVec", length=4, chunk_length=2, max_weight=2),
        0x00000005,
        "00000004000000020000000000000002",
    ),
    # Janus's private Prio3SumVecField64MultiproofHmacSha256Aes128 layout: SumVec fields + u8.
    (
        _v20(
            type="Prio3SumVecField64Multiproof",
            length=3,
            max_measurement=7,
            chunk_length=2,
            proofs=3,
        ),
        0xFFFF1003,
        "0000000300000000000000070000000203",
    ),
]


@pytest.mark.parametrize(("spec", "vdaf_type", "config_hex"), CASES)
def test_codepoint_and_configuration_bytes(spec: VdafSpec, vdaf_type: int, config_hex: str) -> None:
    assert vdaf_codepoint(spec) == (vdaf_type, bytes.fromhex(config_hex))
    assert vdaf_spec(vdaf_type, bytes.fromhex(config_hex)) == spec


def test_registered_codepoints_are_the_prio3_algorithm_ids() -> None:
    # VDAF-20 §10 numbers, typed out: one definition serves the DST and the TaskConfiguration.
    assert [int(t) for t in VdafType] == [1, 2, 3, 4, 5, 6]
    assert int(VdafType.PRIO3_HISTOGRAM) == prio3_20.ALGO_PRIO3_HISTOGRAM == 4
    assert prio3_20.prio3_sum(255).ID == VdafType.PRIO3_SUM


def test_refusals() -> None:
    with pytest.raises(ValueError, match="VDAF-20"):
        vdaf_codepoint(VdafSpec(type="Prio3Count"))  # VDAF-08: no DAP-19 codepoint
    with pytest.raises(ValueError, match="0x00000006"):
        vdaf_spec(6, b"\x00\x10")  # Poplar1: registered, not run here
    with pytest.raises(ValueError, match="configuration is 8 bytes"):
        vdaf_spec(2, b"\x00" * 7)
    with pytest.raises(ValueError):
        vdaf_spec(0xFFFF1003, b"")
    with pytest.raises(ValueError):
        vdaf_spec(2, b"\x00" * 8)  # max_measurement 0: VdafSpec refuses it


def test_janus_known_answer_names_prio3_count() -> None:
    # The digest's §3 known answer (Janus messages/src/tests/task.rs).
    raw = bytes.fromhex(
        "06666f6f626172"
        "0014"
        + b"https://example.com/".hex()
        + "001c"
        + b"https://another.example.com/".hex()
        + "0000000000000e10"
        "0000000000002710"
        "01"
        "0000"
        "00000001"
        "0000"
        "0014"
        "0001"
        "0010"
        "0000000000000115"
        "000000000000001c"
    )
    config = TaskConfiguration.decode(raw)
    assert vdaf_spec(config.vdaf_type, config.vdaf_configuration) == _v20(type="Prio3Count")
