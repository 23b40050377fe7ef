"""The wire facts that differ between a DAP-09 and a DAP-19 task, in one place for the client
(`client_sdk.reports`) and the aggregators (`services.aggregator.wire`): pure, no I/O.

| | `Dap09Wire` | `Dap19Wire` |
|---|---|---|
| `Time` on the wire | POSIX seconds | time_precision units (DAP-19 §4.1.1) |
| a new report's time | rounded down to time_precision (DAP-09 §4.4.1) | its unit |
| HPKE info labels | "dap-09 ..." (DAP-09 §4.4.2, §4.6.4) | "dap-19 ..." (DAP-19 §4.4.2, §4.6.7) |
| VDAF application context | none (VDAF-08) | "dap-19" ‖ task_id (digest dap-19.md §10) |
| ReportMetadata, Report | no public extensions | public extensions (DAP-19 §4.4.2) |
| PlaintextInputShare | payload may be empty | payload never empty (DAP-19 §4.4.2) |
| InputShareAad | task_id, metadata, public_share | task_id, TaskConfiguration, metadata, ... |
| AggregateShareAad | `hpke_context.aggregate_share_aad` | task_id, TaskConfiguration, request |

Two conversions from seconds to a `Time` are named apart on purpose. `units` is exact for a
time already on a bucket boundary (every time sagg stores): DAP-09's is the identity, so an
aggregator never moves a client's time. `report_time` is what a client puts in a new report:
DAP-09 asks it to round down to a multiple of time_precision (DAP-09 §4.4.1), DAP-19's unit
already rounds down.

The two AggregateShareAads are built from different request fields (DAP-09's agg_param and
BatchSelector, DAP-19's whole CollectionJobReq), so they are no method of the common `DapWire`.

DAP-19's AADs bind the TaskConfiguration bytes as provisioned (digest §3), never a re-encoding
of the decoded struct: one different byte and no aggregator can decrypt.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Generic, Protocol, TypeVar

from shared.codec import U32_MAX
from shared.dap import hpke_context
from shared.dap import messages as m09
from shared.dap import messages19 as m19
from shared.dap.ids import ReportId, TaskId
from shared.dap.messages import Extension, HpkeCiphertext, Role
from shared.dap.task import DapVersion

__all__ = ["AnyReport", "AnyReportMetadata", "Dap09Wire", "Dap19Wire", "DapWire"]

#: A report of either version (both share `BaseReport`'s fields and encoding).
AnyReport = m09.Report | m19.Report

AnyReportMetadata = m09.ReportMetadata | m19.ReportMetadata

_Meta = TypeVar("_Meta", m09.ReportMetadata, m19.ReportMetadata)
_Report = TypeVar("_Report", bound=m09.BaseReport[Any])


class DapWire(Protocol):
    """One task's version-dependent wire facts (the table of the module docstring)."""

    @property
    def dap(self) -> DapVersion: ...

    @property
    def task_id(self) -> TaskId: ...

    @property
    def time_precision(self) -> int: ...

    @property
    def ctx(self) -> bytes:
        """The VDAF application context."""
        ...

    def seconds(self, time: int) -> int:
        """The first second of a `Time`."""
        ...

    def units(self, seconds: int) -> int:
        """The `Time` of a stored time (on a bucket boundary)."""
        ...

    def report_time(self, seconds: int) -> int:
        """The `Time` a client gives a report made at `seconds`."""
        ...

    def input_share_info(self, role: Role) -> bytes: ...

    def aggregate_share_info(self, role: Role) -> bytes: ...

    def report_metadata(self, report_id: ReportId, time: int) -> AnyReportMetadata: ...

    def input_share_aad(self, metadata: bytes, public_share: bytes) -> bytes:
        """The encoded InputShareAad of a report whose ReportMetadata encodes as `metadata`."""
        ...

    def plaintext_input_share(self, extensions: Sequence[Extension], payload: bytes) -> bytes:
        """An encoded PlaintextInputShare."""
        ...

    def decode_plaintext_input_share(self, data: bytes) -> m09.PlaintextInputShare: ...

    def plain_payload(self, data: bytes) -> bytes | None:
        """The payload of an encoded PlaintextInputShare without extensions, None for any
        other encoding (`PlaintextInputShare.plain_payload`)."""
        ...

    def report(
        self,
        metadata: AnyReportMetadata,
        public_share: bytes,
        leader: HpkeCiphertext,
        helper: HpkeCiphertext,
    ) -> AnyReport: ...

    def decode_report(self, data: bytes) -> AnyReport: ...


@dataclass(frozen=True, slots=True)
class _Version(Generic[_Meta, _Report]):
    """One version's HPKE info labels and report messages (DAP-09 §4.4.2, §4.6.4; DAP-19
    §4.4.2, §4.6.7)."""

    input_share_label: bytes
    aggregate_share_label: bytes
    metadata: type[_Meta]
    report: type[_Report]
    plaintext_input_share: type[m09.PlaintextInputShare]

    def build_report(
        self,
        metadata: AnyReportMetadata,
        public_share: bytes,
        leader: HpkeCiphertext,
        helper: HpkeCiphertext,
    ) -> _Report:
        assert isinstance(metadata, self.metadata)
        return self.report(metadata, public_share, leader, helper)


