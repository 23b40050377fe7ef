"""A VDAF-20 `VdafSpec` as a DAP-19 TaskConfiguration names it, and back (DAP-19 App. B;
VDAF-20 §10; digest §3).

A TaskConfiguration carries `vdaf_type` (u32) and `vdaf_configuration` (opaque<0..2^16-1>).
The registered Prio3 codepoints are the algorithm identifiers of `shared.vdaf.prio3_20`
(`shared.dap.messages19.VdafType` is defined from them), and their configurations the
big-endian fields of `messages19.VDAF_CONFIG_FIELDS`:

| VdafSpec (VDAF-20) | vdaf_type | vdaf_configuration |
|---|---|---|
| Prio3Count | 0x00000001 | empty |
| Prio3Sum | 0x00000002 | u64 max_measurement |
| Prio3SumVec | 0x00000003 | u32 length, u64 max_measurement, u32 chunk_length |
| Prio3Histogram | 0x00000004 | u32 length, u32 chunk_length |
| Prio3MultihotCountVec | 0x00000005 | u32 length, u32 chunk_length, u64 max_weight |
| Prio3SumVecField64Multiproof | 0xFFFF1003 (private) | the SumVec fields, then u8 proofs |

The private SumVec-over-Field64-with-several-proofs uses Janus's codepoint and layout
(digest §3), the only deployed encoding of it; a configuration naming any other VDAF (Poplar1,
another private codepoint) has no `VdafSpec` here, and a participant opts out of such a task.
"""

from __future__ import annotations

from typing import Final

from shared.dap.messages19 import VDAF_CONFIG_FIELDS, VdafConfig, VdafType
from shared.vdaf.spec import VdafSpec

#: Janus's private codepoint for Prio3SumVec over Field64 with several proofs (digest §3).
VDAF_TYPE_SUM_VEC_FIELD64_MULTIPROOF: Final = 0xFFFF1003

_REGISTERED: Final = {
    "Prio3Count": VdafType.PRIO3_COUNT,
    "Prio3Sum": VdafType.PRIO3_SUM,
    "Prio3SumVec": VdafType.PRIO3_SUM_VEC,
    "Prio3Histogram": VdafType.PRIO3_HISTOGRAM,
    "Prio3MultihotCountVec": VdafType.PRIO3_MULTIHOT_COUNT_VEC,
}
_NAMES: Final = {codepoint: name for name, codepoint in _REGISTERED.items()}
_PROOFS_WIDTH: Final = 1

__all__ = ["VDAF_TYPE_SUM_VEC_FIELD64_MULTIPROOF", "vdaf_codepoint", "vdaf_spec"]


def vdaf_codepoint(spec: VdafSpec) -> tuple[int, bytes]:
    """`(vdaf_type, vdaf_configuration)` of a VDAF-20 spec (ValueError for a VDAF-08 one)."""
    if spec.draft != "VDAF-20":
        raise ValueError(f"a DAP-19 task runs VDAF-20, not {spec.draft}")
    params = spec.model_dump(exclude_none=True, exclude={"type", "version"})
    registered = _REGISTERED.get(spec.type)
    if registered is not None:
        return registered, VdafConfig.of(registered, **params).configuration()
    proofs = params.pop("proofs")
    sum_vec = VdafConfig.of(VdafType.PRIO3_SUM_VEC, **params).configuration()
    return VDAF_TYPE_SUM_VEC_FIELD64_MULTIPROOF, sum_vec + proofs.to_bytes(_PROOFS_WIDTH, "big")


def vdaf_spec(vdaf_type: int, configuration: bytes) -> VdafSpec:
    """The VDAF-20 spec a TaskConfiguration names (ValueError for an unknown VDAF, a
    configuration of the wrong length or parameters `VdafSpec` refuses)."""
    name = _NAMES.get(vdaf_type)  # type: ignore[call-overload]
    if name is not None:
        config = VdafConfig.parse(VdafType(vdaf_type), configuration)
        params = {field: config[field] for field, _ in VDAF_CONFIG_FIELDS[config.vdaf_type]}
        return VdafSpec(version="VDAF-20", type=name, **params)
    if vdaf_type == VDAF_TYPE_SUM_VEC_FIELD64_MULTIPROOF:
        config = VdafConfig.parse(VdafType.PRIO3_SUM_VEC, configuration[:-_PROOFS_WIDTH])
        return VdafSpec(
            version="VDAF-20",
            type="Prio3SumVecField64Multiproof",
            length=config["length"],
            max_measurement=config["max_measurement"],
            chunk_length=config["chunk_length"],
            proofs=int.from_bytes(configuration[-_PROOFS_WIDTH:], "big"),
        )
    raise ValueError(f"no VDAF-20 Prio3 has the codepoint 0x{vdaf_type:08x}")
