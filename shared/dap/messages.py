"""Every DAP-09 wire message, the VDAF-08 ping-pong `Message`, and what DAP-19 shares with them.

DAP-19 messages live in `shared.dap.messages19`. The structures whose wire form did not change
(Interval, Url, HpkeCiphertext, HpkeConfig, HpkeConfigList, Extension, Role, PingPongMessage,
AggregateShare) are defined once, here, and used by both. Where only a nested type or a length
bound changed, both versions' classes derive from one generic base defined here (`BaseReport`,
`BaseReportShare`, `BaseReportInit`, `BaseReportResp`, `BaseReportContinue`): the nested type
comes from a `_decode_*` class method or a class attribute, the smallest payload from
`PAYLOAD_MIN_LEN`.

Section references are to draft-ietf-ppm-dap-09 ("DAP §") and to the project digest
/work/shared/specs/dap-09.md ("digest §"):

- basic types: Interval, Url, HpkeCiphertext, Role — DAP §4 (digest §1)
- query types: QueryType, FixedSizeQueryType, FixedSizeQuery, Query, PartialBatchSelector,
  BatchSelector — DAP §4.1 (digest §6.1, §7.1)
- upload: HpkeConfig, HpkeConfigList — DAP §4.4.1 (digest §5.1); ReportMetadata, Report,
  Extension, PlaintextInputShare, InputShareAad — DAP §4.4.2 (digest §5.2)
- aggregation: ReportShare, PrepareInit, AggregationJobInitReq — DAP §4.5.1.1;
  PrepareRespState, PrepareError, PrepareResp, AggregationJobResp — DAP §4.5.1.2;
  PrepareContinue, AggregationJobContinueReq — DAP §4.5.2.1 (digest §6.1)
- collection: CollectionReq, Collection — DAP §4.6.1; AggregateShareReq, AggregateShare —
  DAP §4.6.2; AggregateShareAad — DAP §4.6.4 (digest §7.1)
- PingPongMessage (`Message`, with MessageType) — VDAF-08 §5.8 (digest §9)

Every struct is a frozen dataclass with `encode() -> bytes`, `decode(data) -> Self` (whole
buffer, strict) and `_decode_from(decoder)` for nesting. Variable-length fields are checked
against their declared range on both encode (`ValueError`) and decode (`DecodeError`).
Constructors check only what keeps the object self-consistent (the variant of a `select`),
so decoding stays cheap.

Application-level checks done here because they are plain wire invariants:
- `HpkeConfigList` rejects duplicate config ids on decode and encode (DAP §4.4.1: ids
  "MUST be distinct"), so `HpkeConfigList.find` is unambiguous.
- `Interval` rejects `start + duration` beyond the uint64 Time range.
Left to the protocol layer: extension types (any uint16 decodes; DAP §4.5.1.4 makes unknown
or repeated ones a per-report `invalid_message`), `AggregationJobContinueReq.step == 0`, and
the ping-pong payload inside `PrepareInit`/`PrepareResp`/`PrepareContinue`, which stays opaque
bytes (`PingPongMessage.decode(payload)`) so one bad payload rejects one report, not the job.
"""

from __future__ import annotations

import struct
from abc import abstractmethod
from collections.abc import Hashable, Iterable
from dataclasses import dataclass
from enum import IntEnum
from typing import Any, ClassVar, Final, Generic, NamedTuple, Protocol, Self, TypeVar, cast

from shared.codec import (
    U32_MAX,
    U64_MAX,
    Buffer,
    DecodeError,
    Decoder,
    Encoder,
    TlsStruct,
    decode_all,
)
from shared.dap.ids import BatchId, ReportId, TaskId

# Media types (DAP-09 §8.1). Sent exactly, with no parameters: divviup-ts compares them verbatim.
MEDIA_HPKE_CONFIG_LIST: Final = "application/dap-hpke-config-list"

MEDIA_REPORT: Final = "application/dap-report"

MEDIA_AGGREGATION_JOB_INIT_REQ: Final = "application/dap-aggregation-job-init-req"

MEDIA_AGGREGATION_JOB_RESP: Final = "application/dap-aggregation-job-resp"

MEDIA_AGGREGATION_JOB_CONTINUE_REQ: Final = "application/dap-aggregation-job-continue-req"

MEDIA_AGGREGATE_SHARE_REQ: Final = "application/dap-aggregate-share-req"

MEDIA_AGGREGATE_SHARE: Final = "application/dap-aggregate-share"

MEDIA_COLLECT_REQ: Final = "application/dap-collect-req"

MEDIA_COLLECTION: Final = "application/dap-collection"

#: Header carrying the shared bearer secret between parties (interop draft §4.2, DAP-09 §3.1).
DAP_AUTH_HEADER: Final = "DAP-Auth-Token"

#: Roles (DAP-09 §4.1), as carried in HPKE info strings.
ROLE_COLLECTOR: Final = 0

ROLE_CLIENT: Final = 1

ROLE_LEADER: Final = 2

ROLE_HELPER: Final = 3

#: Query types (DAP-09 §4.1).
QUERY_TYPE_TIME_INTERVAL: Final = 1

QUERY_TYPE_FIXED_SIZE: Final = 2

#: Fixed-size query subtypes (DAP-09 §4.1).
FIXED_SIZE_BY_BATCH_ID: Final = 0

FIXED_SIZE_CURRENT_BATCH: Final = 1

#: Size of the report-ID checksum in AggregateShareReq: XOR of SHA-256(report_id) (DAP-09 §4.6.2).
REPORT_ID_CHECKSUM_SIZE: Final = 32


__all__ = [
    "AggregateShare",
    "AggregateShareAad",
    "AggregateShareReq",
    "AggregationJobContinueReq",
    "AggregationJobInitReq",
    "AggregationJobResp",
    "BaseReport",
    "BaseReportContinue",
    "BaseReportInit",
    "BaseReportResp",
    "BaseReportShare",
    "BatchSelector",
    "Collection",
    "CollectionReq",
    "Extension",
    "ExtensionType",
    "FixedSizeQuery",
    "FixedSizeQueryType",
    "HpkeCiphertext",
    "HpkeConfig",
    "HpkeConfigList",
    "InputShareAad",
    "Interval",
    "MessageType",
    "PartialBatchSelector",
    "PingPongMessage",
    "PlaintextInputShare",
    "PrepareContinue",
    "PrepareError",
    "PrepareInit",
    "PrepareResp",
    "PrepareRespState",
    "Query",
    "QueryType",
    "Report",
    "ReportMetadata",
    "ReportShare",
    "Role",
    "SealedInit",
    "SealedShare",
    "UploadedReport",
    "Url",
    "first_duplicate",
]


