"""A VDAF named by its parameters, as tasks, recipes and the interop API carry it.

`VdafSpec` is the JSON-friendly description (type plus parameters); `instance()` builds the Prio3
object. The type names are those of the DAP interop test design (draft-dcook-ppm-dap-interop-
test-design-07 §4.2.1) where one exists; the two private variants use the VDAF-08 reference
code's names.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from shared.vdaf.prio3 import (
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
    "Prio3SumVecField64Multiproof",
]

_REQUIRED: dict[str, tuple[str, ...]] = {
    "Prio3Count": (),
    "Prio3Sum": ("bits",),
    "Prio3SumVec": ("length", "bits", "chunk_length"),
    "Prio3Histogram": ("length", "chunk_length"),
    "Prio3MultiHotHistogram": ("length", "max_count", "chunk_length"),
    "Prio3SumVecField64Multiproof": ("length", "bits", "chunk_length", "proofs"),
}


class VdafSpec(BaseModel):
    """A Prio3 instance by type and parameters; unused parameters must be absent."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    type: VdafType
    bits: int | None = Field(default=None, ge=1, le=64)
    length: int | None = Field(default=None, ge=1, le=1_000_000)
    chunk_length: int | None = Field(default=None, ge=1, le=1_000_000)
    max_count: int | None = Field(default=None, ge=1)
    proofs: int | None = Field(default=None, ge=2, le=255)

    @model_validator(mode="after")
    def _parameters_match_type(self) -> VdafSpec:
        required = _REQUIRED[self.type]
        for name in ("bits", "length", "chunk_length", "max_count", "proofs"):
            present = getattr(self, name) is not None
            if present != (name in required):
                word = "needs" if name in required else "does not take"
                raise ValueError(f"{self.type} {word} the parameter {name!r}")
        self.instance()
        return self

    def instance(self) -> Prio3:
        """The Prio3 object for two aggregators (ValueError for unusable parameters)."""
        p: dict[str, Any] = self.model_dump(exclude_none=True, exclude={"type"})
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
        params = self.model_dump(exclude_none=True, exclude={"type"})
        return f"{self.type}({', '.join(f'{k}={v}' for k, v in params.items())})"
