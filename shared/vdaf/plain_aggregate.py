"""The aggregate of measurements in the clear: what collecting exactly them must give.

Prio3's aggregate result is the sum of the measurements' truncated encodings, decoded (VDAF-08
and VDAF-20 §7.2: Count and Sum add integers, Histogram counts each index, the vectors add
coordinatewise), so it is computed here without any field arithmetic: the oracle a simulator
keeps while it uploads and a test or benchmark sets against what the collector got. A running
total, added one measurement at a time and merged across processes: its size is the VDAF's
output length, whatever the number of measurements.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from shared.vdaf.spec import VdafSpec

__all__ = ["PlainAggregate"]

#: The VDAFs whose aggregate is one integer.
_SCALAR = ("Prio3Count", "Prio3Sum")


@dataclass
class PlainAggregate:
    """The running plain-text aggregate of `spec`'s measurements, and how many were added."""

    spec: VdafSpec
    reports: int = 0
    #: One coordinate for Count and Sum, the vector's for the others (Python integers: a sum
    #: of many 64-bit measurements outgrows a machine word).
    totals: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.totals:
            scalar = self.spec.type in _SCALAR
            self.totals = [0] * (1 if scalar else (self.spec.length or 0))

    @classmethod
    def of(cls, spec: VdafSpec, measurements: Iterable[int | Sequence[int]]) -> PlainAggregate:
        total = cls(spec)
        for measurement in measurements:
            total.add(measurement)
        return total

    def add(self, measurement: int | Sequence[int]) -> None:
        """Add one valid measurement (an integer for Count, Sum and Histogram's index, a
        list for the vectors)."""
        self.reports += 1
        if isinstance(measurement, Sequence):
            for i, value in enumerate(measurement):
                if value:
                    self.totals[i] += int(value)
        elif self.spec.type == "Prio3Histogram":
            self.totals[int(measurement)] += 1
        else:
            self.totals[0] += int(measurement)

    def merge(self, other: PlainAggregate) -> None:
        """Add another total of the same VDAF (another process's share of a population)."""
        if other.spec != self.spec:
            raise ValueError("plain aggregates of different VDAFs do not add")
        self.reports += other.reports
        self.totals = [a + b for a, b in zip(self.totals, other.totals, strict=True)]

    @property
    def result(self) -> int | list[int]:
        """The aggregate result as the collector decodes it: an integer for Count and Sum, a
        list otherwise."""
        if self.spec.type in _SCALAR:
            return self.totals[0]
        return list(self.totals)