_T = TypeVar("_T", bound=Hashable)
_U32 = struct.Struct(">I")
_Meta = TypeVar("_Meta", bound=TlsStruct)
#: The continue, finish and reject codepoints of every version's report-response enum.
_RESP_CONTINUE, _RESP_FINISH, _RESP_REJECT = 0, 1, 2
_Share = TypeVar("_Share", bound=TlsStruct)
_State = TypeVar("_State", bound=IntEnum)
_Error = TypeVar("_Error", bound=IntEnum)


# --- enums ------------------------------------------------------------------------------------


class Role(IntEnum):
    """``enum { collector(0), client(1), leader(2), helper(3), (255) } Role`` (DAP §4)."""

    COLLECTOR = ROLE_COLLECTOR
    CLIENT = ROLE_CLIENT
    LEADER = ROLE_LEADER
    HELPER = ROLE_HELPER


class QueryType(IntEnum):
    """``enum { reserved(0), time_interval(1), fixed_size(2), (255) } QueryType`` (DAP §4.1).

    `reserved(0)` is deliberately absent: no `select` has a case for it, so it cannot appear
    in a valid message and decodes as an error.
    """

    TIME_INTERVAL = QUERY_TYPE_TIME_INTERVAL
    FIXED_SIZE = QUERY_TYPE_FIXED_SIZE


class FixedSizeQueryType(IntEnum):
    """``enum { by_batch_id(0), current_batch(1), (255) } FixedSizeQueryType`` (DAP §4.1)."""

    BY_BATCH_ID = FIXED_SIZE_BY_BATCH_ID
    CURRENT_BATCH = FIXED_SIZE_CURRENT_BATCH


class ExtensionType(IntEnum):
    """``enum { TBD(0), (65535) } ExtensionType`` (DAP §4.4.2).

    `Extension.extension_type` stays a plain int: unknown types must decode so the
    aggregator can reject that one report with `invalid_message` (DAP §4.5.1.4).
    """

    TBD = 0


class PrepareRespState(IntEnum):
    """``enum { continue(0), finished(1), reject(2), (255) } PrepareRespState`` (DAP §4.5.1.2)."""

    CONTINUE = 0
    FINISHED = 1
    REJECT = 2


class PrepareError(IntEnum):
    """Why an aggregator rejected one report (DAP §4.5.1.2, digest §6.1).

    DAP-09 numbering; later drafts renumbered these, so never reuse newer tables.
    """

    BATCH_COLLECTED = 0
    REPORT_REPLAYED = 1
    REPORT_DROPPED = 2
    HPKE_UNKNOWN_CONFIG_ID = 3
    HPKE_DECRYPT_ERROR = 4
    VDAF_PREP_ERROR = 5
    BATCH_SATURATED = 6
    TASK_EXPIRED = 7
    INVALID_MESSAGE = 8
    REPORT_TOO_EARLY = 9


class MessageType(IntEnum):
    """``enum { initialize(0), continue(1), finish(2), (255) }`` of the ping-pong `Message`
    (VDAF-08 §5.8)."""

    INITIALIZE = 0
    CONTINUE = 1
    FINISH = 2


# --- basic types (DAP §4) ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Interval(TlsStruct):
    """``struct { Time start; Duration duration; } Interval``: [start, start + duration),
    in seconds (DAP §4, digest §1)."""

    start: int
    duration: int

    @property
    def end(self) -> int:
        """The first second after the interval."""
        return self.start + self.duration

    def _encode_into(self, enc: Encoder) -> None:
        if self.start + self.duration > U64_MAX:
            raise ValueError(f"Interval: start {self.start} + duration overflows Time")
        enc.u64(self.start, "Interval.start")
        enc.u64(self.duration, "Interval.duration")

    @classmethod
    def _decode_from(cls, dec: Decoder) -> Self:
        at = dec.offset
        start = dec.u64("Interval.start")
        duration = dec.u64("Interval.duration")
        if start + duration > U64_MAX:
            raise DecodeError(f"Interval: start + duration overflows Time at offset {at}")
        return cls(start, duration)


@dataclass(frozen=True, slots=True)
class Url(TlsStruct):
    """``opaque Url<1..2^16-1>`` (DAP §4). Must be ASCII, as URLs are (RFC 3986)."""

    value: bytes

    def _encode_into(self, enc: Encoder) -> None:
        if not self.value.isascii():
            raise ValueError("Url: not ASCII")
        enc.opaque16(self.value, "Url", min_len=1)

    @classmethod
    def _decode_from(cls, dec: Decoder) -> Self:
        at = dec.offset
        value = dec.opaque16("Url", min_len=1)
        if not value.isascii():
            raise DecodeError(f"Url: not ASCII at offset {at}")
        return cls(value)


@dataclass(frozen=True, slots=True)
class HpkeCiphertext(TlsStruct):
    """``struct { HpkeConfigId config_id; opaque enc<1..2^16-1>; opaque payload<1..2^32-1>; }``
    (DAP §4, digest §1)."""

    config_id: int
    enc: bytes
    payload: bytes

    def _encode_into(self, enc: Encoder) -> None:
        enc.u8(self.config_id, "HpkeCiphertext.config_id")
        enc.opaque16(self.enc, "HpkeCiphertext.enc", min_len=1)
        enc.opaque32(self.payload, "HpkeCiphertext.payload", min_len=1)

    @classmethod
    def _decode_from(cls, dec: Decoder) -> Self:
        return cls(
            dec.u8("HpkeCiphertext.config_id"),
            dec.opaque16("HpkeCiphertext.enc", min_len=1),
            dec.opaque32("HpkeCiphertext.payload", min_len=1),
        )


