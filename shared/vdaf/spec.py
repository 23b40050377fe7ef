"""A VDAF named by its parameters, as tasks, recipes and the interop API carry it.

`VdafSpec` is the JSON-friendly description (draft, type plus parameters); `instance()` builds
the Prio3 object. The type names are those of the DAP interop test design (draft-dcook-ppm-dap-
interop-test-design-07 §4.2.1) where one exists; the private variants use the reference code's
names. `version` picks the draft: absent (the default) is VDAF-08, "VDAF-20" is VDAF-20, whose
Sum and SumVec take `max_measurement` instead of `bits` and whose multi-hot vector is the
registered Prio3MultihotCountVec with `max_weight`.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from shared.vdaf import prio3_20
from shared.vdaf.field import Field64
from shared.vdaf.prio3 import (
    VERIFY_KEY_SIZE,
    Prio3,
    prio3_count,
    prio3_histogram,
    prio3_multihot_histogram,
    prio3_sum,
    prio3_sum_vec,
    prio3_sum_vec_multiproof,
)

VdafType = Literal[
    "Prio3Count",
    "Prio3Sum",
    "Prio3SumVec",
    "Prio3Histogram",
    "Prio3MultiHotHistogram",
    "Prio3MultihotCountVec",
    "Prio3SumVecField64Multiproof",
]

VdafVersion = Literal["VDAF-08", "VDAF-20"]

_PARAMETERS = (
    "bits",
    "max_measurement",
    "length",
    "chunk_length",
    "max_count",
    "max_weight",
    "proofs",
)

_REQUIRED_08: dict[str, tuple[str, ...]] = {
    "Prio3Count": (),
    "Prio3Sum": ("bits",),
    "Prio3SumVec": ("length", "bits", "chunk_length"),
    "Prio3Histogram": ("length", "chunk_length"),
    "Prio3MultiHotHistogram": ("length", "max_count", "chunk_length"),
    "Prio3SumVecField64Multiproof": ("length", "bits", "chunk_length", "proofs"),
}

#: VDAF-20 bounds integers by a maximum instead of a bit width, and registers the multi-hot
#: vector as Prio3MultihotCountVec bounded by max_weight (VDAF-20 §7.4).
_RENAMED_IN_20 = {
    "bits": "max_measurement",
    "max_count": "max_weight",
    "Prio3MultiHotHistogram": "Prio3MultihotCountVec",
}

_REQUIRED: dict[VdafVersion, dict[str, tuple[str, ...]]] = {
    "VDAF-08": _REQUIRED_08,
    "VDAF-20": {
        _RENAMED_IN_20.get(name, name): tuple(_RENAMED_IN_20.get(p, p) for p in params)
        for name, params in _REQUIRED_08.items()
    },
}


class VdafSpec(BaseModel):
    """A Prio3 instance by type and parameters; unused parameters must be absent."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    version: VdafVersion | None = None
    type: VdafType
    bits: int | None = Field(default=None, ge=1, le=64)
    max_measurement: int | None = Field(default=None, ge=1, lt=2**64)
    length: int | None = Field(default=None, ge=1, le=1_000_000)
    chunk_length: int | None = Field(default=None, ge=1, le=1_000_000)
    max_count: int | None = Field(default=None, ge=1)
    max_weight: int | None = Field(default=None, ge=1)
    proofs: int | None = Field(default=None, ge=2, le=255)

    @model_validator(mode="after")
    def _parameters_match_type(self) -> VdafSpec:
        required = _REQUIRED[self.draft].get(self.type)
        if required is None:
            raise ValueError(f"{self.draft} has no {self.type}")
        for name in _PARAMETERS:
            present = getattr(self, name) is not None
            if present != (name in required):
                word = "needs" if name in required else "does not take"
                raise ValueError(f"{self.type} {word} the parameter {name!r}")
        self.instance()
        return self

    @property
    def draft(self) -> VdafVersion:
        return self.version or "VDAF-08"

    @property
    def verify_key_size(self) -> int:
        """The verify key's length in bytes: the draft's XOF seed size (16 for 08, 32 for 20)."""
        return prio3_20.VERIFY_KEY_SIZE if self.draft == "VDAF-20" else VERIFY_KEY_SIZE

    @property
    def max_value(self) -> int:
        """The largest integer one coordinate of a measurement may take: 2^bits - 1 (VDAF-08)
        or max_measurement (VDAF-20), 1 for the 0/1 circuits."""
        if self.bits is not None:
            return (1 << self.bits) - 1
        return 1 if self.max_measurement is None else self.max_measurement

    @property
    def max_ones(self) -> int | None:
        """The multi-hot bound, max_count (VDAF-08) or max_weight (VDAF-20); None otherwise."""
        return self.max_count if self.max_count is not None else self.max_weight

    @property
    def multihot(self) -> bool:
        """Whether this is the multi-hot vector (MultiHotHistogram, MultihotCountVec)."""
        return self.max_ones is not None

    @classmethod
    def of_multihot(
        cls, length: int, max_ones: int, chunk_length: int, draft: VdafVersion = "VDAF-08"
    ) -> VdafSpec:
        """The multi-hot vector of `draft`: at most `max_ones` of `length` bits set."""
        if draft == "VDAF-20":
            return cls(
                version=draft,
                type="Prio3MultihotCountVec",
                length=length,
                max_weight=max_ones,
                chunk_length=chunk_length,
            )
        return cls(
            type="Prio3MultiHotHistogram",
            length=length,
            max_count=max_ones,
            chunk_length=chunk_length,
        )

    @classmethod
    def of_histogram(
        cls, length: int, chunk_length: int, draft: VdafVersion = "VDAF-08"
    ) -> VdafSpec:
        """Prio3Histogram of `draft` (its parameters are the same in both)."""
        version = draft if draft == "VDAF-20" else None
        return cls(version=version, type="Prio3Histogram", length=length, chunk_length=chunk_length)

    def zero_measurement(self) -> int | list[int] | None:
        """The measurement that adds nothing to the aggregate (a dummy report, 001 §4.6); None
        for Histogram, whose measurement is exactly one bucket."""
        if self.type in ("Prio3Count", "Prio3Sum"):
            return 0
        if self.type == "Prio3Histogram" or self.length is None:
            return None
        return [0] * self.length

    def instance(self) -> Prio3:
        """The Prio3 object for two aggregators (ValueError for unusable parameters)."""
        p: dict[str, Any] = self.model_dump(exclude_none=True, exclude={"type", "version"})
        if self.draft == "VDAF-20":
            return _instance_20(self.type, p)
        if self.type == "Prio3Count":
            return prio3_count()
        if self.type == "Prio3Sum":
            return prio3_sum(p["bits"])
        if self.type == "Prio3SumVec":
            return prio3_sum_vec(p["length"], p["bits"], p["chunk_length"])
        if self.type == "Prio3Histogram":
            return prio3_histogram(p["length"], p["chunk_length"])
        if self.type == "Prio3MultiHotHistogram":
            return prio3_multihot_histogram(p["length"], p["max_count"], p["chunk_length"])
        return prio3_sum_vec_multiproof(p["length"], p["bits"], p["chunk_length"], p["proofs"])

    def describe(self) -> str:
        params = self.model_dump(exclude_none=True, exclude={"type", "version"})
        described = f"{self.type}({', '.join(f'{k}={v}' for k, v in params.items())})"
        return f"{described} [{self.version}]" if self.version else described


def _instance_20(vdaf_type: str, p: dict[str, Any]) -> Prio3:
    if vdaf_type == "Prio3Count":
        return prio3_20.prio3_count()
    if vdaf_type == "Prio3Sum":
        return prio3_20.prio3_sum(p["max_measurement"])
    if vdaf_type == "Prio3SumVec":
        return prio3_20.prio3_sum_vec(p["length"], p["max_measurement"], p["chunk_length"])
    if vdaf_type == "Prio3Histogram":
        return prio3_20.prio3_histogram(p["length"], p["chunk_length"])
    if vdaf_type == "Prio3MultihotCountVec":
        return prio3_20.prio3_multihot_count_vec(p["length"], p["max_weight"], p["chunk_length"])
    return prio3_20.prio3_sum_vec_with_multiproof(
        Field64, p["proofs"], p["length"], p["max_measurement"], p["chunk_length"]
    )