def _input_share_aad(head: tuple[bytes, ...], public_share: bytes) -> bytes:
    """`head` (the encoded fields before the public share) and ``public_share<0..2^32-1>``:
    joined from encoded parts rather than through a struct, once per report and aggregator."""
    if len(public_share) > U32_MAX:
        raise ValueError("InputShareAad.public_share: longer than 2^32-1 bytes")
    return b"".join((*head, len(public_share).to_bytes(4, "big"), public_share))


class _VersionWire:
    """What both versions do alike over their own labels and messages (`_VERSION`)."""

    __slots__ = ()
    _VERSION: ClassVar[
        _Version[m09.ReportMetadata, m09.Report] | _Version[m19.ReportMetadata, m19.Report]
    ]

    def input_share_info(self, role: Role) -> bytes:
        return hpke_context.input_share_info(role, self._VERSION.input_share_label)

    def aggregate_share_info(self, role: Role) -> bytes:
        return hpke_context.aggregate_share_info(role, self._VERSION.aggregate_share_label)

    def report_metadata(self, report_id: ReportId, time: int) -> AnyReportMetadata:
        return self._VERSION.metadata(report_id, time)

    def plaintext_input_share(self, extensions: Sequence[Extension], payload: bytes) -> bytes:
        return self._VERSION.plaintext_input_share(tuple(extensions), payload).encode()

    def decode_plaintext_input_share(self, data: bytes) -> m09.PlaintextInputShare:
        return self._VERSION.plaintext_input_share.decode(data)

    def plain_payload(self, data: bytes) -> bytes | None:
        return self._VERSION.plaintext_input_share.plain_payload(data)

    def report(
        self,
        metadata: AnyReportMetadata,
        public_share: bytes,
        leader: HpkeCiphertext,
        helper: HpkeCiphertext,
    ) -> AnyReport:
        return self._VERSION.build_report(metadata, public_share, leader, helper)

    def decode_report(self, data: bytes) -> AnyReport:
        return self._VERSION.report.decode(data)


@dataclass(frozen=True, slots=True)
class Dap09Wire(_VersionWire):
    """A DAP-09 task: seconds, "dap-09" labels, no VDAF context."""

    _VERSION = _Version(
        hpke_context.HPKE_INFO_INPUT_SHARE,
        hpke_context.HPKE_INFO_AGGREGATE_SHARE,
        m09.ReportMetadata,
        m09.Report,
        m09.PlaintextInputShare,
    )

    task_id: TaskId
    time_precision: int

    @property
    def dap(self) -> DapVersion:
        return "dap-09"

    @property
    def ctx(self) -> bytes:
        return b""

    def seconds(self, time: int) -> int:
        return time

    def units(self, seconds: int) -> int:
        return seconds

    def report_time(self, seconds: int) -> int:
        return seconds - seconds % self.time_precision

    def input_share_aad(self, metadata: bytes, public_share: bytes) -> bytes:
        # InputShareAad = task_id || ReportMetadata || public_share<0..2^32-1> (DAP-09 §4.4.2).
        return _input_share_aad((self.task_id.value, metadata), public_share)


@dataclass(frozen=True, slots=True)
class Dap19Wire(_VersionWire):
    """A DAP-19 task: `time_precision` units, "dap-19" labels and context, the
    TaskConfiguration's provisioned bytes bound into the AADs."""

    _VERSION = _Version(
        m19.HPKE_INFO_INPUT_SHARE,
        m19.HPKE_INFO_AGGREGATE_SHARE,
        m19.ReportMetadata,
        m19.Report,
        m19.PlaintextInputShare,
    )

    task_id: TaskId
    config: m19.TaskConfiguration
    #: The exact bytes every party binds (never re-encoded: digest §3).
    config_bytes: bytes = field(repr=False)

    @property
    def dap(self) -> DapVersion:
        return "dap-19"

    @property
    def time_precision(self) -> int:
        return self.config.time_precision

    @property
    def ctx(self) -> bytes:
        return m19.vdaf_context(self.task_id)

    def seconds(self, time: int) -> int:
        return m19.seconds_from_time(time, self.time_precision)

    def units(self, seconds: int) -> int:
        return m19.time_from_seconds(seconds, self.time_precision)

    def report_time(self, seconds: int) -> int:
        return self.units(seconds)

    def input_share_aad(self, metadata: bytes, public_share: bytes) -> bytes:
        # InputShareAad = task_id || TaskConfiguration || ReportMetadata ||
        # public_share<0..2^32-1> (DAP-19 §4.4.2), with the configuration's provisioned bytes.
        return _input_share_aad((self.task_id.value, self.config_bytes, metadata), public_share)

    def aggregate_share_aad(self, collection_job_req: bytes) -> bytes:
        """AggregateShareAad = task_id || TaskConfiguration || CollectionJobReq (DAP-19
        §4.6.7): the Collector's request bytes as sent, the configuration as provisioned."""
        return self.task_id.value + self.config_bytes + collection_job_req