# --- upload (DAP §4.4) ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class HpkeConfig(TlsStruct):
    """``struct { HpkeConfigId id; HpkeKemId kem_id; HpkeKdfId kdf_id; HpkeAeadId aead_id;
    HpkePublicKey public_key; }`` with ``opaque HpkePublicKey<1..2^16-1>`` (DAP §4.4.1,
    digest §5.1). Algorithm ids stay ints: a list may carry suites this side lacks."""

    id: int
    kem_id: int
    kdf_id: int
    aead_id: int
    public_key: bytes

    def _encode_into(self, enc: Encoder) -> None:
        enc.u8(self.id, "HpkeConfig.id")
        enc.u16(self.kem_id, "HpkeConfig.kem_id")
        enc.u16(self.kdf_id, "HpkeConfig.kdf_id")
        enc.u16(self.aead_id, "HpkeConfig.aead_id")
        enc.opaque16(self.public_key, "HpkeConfig.public_key", min_len=1)

    @classmethod
    def _decode_from(cls, dec: Decoder) -> Self:
        return cls(
            dec.u8("HpkeConfig.id"),
            dec.u16("HpkeConfig.kem_id"),
            dec.u16("HpkeConfig.kdf_id"),
            dec.u16("HpkeConfig.aead_id"),
            dec.opaque16("HpkeConfig.public_key", min_len=1),
        )


def first_duplicate(values: Iterable[_T]) -> _T | None:
    """The first value seen twice, or None: lists whose entries must be distinct (config ids
    here, report ids in DAP-19's aggregation jobs)."""
    seen: set[_T] = set()
    for value in values:
        if value in seen:
            return value
        seen.add(value)
    return None


def _duplicate_config_id(configs: tuple[HpkeConfig, ...]) -> int | None:
    return first_duplicate(config.id for config in configs)


@dataclass(frozen=True, slots=True)
class HpkeConfigList(TlsStruct):
    """``HpkeConfig HpkeConfigList<1..2^16-1>``, most preferred first; ids distinct
    (DAP §4.4.1, digest §5.1)."""

    configs: tuple[HpkeConfig, ...]

    def __post_init__(self) -> None:
        if type(self.configs) is not tuple:
            object.__setattr__(self, "configs", tuple(self.configs))

    def find(self, config_id: int) -> HpkeConfig | None:
        """The config with this id, if listed."""
        for config in self.configs:
            if config.id == config_id:
                return config
        return None

    def _encode_into(self, enc: Encoder) -> None:
        dup = _duplicate_config_id(self.configs)
        if dup is not None:
            raise ValueError(f"HpkeConfigList: config id {dup} listed twice")
        enc.vector16(self.configs, "HpkeConfigList", min_len=1)

    @classmethod
    def _decode_from(cls, dec: Decoder) -> Self:
        at = dec.offset
        configs = tuple(dec.vector16(HpkeConfig._decode_from, "HpkeConfigList", min_len=1))
        dup = _duplicate_config_id(configs)
        if dup is not None:
            raise DecodeError(f"HpkeConfigList: config id {dup} listed twice at offset {at}")
        return cls(configs)


@dataclass(frozen=True, slots=True)
class ReportMetadata(TlsStruct):
    """``struct { ReportID report_id; Time time; } ReportMetadata`` (DAP §4.4.2, digest §5.2)."""

    report_id: ReportId
    time: int

    @property
    def public_extensions(self) -> tuple[Extension, ...]:
        """None: public extensions came with DAP-19."""
        return ()

    def _encode_into(self, enc: Encoder) -> None:
        self.report_id._encode_into(enc)
        enc.u64(self.time, "ReportMetadata.time")

    @classmethod
    def _decode_from(cls, dec: Decoder) -> Self:
        return cls(ReportId._decode_from(dec), dec.u64("ReportMetadata.time"))


@dataclass(frozen=True, slots=True)
class Extension(TlsStruct):
    """``struct { ExtensionType extension_type; opaque extension_data<0..2^16-1>; }``
    (DAP §4.4.2, digest §5.2; unchanged in DAP-19, whose task, aggregation-job and
    collection-job extensions have this same form and derive from this class)."""

    extension_type: int
    extension_data: bytes

    def _encode_into(self, enc: Encoder) -> None:
        name = type(self).__name__
        enc.u16(self.extension_type, f"{name}.extension_type")
        enc.opaque16(self.extension_data, f"{name}.extension_data")

    @classmethod
    def _decode_from(cls, dec: Decoder) -> Self:
        name = cls.__name__
        return cls(dec.u16(f"{name}.extension_type"), dec.opaque16(f"{name}.extension_data"))


@dataclass(frozen=True, slots=True)
class PlaintextInputShare(TlsStruct):
    """``struct { Extension extensions<0..2^16-1>; opaque payload<0..2^32-1>; }``, the HPKE
    plaintext of one input share (DAP §4.4.2, digest §5.2)."""

    extensions: tuple[Extension, ...]
    payload: bytes

    #: DAP-09 allows an empty payload; DAP-19 (`payload<1..2^32-1>`) overrides this.
    PAYLOAD_MIN_LEN: ClassVar[int] = 0

    def __post_init__(self) -> None:
        if type(self.extensions) is not tuple:
            object.__setattr__(self, "extensions", tuple(self.extensions))

    def _encode_into(self, enc: Encoder) -> None:
        enc.vector16(self.extensions, "PlaintextInputShare.extensions")
        enc.opaque32(self.payload, "PlaintextInputShare.payload", self.PAYLOAD_MIN_LEN)

    @classmethod
    def plain_payload(cls, data: Buffer) -> bytes | None:
        """The payload of an encoded share without extensions, read without the struct (the
        checks of a task that asks nothing of extensions need no more); None for any other
        encoding, which `decode` then reads or refuses.

        Most shares have no extensions: two zero bytes, then the payload's length, which is
        all the rest. Read at once, that is a quarter of the Decoder's cost, once per report
        on both aggregators."""
        if (
            type(data) is bytes
            and data[:2] == b"\x00\x00"
            and len(data) >= 6
            and _U32.unpack_from(data, 2)[0] == len(data) - 6 >= cls.PAYLOAD_MIN_LEN
        ):
            return data[6:]
        return None

    @classmethod
    def decode(cls, data: Buffer) -> Self:
        payload = cls.plain_payload(data)
        if payload is not None:
            return cls((), payload)
        # Not super(): `slots=True` makes a new class, which the zero-argument form misses.
        return decode_all(cls, data)

    @classmethod
    def _decode_from(cls, dec: Decoder) -> Self:
        return cls(
            tuple(dec.vector16(Extension._decode_from, "PlaintextInputShare.extensions")),
            dec.opaque32("PlaintextInputShare.payload", cls.PAYLOAD_MIN_LEN),
        )


@dataclass(frozen=True, slots=True)
class InputShareAad(TlsStruct):
    """``struct { TaskID task_id; ReportMetadata report_metadata;
    opaque public_share<0..2^32-1>; }``, the AAD of input-share encryption
    (DAP §4.4.2, digest §5.2)."""

    task_id: TaskId
    report_metadata: ReportMetadata
    public_share: bytes

    def _encode_into(self, enc: Encoder) -> None:
        self.task_id._encode_into(enc)
        self.report_metadata._encode_into(enc)
        enc.opaque32(self.public_share, "InputShareAad.public_share")

    @classmethod
    def _decode_from(cls, dec: Decoder) -> Self:
        return cls(
            TaskId._decode_from(dec),
            ReportMetadata._decode_from(dec),
            dec.opaque32("InputShareAad.public_share"),
        )


@dataclass(frozen=True, slots=True)
class BaseReport(TlsStruct, Generic[_Meta]):
    """``struct { ReportMetadata report_metadata; opaque public_share<0..2^32-1>;
    HpkeCiphertext leader_encrypted_input_share; HpkeCiphertext helper_encrypted_input_share; }``
    in every DAP version; each version's `Report` names its `ReportMetadata`."""

    report_metadata: _Meta
    public_share: bytes
    leader_encrypted_input_share: HpkeCiphertext
    helper_encrypted_input_share: HpkeCiphertext

    @classmethod
    @abstractmethod
    def _decode_metadata(cls, dec: Decoder) -> _Meta: ...

    def _encode_into(self, enc: Encoder) -> None:
        self.report_metadata._encode_into(enc)
        enc.opaque32(self.public_share, "Report.public_share")
        self.leader_encrypted_input_share._encode_into(enc)
        self.helper_encrypted_input_share._encode_into(enc)

    @classmethod
    def _decode_from(cls, dec: Decoder) -> Self:
        return cls(
            cls._decode_metadata(dec),
            dec.opaque32("Report.public_share"),
            HpkeCiphertext._decode_from(dec),
            HpkeCiphertext._decode_from(dec),
        )


class Report(BaseReport[ReportMetadata]):
    """The DAP-09 `Report` (DAP §4.4.2, digest §5.2)."""

    __slots__ = ()

    @classmethod
    def _decode_metadata(cls, dec: Decoder) -> ReportMetadata:
        return ReportMetadata._decode_from(dec)


class AnyMetadata(Protocol):
    """The `ReportMetadata` of any DAP version."""

    @property
    def report_id(self) -> ReportId: ...
    @property
    def time(self) -> int: ...
    @property
    def public_extensions(self) -> tuple[Extension, ...]: ...
    def encode(self) -> bytes: ...


class SealedShare(NamedTuple):
    """One aggregator's sealed input share with the parts of its report that its checks read,
    in any DAP version: what a `Report` or `ReportShare` carries for that aggregator, with the
    `ReportMetadata` also kept encoded, as the input share's AAD binds it. `time` is in the
    version's unit; DAP-09 has no public extensions. DAP-19's leader reads these from an
    UploadRequest without building its structs (`messages19.UploadRequest.read_reports`)."""

    report_id: bytes
    time: int
    public_extensions: tuple[Extension, ...]
    metadata: bytes
    public_share: bytes
    #: The `HpkeCiphertext`'s fields.
    config_id: int
    enc: bytes
    payload: bytes

    @classmethod
    def of(cls, metadata: AnyMetadata, public_share: bytes, ciphertext: HpkeCiphertext) -> Self:
        """From a decoded report's structs."""
        return cls(
            metadata.report_id.value,
            metadata.time,
            metadata.public_extensions,
            metadata.encode(),
            public_share,
            ciphertext.config_id,
            ciphertext.enc,
            ciphertext.payload,
        )


class SealedInit(NamedTuple):
    """One report of an aggregation job's init request as the helper checks it, in any DAP
    version: its sealed input share and the leader's first message (a `PrepareInit`'s or
    `VerifyInit`'s payload)."""

    sealed: SealedShare
    payload: bytes

    @classmethod
    def of(cls, init: BaseReportInit[Any]) -> Self:
        """From a decoded `PrepareInit` or `VerifyInit`."""
        share = init.report_share
        return cls(
            SealedShare.of(share.report_metadata, share.public_share, share.encrypted_input_share),
            init.payload,
        )


class UploadedReport(NamedTuple):
    """One uploaded report as the leader checks and stores it, in any DAP version."""

    #: The leader's own input share and what its checks read of the report.
    leader: SealedShare
    #: The helper's `HpkeCiphertext`, encoded: the leader stores and forwards it as it came.
    helper_encrypted_share: bytes

    @classmethod
    def of(cls, report: BaseReport[Any]) -> Self:
        """From a decoded `Report` of either version."""
        return cls(
            SealedShare.of(
                report.report_metadata, report.public_share, report.leader_encrypted_input_share
            ),
            report.helper_encrypted_input_share.encode(),
        )


# --- batch selection (DAP §4.1) ---------------------------------------------------------------


def _check_batch_id_variant(name: str, query_type: QueryType, batch_id: BatchId | None) -> None:
    if (query_type == QueryType.FIXED_SIZE) != (batch_id is not None):
        raise ValueError(f"{name}: batch_id must be set exactly when query_type is fixed_size")


@dataclass(frozen=True, slots=True)
class PartialBatchSelector(TlsStruct):
    """``struct { QueryType query_type; select (query_type) { case time_interval: Empty;
    case fixed_size: BatchID batch_id; }; }`` (DAP §4.1, digest §6.1)."""

    query_type: QueryType
    batch_id: BatchId | None = None

    def __post_init__(self) -> None:
        _check_batch_id_variant("PartialBatchSelector", self.query_type, self.batch_id)

    @classmethod
    def time_interval(cls) -> Self:
        return cls(QueryType.TIME_INTERVAL)

    @classmethod
    def fixed_size(cls, batch_id: BatchId) -> Self:
        return cls(QueryType.FIXED_SIZE, batch_id)

    def _encode_into(self, enc: Encoder) -> None:
        enc.u8(self.query_type, "PartialBatchSelector.query_type")
        if self.batch_id is not None:
            self.batch_id._encode_into(enc)

    @classmethod
    def _decode_from(cls, dec: Decoder) -> Self:
        query_type = dec.enum8(QueryType, "PartialBatchSelector.query_type")
        if query_type == QueryType.FIXED_SIZE:
            return cls(query_type, BatchId._decode_from(dec))
        return cls(query_type)


@dataclass(frozen=True, slots=True)
class BatchSelector(TlsStruct):
    """``struct { QueryType query_type; select (query_type) { case time_interval:
    Interval batch_interval; case fixed_size: BatchID batch_id; }; }`` (DAP §4.1, digest §7.1)."""

    query_type: QueryType
    batch_interval: Interval | None = None
    batch_id: BatchId | None = None

    def __post_init__(self) -> None:
        _check_batch_id_variant("BatchSelector", self.query_type, self.batch_id)
        if (self.query_type == QueryType.TIME_INTERVAL) != (self.batch_interval is not None):
            raise ValueError("BatchSelector: batch_interval must be set exactly for time_interval")

    @classmethod
    def time_interval(cls, batch_interval: Interval) -> Self:
        return cls(QueryType.TIME_INTERVAL, batch_interval=batch_interval)

    @classmethod
    def fixed_size(cls, batch_id: BatchId) -> Self:
        return cls(QueryType.FIXED_SIZE, batch_id=batch_id)

    def _encode_into(self, enc: Encoder) -> None:
        enc.u8(self.query_type, "BatchSelector.query_type")
        if self.batch_interval is not None:
            self.batch_interval._encode_into(enc)
        if self.batch_id is not None:
            self.batch_id._encode_into(enc)

    @classmethod
    def _decode_from(cls, dec: Decoder) -> Self:
        query_type = dec.enum8(QueryType, "BatchSelector.query_type")
        if query_type == QueryType.FIXED_SIZE:
            return cls(query_type, batch_id=BatchId._decode_from(dec))
        return cls(query_type, batch_interval=Interval._decode_from(dec))


@dataclass(frozen=True, slots=True)
class FixedSizeQuery(TlsStruct):
    """``struct { FixedSizeQueryType query_type; select (query_type) { case by_batch_id:
    BatchID batch_id; case current_batch: Empty; } }`` (DAP §4.1, digest §7.1)."""

    query_type: FixedSizeQueryType
    batch_id: BatchId | None = None

    def __post_init__(self) -> None:
        if (self.query_type == FixedSizeQueryType.BY_BATCH_ID) != (self.batch_id is not None):
            raise ValueError("FixedSizeQuery: batch_id must be set exactly for by_batch_id")

    @classmethod
    def by_batch_id(cls, batch_id: BatchId) -> Self:
        return cls(FixedSizeQueryType.BY_BATCH_ID, batch_id)

    @classmethod
    def current_batch(cls) -> Self:
        return cls(FixedSizeQueryType.CURRENT_BATCH)

    def _encode_into(self, enc: Encoder) -> None:
        enc.u8(self.query_type, "FixedSizeQuery.query_type")
        if self.batch_id is not None:
            self.batch_id._encode_into(enc)

    @classmethod
    def _decode_from(cls, dec: Decoder) -> Self:
        query_type = dec.enum8(FixedSizeQueryType, "FixedSizeQuery.query_type")
        if query_type == FixedSizeQueryType.BY_BATCH_ID:
            return cls(query_type, BatchId._decode_from(dec))
        return cls(query_type)


@dataclass(frozen=True, slots=True)
class Query(TlsStruct):
    """``struct { QueryType query_type; select (query_type) { case time_interval:
    Interval batch_interval; case fixed_size: FixedSizeQuery fixed_size_query; } }``
    (DAP §4.1, digest §7.1)."""

    query_type: QueryType
    batch_interval: Interval | None = None
    fixed_size_query: FixedSizeQuery | None = None

    def __post_init__(self) -> None:
        if (self.query_type == QueryType.TIME_INTERVAL) != (self.batch_interval is not None) or (
            self.query_type == QueryType.FIXED_SIZE
        ) != (self.fixed_size_query is not None):
            raise ValueError("Query: exactly the field of query_type's case must be set")

    @classmethod
    def time_interval(cls, batch_interval: Interval) -> Self:
        return cls(QueryType.TIME_INTERVAL, batch_interval=batch_interval)

    @classmethod
    def fixed_size(cls, fixed_size_query: FixedSizeQuery) -> Self:
        return cls(QueryType.FIXED_SIZE, fixed_size_query=fixed_size_query)

    def _encode_into(self, enc: Encoder) -> None:
        enc.u8(self.query_type, "Query.query_type")
        if self.batch_interval is not None:
            self.batch_interval._encode_into(enc)
        if self.fixed_size_query is not None:
            self.fixed_size_query._encode_into(enc)

    @classmethod
    def _decode_from(cls, dec: Decoder) -> Self:
        query_type = dec.enum8(QueryType, "Query.query_type")
        if query_type == QueryType.FIXED_SIZE:
            return cls(query_type, fixed_size_query=FixedSizeQuery._decode_from(dec))
        return cls(query_type, batch_interval=Interval._decode_from(dec))


# --- aggregation (DAP §4.5) -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BaseReportShare(TlsStruct, Generic[_Meta]):
    """``struct { ReportMetadata report_metadata; opaque public_share<0..2^32-1>;
    HpkeCiphertext encrypted_input_share; }`` in every DAP version; each version's
    `ReportShare` names its `ReportMetadata`."""

    report_metadata: _Meta
    public_share: bytes
    encrypted_input_share: HpkeCiphertext

    @classmethod
    @abstractmethod
    def _decode_metadata(cls, dec: Decoder) -> _Meta: ...

    def _encode_into(self, enc: Encoder) -> None:
        self.report_metadata._encode_into(enc)
        enc.opaque32(self.public_share, "ReportShare.public_share")
        self.encrypted_input_share._encode_into(enc)

    @classmethod
    def _decode_from(cls, dec: Decoder) -> Self:
        return cls(
            cls._decode_metadata(dec),
            dec.opaque32("ReportShare.public_share"),
            HpkeCiphertext._decode_from(dec),
        )


class ReportShare(BaseReportShare[ReportMetadata]):
    """The DAP-09 `ReportShare` (DAP §4.5.1.1, digest §6.1)."""

    __slots__ = ()

    @classmethod
    def _decode_metadata(cls, dec: Decoder) -> ReportMetadata:
        return ReportMetadata._decode_from(dec)


@dataclass(frozen=True, slots=True)
class BaseReportInit(TlsStruct, Generic[_Share]):
    """``struct { ReportShare report_share; opaque payload<PAYLOAD_MIN_LEN..2^32-1>; }``, the
    first message of one report in an aggregation job; `payload` is an encoded
    `PingPongMessage`. DAP-09 calls it `PrepareInit`, DAP-19 `VerifyInit`."""

    report_share: _Share
    payload: bytes

    PAYLOAD_MIN_LEN: ClassVar[int] = 0

    @classmethod
    @abstractmethod
    def _decode_report_share(cls, dec: Decoder) -> _Share: ...

    def _encode_into(self, enc: Encoder) -> None:
        self.report_share._encode_into(enc)
        enc.opaque32(self.payload, f"{type(self).__name__}.payload", self.PAYLOAD_MIN_LEN)

    @classmethod
    def _decode_from(cls, dec: Decoder) -> Self:
        share = cls._decode_report_share(dec)
        return cls(share, dec.opaque32(f"{cls.__name__}.payload", cls.PAYLOAD_MIN_LEN))


class PrepareInit(BaseReportInit[ReportShare]):
    """``struct { ReportShare report_share; opaque payload<0..2^32-1>; }``; `payload` is an
    encoded `PingPongMessage` (DAP §4.5.1.1, digest §6.1)."""

    __slots__ = ()

    @classmethod
    def _decode_report_share(cls, dec: Decoder) -> ReportShare:
        return ReportShare._decode_from(dec)


@dataclass(frozen=True, slots=True)
class AggregationJobInitReq(TlsStruct):
    """``struct { opaque agg_param<0..2^32-1>; PartialBatchSelector part_batch_selector;
    PrepareInit prepare_inits<1..2^32-1>; }`` (DAP §4.5.1.1, digest §6.1)."""

    agg_param: bytes
    part_batch_selector: PartialBatchSelector
    prepare_inits: tuple[PrepareInit, ...]

    def __post_init__(self) -> None:
        if type(self.prepare_inits) is not tuple:
            object.__setattr__(self, "prepare_inits", tuple(self.prepare_inits))

    def _encode_into(self, enc: Encoder) -> None:
        enc.opaque32(self.agg_param, "AggregationJobInitReq.agg_param")
        self.part_batch_selector._encode_into(enc)
        enc.vector32(self.prepare_inits, "AggregationJobInitReq.prepare_inits", min_len=1)

    @classmethod
    def _decode_from(cls, dec: Decoder) -> Self:
        return cls(
            dec.opaque32("AggregationJobInitReq.agg_param"),
            PartialBatchSelector._decode_from(dec),
            tuple(
                dec.vector32(
                    PrepareInit._decode_from, "AggregationJobInitReq.prepare_inits", min_len=1
                )
            ),
        )


@dataclass(frozen=True, slots=True)
class BaseReportResp(TlsStruct, Generic[_State, _Error]):
    """``struct { ReportID report_id; <STATES> state; select (state) {
    case continue: opaque payload<PAYLOAD_MIN_LEN..2^32-1>; case finish: Empty;
    case reject: <ERRORS> error; }; }``: one report's answer in an aggregation job.

    DAP-09 calls it `PrepareResp` (PrepareRespState, PrepareError), DAP-19 `VerifyResp`
    (VerifyRespType, ReportError); both number continue 0, finish 1 and reject 2. Each subclass
    names its two enums, and the state and error must be members of exactly those: a DAP-09
    PrepareError never travels in a DAP-19 message by accident (their codes differ).
    """

    report_id: ReportId
    state: _State
    payload: bytes | None = None
    error: _Error | None = None

    STATES: ClassVar[type[IntEnum]]
    ERRORS: ClassVar[type[IntEnum]]
    #: Wire names of the two fields, for error messages.
    STATE_FIELD: ClassVar[str]
    ERROR_FIELD: ClassVar[str]
    PAYLOAD_MIN_LEN: ClassVar[int] = 0

    def __post_init__(self) -> None:
        name = type(self).__name__
        if type(self.state) is not self.STATES or not (
            self.error is None or type(self.error) is self.ERRORS
        ):
            raise TypeError(
                f"{name}: the state and error must be {self.STATES.__name__} and "
                f"{self.ERRORS.__name__} members"
            )
        if (self.state == _RESP_CONTINUE) != (self.payload is not None) or (
            self.state == _RESP_REJECT
        ) != (self.error is not None):
            raise ValueError(f"{name}: exactly the field of the state's case must be set")

    @classmethod
    def _state(cls, value: int) -> _State:
        # A dict lookup rather than a call of the enum class: a helper answers every report.
        return cast(_State, cls.STATES._value2member_map_[value])

    @classmethod
    def continued(cls, report_id: ReportId, payload: bytes) -> Self:
        return cls(report_id, cls._state(_RESP_CONTINUE), payload=payload)

    @classmethod
    def finished(cls, report_id: ReportId) -> Self:
        return cls(report_id, cls._state(_RESP_FINISH))

    @classmethod
    def rejected(cls, report_id: ReportId, error: _Error) -> Self:
        return cls(report_id, cls._state(_RESP_REJECT), error=error)

    def _encode_into(self, enc: Encoder) -> None:
        name = type(self).__name__
        self.report_id._encode_into(enc)
        enc.u8(self.state, f"{name}.{self.STATE_FIELD}")
        if self.payload is not None:
            enc.opaque32(self.payload, f"{name}.payload", self.PAYLOAD_MIN_LEN)
        if self.error is not None:
            enc.u8(self.error, f"{name}.{self.ERROR_FIELD}")

    @classmethod
    def _decode_from(cls, dec: Decoder) -> Self:
        name = cls.__name__
        report_id = ReportId._decode_from(dec)
        state = cast(_State, dec.enum8(cls.STATES, f"{name}.{cls.STATE_FIELD}"))
        if state == _RESP_CONTINUE:
            payload = dec.opaque32(f"{name}.payload", cls.PAYLOAD_MIN_LEN)
            return cls(report_id, state, payload=payload)
        if state == _RESP_REJECT:
            error = dec.enum8(cls.ERRORS, f"{name}.{cls.ERROR_FIELD}")
            return cls(report_id, state, error=cast(_Error, error))
        return cls(report_id, state)


class PrepareResp(BaseReportResp[PrepareRespState, PrepareError]):
    """``struct { ReportID report_id; PrepareRespState prepare_resp_state;
    select (prepare_resp_state) { case continue: opaque payload<0..2^32-1>;
    case finished: Empty; case reject: PrepareError prepare_error; }; }``
    (DAP §4.5.1.2, digest §6.1)."""

    __slots__ = ()
    STATES = PrepareRespState
    ERRORS = PrepareError
    STATE_FIELD = "prepare_resp_state"
    ERROR_FIELD = "prepare_error"

    @property
    def prepare_resp_state(self) -> PrepareRespState:
        return self.state

    @property
    def prepare_error(self) -> PrepareError | None:
        return self.error


@dataclass(frozen=True, slots=True)
class AggregationJobResp(TlsStruct):
    """``struct { PrepareResp prepare_resps<1..2^32-1>; }`` (DAP §4.5.1.2, digest §6.1)."""

    prepare_resps: tuple[PrepareResp, ...]

    def __post_init__(self) -> None:
        if type(self.prepare_resps) is not tuple:
            object.__setattr__(self, "prepare_resps", tuple(self.prepare_resps))

    def _encode_into(self, enc: Encoder) -> None:
        enc.vector32(self.prepare_resps, "AggregationJobResp.prepare_resps", min_len=1)

    @classmethod
    def _decode_from(cls, dec: Decoder) -> Self:
        return cls(
            tuple(
                dec.vector32(
                    PrepareResp._decode_from, "AggregationJobResp.prepare_resps", min_len=1
                )
            )
        )


@dataclass(frozen=True, slots=True)
class BaseReportContinue(TlsStruct):
    """``struct { ReportID report_id; opaque payload<PAYLOAD_MIN_LEN..2^32-1>; }``, one report's
    message in a continued aggregation job. DAP-09 calls it `PrepareContinue`, DAP-19
    `VerifyContinue`."""

    report_id: ReportId
    payload: bytes

    PAYLOAD_MIN_LEN: ClassVar[int] = 0

    def _encode_into(self, enc: Encoder) -> None:
        self.report_id._encode_into(enc)
        enc.opaque32(self.payload, f"{type(self).__name__}.payload", self.PAYLOAD_MIN_LEN)

    @classmethod
    def _decode_from(cls, dec: Decoder) -> Self:
        report_id = ReportId._decode_from(dec)
        return cls(report_id, dec.opaque32(f"{cls.__name__}.payload", cls.PAYLOAD_MIN_LEN))


class PrepareContinue(BaseReportContinue):
    """``struct { ReportID report_id; opaque payload<0..2^32-1>; }`` (DAP §4.5.2.1,
    digest §6.1)."""

    __slots__ = ()


@dataclass(frozen=True, slots=True)
class AggregationJobContinueReq(TlsStruct):
    """``struct { uint16 step; PrepareContinue prepare_continues<1..2^32-1>; }``
    (DAP §4.5.2.1, digest §6.1)."""

    step: int
    prepare_continues: tuple[PrepareContinue, ...]

    def __post_init__(self) -> None:
        if type(self.prepare_continues) is not tuple:
            object.__setattr__(self, "prepare_continues", tuple(self.prepare_continues))

    def _encode_into(self, enc: Encoder) -> None:
        enc.u16(self.step, "AggregationJobContinueReq.step")
        enc.vector32(
            self.prepare_continues, "AggregationJobContinueReq.prepare_continues", min_len=1
        )

    @classmethod
    def _decode_from(cls, dec: Decoder) -> Self:
        return cls(
            dec.u16("AggregationJobContinueReq.step"),
            tuple(
                dec.vector32(
                    PrepareContinue._decode_from,
                    "AggregationJobContinueReq.prepare_continues",
                    min_len=1,
                )
            ),
        )


# --- collection (DAP §4.6) --------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CollectionReq(TlsStruct):
    """``struct { Query query; opaque agg_param<0..2^32-1>; }`` (DAP §4.6.1, digest §7.1)."""

    query: Query
    agg_param: bytes

    def _encode_into(self, enc: Encoder) -> None:
        self.query._encode_into(enc)
        enc.opaque32(self.agg_param, "CollectionReq.agg_param")

    @classmethod
    def _decode_from(cls, dec: Decoder) -> Self:
        return cls(Query._decode_from(dec), dec.opaque32("CollectionReq.agg_param"))


@dataclass(frozen=True, slots=True)
class Collection(TlsStruct):
    """``struct { PartialBatchSelector part_batch_selector; uint64 report_count;
    Interval interval; HpkeCiphertext leader_encrypted_agg_share;
    HpkeCiphertext helper_encrypted_agg_share; }`` (DAP §4.6.1, digest §7.1)."""

    part_batch_selector: PartialBatchSelector
    report_count: int
    interval: Interval
    leader_encrypted_agg_share: HpkeCiphertext
    helper_encrypted_agg_share: HpkeCiphertext

    def _encode_into(self, enc: Encoder) -> None:
        self.part_batch_selector._encode_into(enc)
        enc.u64(self.report_count, "Collection.report_count")
        self.interval._encode_into(enc)
        self.leader_encrypted_agg_share._encode_into(enc)
        self.helper_encrypted_agg_share._encode_into(enc)

    @classmethod
    def _decode_from(cls, dec: Decoder) -> Self:
        return cls(
            PartialBatchSelector._decode_from(dec),
            dec.u64("Collection.report_count"),
            Interval._decode_from(dec),
            HpkeCiphertext._decode_from(dec),
            HpkeCiphertext._decode_from(dec),
        )


@dataclass(frozen=True, slots=True)
class AggregateShareReq(TlsStruct):
    """``struct { BatchSelector batch_selector; opaque agg_param<0..2^32-1>;
    uint64 report_count; opaque checksum[32]; }`` (DAP §4.6.2, digest §7.1)."""

    batch_selector: BatchSelector
    agg_param: bytes
    report_count: int
    checksum: bytes

    def __post_init__(self) -> None:
        if len(self.checksum) != REPORT_ID_CHECKSUM_SIZE:
            raise ValueError(f"AggregateShareReq: checksum must be {REPORT_ID_CHECKSUM_SIZE} bytes")

    def _encode_into(self, enc: Encoder) -> None:
        self.batch_selector._encode_into(enc)
        enc.opaque32(self.agg_param, "AggregateShareReq.agg_param")
        enc.u64(self.report_count, "AggregateShareReq.report_count")
        enc.fixed(self.checksum, REPORT_ID_CHECKSUM_SIZE, "AggregateShareReq.checksum")

    @classmethod
    def _decode_from(cls, dec: Decoder) -> Self:
        return cls(
            BatchSelector._decode_from(dec),
            dec.opaque32("AggregateShareReq.agg_param"),
            dec.u64("AggregateShareReq.report_count"),
            dec.fixed(REPORT_ID_CHECKSUM_SIZE, "AggregateShareReq.checksum"),
        )


@dataclass(frozen=True, slots=True)
class AggregateShare(TlsStruct):
    """``struct { HpkeCiphertext encrypted_aggregate_share; }`` (DAP §4.6.2, digest §7.1)."""

    encrypted_aggregate_share: HpkeCiphertext

    def _encode_into(self, enc: Encoder) -> None:
        self.encrypted_aggregate_share._encode_into(enc)

    @classmethod
    def _decode_from(cls, dec: Decoder) -> Self:
        return cls(HpkeCiphertext._decode_from(dec))


@dataclass(frozen=True, slots=True)
class AggregateShareAad(TlsStruct):
    """``struct { TaskID task_id; opaque agg_param<0..2^32-1>; BatchSelector batch_selector; }``,
    the AAD of aggregate-share encryption (DAP §4.6.4, digest §7.1, §7.3)."""

    task_id: TaskId
    agg_param: bytes
    batch_selector: BatchSelector

    def _encode_into(self, enc: Encoder) -> None:
        self.task_id._encode_into(enc)
        enc.opaque32(self.agg_param, "AggregateShareAad.agg_param")
        self.batch_selector._encode_into(enc)

    @classmethod
    def _decode_from(cls, dec: Decoder) -> Self:
        return cls(
            TaskId._decode_from(dec),
            dec.opaque32("AggregateShareAad.agg_param"),
            BatchSelector._decode_from(dec),
        )


# --- VDAF-08 ping-pong ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PingPongMessage(TlsStruct):
    """The ping-pong ``Message`` (VDAF-08 §5.8, digest §9)::

        struct { MessageType type; select (type) {
            case initialize: opaque prep_share<0..2^32-1>;
            case continue:   opaque prep_msg<0..2^32-1>; opaque prep_share<0..2^32-1>;
            case finish:     opaque prep_msg<0..2^32-1>; }; } Message;

    Carried as the opaque `payload` of PrepareInit, PrepareResp and PrepareContinue.
    """

    message_type: MessageType
    prep_msg: bytes | None = None
    prep_share: bytes | None = None

    def __post_init__(self) -> None:
        kind = self.message_type
        if (kind == MessageType.INITIALIZE) == (self.prep_msg is not None) or (
            kind == MessageType.FINISH
        ) == (self.prep_share is not None):
            raise ValueError("PingPongMessage: exactly the fields of the type's case must be set")

    @classmethod
    def initialize(cls, prep_share: bytes) -> Self:
        return cls(MessageType.INITIALIZE, prep_share=prep_share)

    @classmethod
    def continued(cls, prep_msg: bytes, prep_share: bytes) -> Self:
        return cls(MessageType.CONTINUE, prep_msg=prep_msg, prep_share=prep_share)

    @classmethod
    def finish(cls, prep_msg: bytes) -> Self:
        return cls(MessageType.FINISH, prep_msg=prep_msg)

    def _encode_into(self, enc: Encoder) -> None:
        enc.u8(self.message_type, "PingPongMessage.type")
        if self.prep_msg is not None:
            enc.opaque32(self.prep_msg, "PingPongMessage.prep_msg")
        if self.prep_share is not None:
            enc.opaque32(self.prep_share, "PingPongMessage.prep_share")

    @staticmethod
    def encode_one(kind: MessageType, field: bytes) -> bytes:
        """The encoding of an `initialize` (`field` its prep_share) or a `finish` (its
        prep_msg) without the object: every report of an aggregation job sends one and
        receives one, and building and encoding the dataclass cost ~5 us a message (#15)."""
        if kind == MessageType.CONTINUE or len(field) > U32_MAX:
            raise ValueError(f"PingPongMessage: not one field of a {kind.name} message")
        return bytes((kind,)) + len(field).to_bytes(4, "big") + field

    @classmethod
    def one_field(cls, data: bytes, kind: MessageType) -> bytes | None:
        """The field of `data` if it is an `initialize` or `finish` message of type `kind`
        (what `encode_one` writes); None if it is a message of another type. Raises
        `DecodeError` as `decode` does when it is no message at all."""
        if len(data) >= 5 and data[0] == kind and int.from_bytes(data[1:5], "big") == len(data) - 5:
            return data[5:]
        # Raises for no message; one that decodes is of another type, as a message of `kind`
        # has exactly the form checked above.
        cls.decode(data)
        return None

    @classmethod
    def _decode_from(cls, dec: Decoder) -> Self:
        kind = dec.enum8(MessageType, "PingPongMessage.type")
        if kind == MessageType.INITIALIZE:
            return cls(kind, prep_share=dec.opaque32("PingPongMessage.prep_share"))
        prep_msg = dec.opaque32("PingPongMessage.prep_msg")
        if kind == MessageType.FINISH:
            return cls(kind, prep_msg=prep_msg)
        return cls(kind, prep_msg=prep_msg, prep_share=dec.opaque32("PingPongMessage.prep_share"))
