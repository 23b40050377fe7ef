"""Every DAP-19 wire message, with the constants of that version.

Section references are to draft-ietf-ppm-dap-19 ("DAP §", the -18 text plus the PRs merged for
-19) and to the project digest /work/shared/specs/dap-19.md ("digest §"):

- version constants: HPKE info labels, the VDAF application context, the unified
  ``application/ppm-dap;message=...`` media types (DAP §9.1, digest §4), ReportError (digest
  §1.2; the -19 codepoints, not -18's), batch modes, extension and VDAF codepoints
- times: `Time`, `Duration` and every `Interval` count `time_precision` units (DAP §4.1.1,
  digest §1): `time_from_seconds`, `seconds_from_time`
- task: TaskConfiguration, TaskExtension, VdafConfig — DAP §4.2, App. B (digest §3)
- upload: ReportMetadata (with public extensions), Report, PlaintextInputShare (private
  extensions), InputShareAad (binds the TaskConfiguration), UploadRequest, ReportUploadStatus,
  UploadErrors — DAP §4.4.2 (digest §5.2); the report-extension rules in
  `check_report_extensions`
- aggregation: AggregationJobExtension, ReportShare, VerifyInit, AggregationJobInitReq (with
  `verification_key_id`), VerifyResp, AggregationJobResp, VerifyContinue,
  AggregationJobContinueReq — DAP §4.5 (digest §6.1)
- collection: Query, BatchSelector, CollectionJobExtension, CollectionJobReq,
  CollectionJobResp, AggregateShareReq, AggregateShareAad (binds the TaskConfiguration and the
  Collector's request) — DAP §4.6, §5 (digest §7.1, §8)

What did not change from DAP-09 is not redefined: Interval, Url, HpkeCiphertext, HpkeConfig,
HpkeConfigList, Extension, Role, PingPongMessage (VDAF-20's `Message` has VDAF-08's wire form)
and AggregateShare come from `shared.dap.messages` and are re-exported here, so a DAP-19 caller
imports one module. Report, ReportShare, VerifyInit and VerifyContinue share their code with
their DAP-09 counterparts through that module's generic bases.

Decoding is as strict as DAP-09's (`shared.codec`): a value decodes only from its one encoding,
so re-encoding a decoded request gives back the peer's bytes (the aggregate-share AAD binds the
Collector's `CollectionJobReq` bytes). Beyond the wire grammar, a decoder rejects what makes a
whole message invalid (DAP §4.5.3.2, §4.5.4.2; digest §9, "malformed body" is `invalidMessage`):
an empty UploadRequest, AggregationJobInitReq or AggregationJobResp (digest §16 item 11),
report IDs listed twice in one aggregation job, step 0, aggregation-job or task extensions out of
strictly increasing order, a `leader_selected_batch_id` extension whose data is not a BatchID, a
TaskConfiguration with time_precision 0 or a known batch mode or VDAF whose configuration does
not parse. It deliberately accepts what the protocol answers with a different error:
- report extensions in any order or repeated (a per-report `invalid_message`, never the whole
  upload or job; see `check_report_extensions`);
- collection-job extensions in any order (`invalidExtension`, not `invalidMessage`);
- unknown extension types (`unsupported_extension` / `unsupportedExtension`);
- a TaskConfiguration with an unknown batch mode, VDAF or task extension (a participant opts
  out, `TaskConfiguration.opt_out_reasons`, and taskprov answers `invalidTask`);
- a time-interval query of duration 0 (`batchInvalid`, digest §16 item 4, is the Leader's);
- a `leader_selected_batch_id` in any task's job (only the task knows it is time-interval and
  answers `invalidMessage`, digest §16 item 10).

Decided here (digest §16): the AggregationJobInitReq is decoded positionally, whatever the -18
prose says of `verify_inits_length` (item 1); empty UploadRequest, AggregationJobInitReq and
AggregationJobResp are refused on both sides, since an empty response body means "pending"
(item 11); an unknown report extension is `unsupported_extension` (#789) at upload and
aggregation alike, and a receiver treats every `reject` as a drop (item 6). ReportError and
VerifyRespType codes outside DAP-19's tables do not decode, like every enum of the codec: a
response carrying one is malformed as a whole (dap-ts instead maps unknown codes to "unknown").
`HpkeConfigList<10..2^16-1>` needs no code of its own: the shortest HpkeConfig is 10 bytes, so
DAP-09's non-empty list is the same set of encodings.

The messages an aggregator writes or reads once per report also have bulk forms, byte for
byte and refusal for refusal those of the structs (`tests/shared/test_dap19_bulk_codecs.py`):
the leader reads an UploadRequest into the parts it checks and stores (`read_reports`) and
writes its AggregationJobInitReq from those stored parts (`encode_reports`); the helper reads
that request into the parts it checks (`read_inits`) and writes its AggregationJobResp from
plain tuples, which the leader reads back as tuples (`encode_answers`, `decode_answers`). The
readers leave anything unusual (public extensions, a malformed message) to the struct decoder.
"""

from __future__ import annotations

import struct
from abc import abstractmethod
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass
from enum import IntEnum
from itertools import pairwise
from typing import Final, NamedTuple, Self, TypeVar

from shared.codec import U32_MAX, U64_MAX, DecodeError, Decoder, Encoder, TlsStruct
from shared.dap import hpke_context
from shared.dap.ids import REPORT_ID_SIZE, BatchId, ReportId, TaskId
from shared.dap.messages import (
    REPORT_ID_CHECKSUM_SIZE,
    AggregateShare,
    BaseReport,
    BaseReportContinue,
    BaseReportInit,
    BaseReportResp,
    BaseReportShare,
    Extension,
    HpkeCiphertext,
    HpkeConfig,
    HpkeConfigList,
    Interval,
    MessageType,
    PingPongMessage,
    Role,
    SealedInit,
    SealedShare,
    UploadedReport,
    Url,
    first_duplicate,
)
from shared.dap.messages import PlaintextInputShare as _PlaintextInputShare09
from shared.vdaf import prio3_20

#: Version tag of the HPKE info labels and of the VDAF application context (DAP §4.4.2).
DAP_VERSION: Final = b"dap-19"

#: HPKE info labels (DAP §4.4.2, §4.6.7); the role bytes follow (`input_share_info`).
HPKE_INFO_INPUT_SHARE: Final = b"dap-19 input share"

HPKE_INFO_AGGREGATE_SHARE: Final = b"dap-19 aggregate share"

#: The one media type of every DAP-19 body; its `message` parameter names the message (DAP §9.1).
MEDIA_TYPE: Final = "application/ppm-dap"

#: The `version` parameter a DAP-19 media type may carry (DAP §9.1).
MEDIA_TYPE_VERSION: Final = "19"

# Media types (DAP §9.1, digest §4), sent exactly in this form.
MEDIA_HPKE_CONFIG_LIST: Final = "application/ppm-dap;message=hpke-config-list"

MEDIA_UPLOAD_REQ: Final = "application/ppm-dap;message=upload-req"

MEDIA_UPLOAD_ERRORS: Final = "application/ppm-dap;message=upload-errors"

MEDIA_AGGREGATION_JOB_INIT_REQ: Final = "application/ppm-dap;message=aggregation-job-init-req"

MEDIA_AGGREGATION_JOB_RESP: Final = "application/ppm-dap;message=aggregation-job-resp"

MEDIA_AGGREGATION_JOB_CONTINUE_REQ: Final = (
    "application/ppm-dap;message=aggregation-job-continue-req"
)

MEDIA_AGGREGATE_SHARE_REQ: Final = "application/ppm-dap;message=aggregate-share-req"

MEDIA_AGGREGATE_SHARE: Final = "application/ppm-dap;message=aggregate-share"

MEDIA_COLLECTION_JOB_REQ: Final = "application/ppm-dap;message=collection-job-req"

MEDIA_COLLECTION_JOB_RESP: Final = "application/ppm-dap;message=collection-job-resp"

#: Every DAP-19 media type.
MEDIA_TYPES: Final = frozenset(
    {
        MEDIA_HPKE_CONFIG_LIST,
        MEDIA_UPLOAD_REQ,
        MEDIA_UPLOAD_ERRORS,
        MEDIA_AGGREGATION_JOB_INIT_REQ,
        MEDIA_AGGREGATION_JOB_RESP,
        MEDIA_AGGREGATION_JOB_CONTINUE_REQ,
        MEDIA_AGGREGATE_SHARE_REQ,
        MEDIA_AGGREGATE_SHARE,
        MEDIA_COLLECTION_JOB_REQ,
        MEDIA_COLLECTION_JOB_RESP,
    }
)

_MEDIA_PREFIX: Final = MEDIA_TYPE + ";message="


__all__ = [
    "AggregateShare",
    "AggregateShareAad",
    "AggregateShareReq",
    "AggregationJobContinueReq",
    "AggregationJobExtension",
    "AggregationJobExtensionType",
    "AggregationJobInitReq",
    "AggregationJobResp",
    "BatchMode",
    "BatchSelector",
    "CollectionJobExtension",
    "CollectionJobReq",
    "CollectionJobResp",
    "Extension",
    "HpkeCiphertext",
    "HpkeConfig",
    "HpkeConfigList",
    "InputShareAad",
    "Interval",
    "JobInitParts",
    "MessageType",
    "PingPongMessage",
    "PlaintextInputShare",
    "Query",
    "Report",
    "ReportError",
    "ReportMetadata",
    "ReportShare",
    "ReportUploadStatus",
    "Role",
    "TaskConfiguration",
    "TaskExtension",
    "TaskExtensionType",
    "UploadErrors",
    "UploadRequest",
    "Url",
    "VdafConfig",
    "VdafType",
    "VerifyContinue",
    "VerifyInit",
    "VerifyResp",
    "VerifyRespType",
    "aggregate_share_info",
    "check_report_extensions",
    "first_unordered_extension",
    "input_share_info",
    "media_type_message",
    "seconds_from_time",
    "time_from_seconds",
    "vdaf_context",
]


# --- enums ------------------------------------------------------------------------------------


class ReportError(IntEnum):
    """Why one report was rejected, in UploadErrors and VerifyResp (DAP §4.1, digest §1.2).

    The DAP-19 codepoints: #786 deleted -18's task_expired (7), task_not_started (10) and
    outdated_config (11) and renumbered; #784 and #789 added the last two. Byte 0x07 is
    `task_expired` in -18 and `invalid_message` here: never cast a DAP-09 `PrepareError` or a
    -18 code to this enum. `reserved(0)` is absent, so it decodes as an error.
    """

    BATCH_COLLECTED = 1
    REPORT_REPLAYED = 2
    REPORT_DROPPED = 3
    HPKE_UNKNOWN_CONFIG_ID = 4
    HPKE_DECRYPT_ERROR = 5
    VDAF_VERIFY_ERROR = 6
    INVALID_MESSAGE = 7
    REPORT_TOO_EARLY = 8
    UNKNOWN_VERIFICATION_KEY_ID = 9
    UNSUPPORTED_EXTENSION = 10


class BatchMode(IntEnum):
    """``enum { reserved(0), time_interval(1), leader_selected(2), (255) } BatchMode``
    (DAP §4.6.1, §5; digest §7.1, §8)."""

    TIME_INTERVAL = 1
    LEADER_SELECTED = 2


class TaskExtensionType(IntEnum):
    """``enum { reserved(0), task_interval(1), (2^16-1) } TaskExtensionType`` (DAP §4.2)."""

    TASK_INTERVAL = 1


class AggregationJobExtensionType(IntEnum):
    """``enum { reserved(0), leader_selected_batch_id(1), (2^16-1) }`` (DAP §4.5.1, §5.2.2)."""

    LEADER_SELECTED_BATCH_ID = 1


class VerifyRespType(IntEnum):
    """``enum { continue(0), finish(1), reject(2), (255) } VerifyRespType`` (DAP §4.5.1)."""

    CONTINUE = 0
    FINISH = 1
    REJECT = 2


class VdafType(IntEnum):
    """``uint32 VdafType``: the VDAF-20 §10 codepoints DAP App. B gives a configuration for.

    The Prio3 ones are the algorithm identifiers `shared.vdaf.prio3_20` puts into its
    domain-separation tags, defined there once. The DAP-09 / VDAF-08 ids (Prio3Count = 0) are
    not valid here. 0 is reserved and 0xFFFF0000-0xFFFFFFFF private use: those stay plain ints
    in a TaskConfiguration (`shared.dap.vdaf_codepoints` maps the one private VDAF sagg runs).
    """

    PRIO3_COUNT = prio3_20.ALGO_PRIO3_COUNT
    PRIO3_SUM = prio3_20.ALGO_PRIO3_SUM
    PRIO3_SUM_VEC = prio3_20.ALGO_PRIO3_SUM_VEC
    PRIO3_HISTOGRAM = prio3_20.ALGO_PRIO3_HISTOGRAM
    PRIO3_MULTIHOT_COUNT_VEC = prio3_20.ALGO_PRIO3_MULTIHOT_COUNT_VEC
    #: Poplar1 (VDAF-20 §8, §10): registered, but sagg runs no Poplar1.
    POPLAR1 = 0x00000006


_BATCH_MODES: Final = frozenset(BatchMode)

#: Each VDAF's `vdaf_configuration`: field names and big-endian byte widths in wire order
#: (DAP App. B, digest §3). SumVec and MultihotCountVec order their fields differently.
VDAF_CONFIG_FIELDS: Final[dict[VdafType, tuple[tuple[str, int], ...]]] = {
    VdafType.PRIO3_COUNT: (),
    VdafType.PRIO3_SUM: (("max_measurement", 8),),
    VdafType.PRIO3_SUM_VEC: (("length", 4), ("max_measurement", 8), ("chunk_length", 4)),
    VdafType.PRIO3_HISTOGRAM: (("length", 4), ("chunk_length", 4)),
    VdafType.PRIO3_MULTIHOT_COUNT_VEC: (("length", 4), ("chunk_length", 4), ("max_weight", 8)),
    VdafType.POPLAR1: (("bits", 2),),
}


# --- version helpers ----------------------------------------------------------------------------


def input_share_info(server_role: Role) -> bytes:
    """HPKE info of the Client -> `server_role` input share: "dap-19 input share" || 0x01 ||
    role (DAP §4.4.2, digest §5.3)."""
    return hpke_context.input_share_info(server_role, HPKE_INFO_INPUT_SHARE)


def aggregate_share_info(server_role: Role) -> bytes:
    """HPKE info of the `server_role` -> Collector aggregate share: "dap-19 aggregate share" ||
    role || 0x00 (DAP §4.6.7, digest §7.4)."""
    return hpke_context.aggregate_share_info(server_role, HPKE_INFO_AGGREGATE_SHARE)


def vdaf_context(task_id: TaskId) -> bytes:
    """The VDAF application context of a task, "dap-19" || task_id (DAP §4.4.2, digest §10)."""
    return DAP_VERSION + task_id.value


def media_type_message(content_type: str) -> str | None:
    """The DAP-19 message a Content-Type names, e.g. ``"upload-req"``, or None.

    Sent media types are the exact `MEDIA_*` strings; received ones are read leniently, as
    dap-ts does (digest §4): any parameter order, case and white space, a quoted value, and an
    optional ``version=19``. Another version, a repeated or missing `message`, or a message
    DAP-19 does not define gives None.
    """
    main, _, rest = content_type.partition(";")
    if main.strip().lower() != MEDIA_TYPE:
        return None
    params: dict[str, str] = {}
    for param in rest.split(";"):
        if not param.strip():
            continue
        key, sep, value = param.partition("=")
        key = key.strip().lower()
        if not sep or key in params:
            return None
        params[key] = value.strip().removeprefix('"').removesuffix('"').lower()
    if params.pop("version", MEDIA_TYPE_VERSION) != MEDIA_TYPE_VERSION:
        return None
    message = params.get("message")
    if message is None or _MEDIA_PREFIX + message not in MEDIA_TYPES:
        return None
    return message


def time_from_seconds(unix_seconds: int, time_precision: int) -> int:
    """A `Time`: POSIX seconds in whole `time_precision` units, rounded down (DAP §4.1.1)."""
    if time_precision < 1 or unix_seconds < 0:
        raise ValueError("need unix_seconds >= 0 and time_precision >= 1")
    return unix_seconds // time_precision


def seconds_from_time(time: int, time_precision: int) -> int:
    """The first POSIX second of a `Time` (or the length of a `Duration`) (DAP §4.1.1)."""
    if time_precision < 1 or time < 0:
        raise ValueError("need time >= 0 and time_precision >= 1")
    return time * time_precision


def first_unordered_extension(extensions: Sequence[Extension]) -> int | None:
    """The type of the first extension not strictly above its predecessor (out of order or
    repeated), or None: every DAP-19 extension list must be strictly increasing."""
    for before, after in pairwise(extensions):
        if after.extension_type <= before.extension_type:
            return after.extension_type
    return None


def check_report_extensions(
    public: Sequence[Extension],
    private: Sequence[Extension],
    supported: Collection[int] = frozenset(),
) -> ReportError | None:
    """DAP-19's rules for one report's extensions (DAP §4.4.2, §4.5.3.4; digest §5.2, §6.5).

    `public` is the report's `ReportMetadata.public_extensions`, `private` the
    `PlaintextInputShare.extensions` of the checking aggregator's own share, `supported` the
    extension types the deployment implements (none are registered). Returns the per-report
    error, or None: a list out of strictly increasing order, or a type in both lists, is
    `invalid_message`; an unsupported type is `unsupported_extension` (#789).
    """
    if not (public or private):
        # Most reports: nothing to check, and this runs once per report on both aggregators.
        return None
    if first_unordered_extension(public) is not None:
        return ReportError.INVALID_MESSAGE
    if first_unordered_extension(private) is not None:
        return ReportError.INVALID_MESSAGE
    public_types = {ext.extension_type for ext in public}
    private_types = {ext.extension_type for ext in private}
    if public_types & private_types:
        return ReportError.INVALID_MESSAGE
    if not (public_types | private_types) <= set(supported):
        return ReportError.UNSUPPORTED_EXTENSION
    return None


def _freeze(obj: object, name: str) -> None:
    """Store a sequence field of a frozen dataclass as a tuple (hashable, immutable)."""
    value = getattr(obj, name)
    if type(value) is not tuple:
        object.__setattr__(obj, name, tuple(value))


class _Checked(TlsStruct):
    """A struct with invariants beyond its grammar: `_problem` names a violation, which
    `encode` raises as `ValueError` and `decode` as `DecodeError` (with the offset)."""

    __slots__ = ()

    @abstractmethod
    def _problem(self) -> str | None: ...

    def _check_encode(self) -> None:
        problem = self._problem()
        if problem is not None:
            raise ValueError(f"{type(self).__name__}: {problem}")

    def _checked(self, at: int) -> Self:
        problem = self._problem()
        if problem is not None:
            raise DecodeError(f"{type(self).__name__}: {problem} (at offset {at})")
        return self


# --- task configuration (DAP §4.2, App. B) ------------------------------------------------------


class TaskExtension(Extension):
    """``struct { TaskExtensionType extension_type; opaque extension_data<0..2^16-1>; }``
    (DAP §4.2, digest §3)."""

    __slots__ = ()

    @classmethod
    def task_interval(cls, interval: Interval) -> Self:
        """The `task_interval` extension: reports outside `interval` (in time_precision units)
        are rejected."""
        return cls(TaskExtensionType.TASK_INTERVAL, interval.encode())


@dataclass(frozen=True, slots=True)
class VdafConfig:
    """A registered VDAF and its parameters, the parsed `vdaf_type` and `vdaf_configuration`
    of a TaskConfiguration (DAP App. B). `params` follow `VDAF_CONFIG_FIELDS` order."""

    vdaf_type: VdafType
    params: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        _freeze(self, "params")
        fields = VDAF_CONFIG_FIELDS[VdafType(self.vdaf_type)]
        if len(self.params) != len(fields):
            names = ", ".join(name for name, _ in fields) or "no parameters"
            raise ValueError(f"{self.vdaf_type.name} takes {names}")
        for (name, width), value in zip(fields, self.params, strict=True):
            if not 0 <= value < 1 << (8 * width):
                raise ValueError(f"{self.vdaf_type.name}.{name}: {value} does not fit")

    @classmethod
    def of(cls, vdaf_type: VdafType, **params: int) -> Self:
        """By parameter name, e.g. ``VdafConfig.of(VdafType.PRIO3_SUM, max_measurement=255)``."""
        names = [name for name, _ in VDAF_CONFIG_FIELDS[vdaf_type]]
        if set(params) != set(names):
            raise ValueError(f"{vdaf_type.name} takes {', '.join(names) or 'no parameters'}")
        return cls(vdaf_type, tuple(params[name] for name in names))

    def __getitem__(self, name: str) -> int:
        for (field, _), value in zip(VDAF_CONFIG_FIELDS[self.vdaf_type], self.params, strict=True):
            if field == name:
                return value
        raise KeyError(name)

    def configuration(self) -> bytes:
        """The encoded `vdaf_configuration`."""
        fields = VDAF_CONFIG_FIELDS[self.vdaf_type]
        return b"".join(
            value.to_bytes(width, "big")
            for (_, width), value in zip(fields, self.params, strict=True)
        )

    @classmethod
    def parse(cls, vdaf_type: VdafType, configuration: bytes) -> Self:
        """Parse a `vdaf_configuration`; a wrong length is a `ValueError`."""
        fields = VDAF_CONFIG_FIELDS[vdaf_type]
        if len(configuration) != sum(width for _, width in fields):
            raise ValueError(
                f"{vdaf_type.name} configuration is {sum(w for _, w in fields)} bytes,"
                f" got {len(configuration)}"
            )
        params: list[int] = []
        at = 0
        for _, width in fields:
            params.append(int.from_bytes(configuration[at : at + width], "big"))
            at += width
        return cls(vdaf_type, tuple(params))


@dataclass(frozen=True, slots=True)
class TaskConfiguration(_Checked):
    """``struct { opaque task_info<0..2^8-1>; Url leader_aggregator_endpoint;
    Url helper_aggregator_endpoint; TimePrecision time_precision; uint64 min_batch_size;
    BatchMode batch_mode; opaque batch_config<0..2^16-1>; VdafType vdaf_type;
    opaque vdaf_configuration<0..2^16-1>; TaskExtension extensions<0..2^16-1>; }``
    (DAP §4.2, digest §3; task_info may be empty since -19, #787).

    Its encoding is bound into both HPKE AADs, so every party must hold the same bytes. The
    codec is strict and keeps what it does not understand (an unknown batch mode, VDAF or
    extension stays opaque), so decoding and re-encoding gives back the provisioned bytes.
    `time_precision` is in seconds; every Time and Duration of the task is in its units.
    """

    task_info: bytes
    leader_aggregator_endpoint: Url
    helper_aggregator_endpoint: Url
    time_precision: int
    min_batch_size: int
    batch_mode: int
    batch_config: bytes
    vdaf_type: int
    vdaf_configuration: bytes
    extensions: tuple[TaskExtension, ...] = ()

    def __post_init__(self) -> None:
        _freeze(self, "extensions")

    @property
    def task_interval(self) -> Interval | None:
        """The `task_interval` extension's interval (in time_precision units), if present."""
        for ext in self.extensions:
            if ext.extension_type == TaskExtensionType.TASK_INTERVAL:
                return Interval.decode(ext.extension_data)
        return None

    @property
    def vdaf(self) -> VdafConfig | None:
        """The parsed VDAF configuration, or None for a VDAF DAP-19 registers no encoding for."""
        if self.vdaf_type not in VDAF_CONFIG_FIELDS:
            return None
        return VdafConfig.parse(VdafType(self.vdaf_type), self.vdaf_configuration)

    def in_task_interval(self, time: int) -> bool:
        """Whether a report at `time` (units) is inside the task's lifetime (DAP §4.2: without
        `task_interval` a task has no limit)."""
        interval = self.task_interval
        return interval is None or interval.start <= time < interval.end

    def opt_out_reasons(
        self, supported_extensions: Collection[int] = (TaskExtensionType.TASK_INTERVAL,)
    ) -> list[str]:
        """Why a participant implementing only the registered batch modes and VDAFs and the
        `supported_extensions` task extensions must not take part (DAP §4.2; taskprov's
        `invalidTask`). Empty: it may."""
        reasons: list[str] = []
        if self.batch_mode not in _BATCH_MODES:
            reasons.append(f"unknown batch mode {self.batch_mode}")
        if self.vdaf_type not in VDAF_CONFIG_FIELDS:
            reasons.append(f"unknown VDAF type 0x{self.vdaf_type:08x}")
        reasons.extend(
            f"unsupported task extension 0x{ext.extension_type:04x}"
            for ext in self.extensions
            if ext.extension_type not in supported_extensions
        )
        return reasons

    def _problem(self) -> str | None:
        if self.time_precision < 1:
            return "time_precision must be at least 1 second"
        if self.batch_mode in _BATCH_MODES and self.batch_config:
            return f"batch_config must be empty for batch mode {self.batch_mode}"
        unordered = first_unordered_extension(self.extensions)
        if unordered is not None:
            return f"extension 0x{unordered:04x} breaks the strictly increasing order"
        try:
            _ = self.vdaf, self.task_interval
        except ValueError as exc:  # DecodeError included: a task_interval that is no Interval
            return str(exc)
        return None

    def _encode_into(self, enc: Encoder) -> None:
        self._check_encode()
        enc.opaque8(self.task_info, "TaskConfiguration.task_info")
        self.leader_aggregator_endpoint._encode_into(enc)
        self.helper_aggregator_endpoint._encode_into(enc)
        enc.u64(self.time_precision, "TaskConfiguration.time_precision")
        enc.u64(self.min_batch_size, "TaskConfiguration.min_batch_size")
        enc.u8(self.batch_mode, "TaskConfiguration.batch_mode")
        enc.opaque16(self.batch_config, "TaskConfiguration.batch_config")
        enc.u32(self.vdaf_type, "TaskConfiguration.vdaf_type")
        enc.opaque16(self.vdaf_configuration, "TaskConfiguration.vdaf_configuration")
        enc.vector16(self.extensions, "TaskConfiguration.extensions")

    @classmethod
    def _decode_from(cls, dec: Decoder) -> Self:
        at = dec.offset
        return cls(
            dec.opaque8("TaskConfiguration.task_info"),
            Url._decode_from(dec),
            Url._decode_from(dec),
            dec.u64("TaskConfiguration.time_precision"),
            dec.u64("TaskConfiguration.min_batch_size"),
            dec.u8("TaskConfiguration.batch_mode"),
            dec.opaque16("TaskConfiguration.batch_config"),
            dec.u32("TaskConfiguration.vdaf_type"),
            dec.opaque16("TaskConfiguration.vdaf_configuration"),
            tuple(dec.vector16(TaskExtension._decode_from, "TaskConfiguration.extensions")),
        )._checked(at)


# --- upload (DAP §4.4) --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ReportMetadata(TlsStruct):
    """``struct { ReportID report_id; Time time; Extension public_extensions<0..2^16-1>; }``
    (DAP §4.4.2, digest §5.2); `time` in time_precision units. Extensions in any order decode:
    `check_report_extensions` turns a bad list into this one report's `invalid_message`."""

    report_id: ReportId
    time: int
    public_extensions: tuple[Extension, ...] = ()

    def __post_init__(self) -> None:
        _freeze(self, "public_extensions")

    def _encode_into(self, enc: Encoder) -> None:
        self.report_id._encode_into(enc)
        enc.u64(self.time, "ReportMetadata.time")
        enc.vector16(self.public_extensions, "ReportMetadata.public_extensions")

    @classmethod
    def _decode_from(cls, dec: Decoder) -> Self:
        return cls(
            ReportId._decode_from(dec),
            dec.u64("ReportMetadata.time"),
            tuple(dec.vector16(Extension._decode_from, "ReportMetadata.public_extensions")),
        )


class Report(BaseReport[ReportMetadata]):
    """``struct { ReportMetadata report_metadata; opaque public_share<0..2^32-1>;
    HpkeCiphertext leader_encrypted_input_share; HpkeCiphertext helper_encrypted_input_share; }``
    (DAP §4.4.2, digest §5.2)."""

    __slots__ = ()

    @classmethod
    def _decode_metadata(cls, dec: Decoder) -> ReportMetadata:
        return ReportMetadata._decode_from(dec)


class PlaintextInputShare(_PlaintextInputShare09):
    """``struct { Extension private_extensions<0..2^16-1>; opaque payload<1..2^32-1>; }``
    (DAP §4.4.2, digest §5.2): DAP-09's struct with a non-empty payload. `extensions` holds the
    private extensions, in any order (see `ReportMetadata`)."""

    __slots__ = ()
    PAYLOAD_MIN_LEN = 1


@dataclass(frozen=True, slots=True)
class InputShareAad(TlsStruct):
    """``struct { TaskID task_id; TaskConfiguration task_configuration;
    ReportMetadata report_metadata; opaque public_share<0..2^32-1>; }``, the AAD of input-share
    encryption (DAP §4.4.2, digest §5.2)."""

    task_id: TaskId
    task_configuration: TaskConfiguration
    report_metadata: ReportMetadata
    public_share: bytes

    def _encode_into(self, enc: Encoder) -> None:
        self.task_id._encode_into(enc)
        self.task_configuration._encode_into(enc)
        self.report_metadata._encode_into(enc)
        enc.opaque32(self.public_share, "InputShareAad.public_share")

    @classmethod
    def _decode_from(cls, dec: Decoder) -> Self:
        return cls(
            TaskId._decode_from(dec),
            TaskConfiguration._decode_from(dec),
            ReportMetadata._decode_from(dec),
            dec.opaque32("InputShareAad.public_share"),
        )


@dataclass(frozen=True, slots=True)
class UploadRequest(TlsStruct):
    """``struct { Report reports[message_length]; } UploadRequest``: the reports one after the
    other, no prefix (DAP §4.4.2, digest §5.2). An empty request is refused (digest §16 item 11,
    as dap-ts does): it uploads nothing and would be answered like a successful one."""

    reports: tuple[Report, ...]

    def __post_init__(self) -> None:
        _freeze(self, "reports")

    def _encode_into(self, enc: Encoder) -> None:
        enc.vector_to_end(self.reports, "UploadRequest.reports", min_len=1)

    @classmethod
    def _decode_from(cls, dec: Decoder) -> Self:
        return cls(tuple(dec.vector_to_end(Report._decode_from, "UploadRequest.reports", 1)))

    @classmethod
    def read_reports(cls, data: bytes) -> list[UploadedReport]:
        """The reports as the leader checks and stores them, without a struct per field: what
        `decode` gives, and refused exactly where it refuses.

        Reports without public extensions, the usual kind, are read by `_read_plain_reports`;
        a request with any other report, or one that does not parse, is decoded by `decode`,
        which then answers (the same reports, or its `DecodeError`)."""
        try:
            return _read_plain_reports(data)
        except _IrregularError:
            return [UploadedReport.of(r) for r in cls.decode(data).reports]


class _IrregularError(Exception):
    """`_read_plain` met something it leaves to the struct decoder."""


#: ReportID, Time and the byte length of public_extensions: how each Report starts.
_REPORT_HEAD = struct.Struct(">16sQH")
#: HpkeCiphertext's config_id and the length of its enc.
_CIPHERTEXT_HEAD = struct.Struct(">BH")


def _read_plain_reports(data: bytes) -> list[UploadedReport]:
    return _read_plain(data, 0, UploadedReport, True)


_Item = TypeVar("_Item")


def _read_plain(
    data: bytes, pos: int, item: Callable[[SealedShare, bytes], _Item], ciphertext_after: bool
) -> list[_Item]:
    """From `pos` to the end: Reports (`ciphertext_after`: each share is followed by the
    helper's HpkeCiphertext) or VerifyInits (by the leader's message), none with public
    extensions; `item` of each share and what follows it, encoded.

    One pass of unpacks and slices, ~4 us a report against ~17 for the struct decoder (a
    quarter of the leader's non-cryptographic upload work, #15). Every length is checked
    before the next read: a read past the end raises struct.error, a slice past it leaves `pos`
    beyond `end`; either, or anything else the struct decoder would refuse, raises
    `_IrregularError`, which hands the message to that decoder."""
    data = bytes(data)
    view = memoryview(data)
    end = len(data)
    head, ciphertext_head, u32 = (
        _REPORT_HEAD.unpack_from,
        _CIPHERTEXT_HEAD.unpack_from,
        _U32.unpack_from,
    )
    items: list[_Item] = []
    try:
        while pos < end:
            start = pos
            report_id, time, extensions_len = head(view, pos)
            if extensions_len:
                raise _IrregularError
            pos += _REPORT_HEAD.size
            metadata = data[start:pos]
            (n,) = u32(view, pos)
            public_share = data[pos + 4 : pos + 4 + n]
            pos += 4 + n
            config_id, n = ciphertext_head(view, pos)
            enc = data[pos + 3 : pos + 3 + n]
            pos += 3 + n
            (m,) = u32(view, pos)
            payload = data[pos + 4 : pos + 4 + m]
            pos += 4 + m
            if not (n and m):
                raise _IrregularError
            # The helper's whole HpkeCiphertext, or the leader's message without its length.
            if ciphertext_after:
                tail_at = pos
                _, n = ciphertext_head(view, pos)
                pos += 3 + n
                (m,) = u32(view, pos)
            else:
                (m,) = u32(view, pos)
                tail_at = pos + 4
            pos += 4 + m
            if not (n and m) or pos > end:
                raise _IrregularError
            share = SealedShare(
                report_id, time, (), metadata, public_share, config_id, enc, payload
            )
            items.append(item(share, data[tail_at:pos]))
    except struct.error:
        raise _IrregularError from None
    if not items:
        raise _IrregularError
    return items


@dataclass(frozen=True, slots=True)
class ReportUploadStatus(TlsStruct):
    """``struct { ReportID id; ReportError error; } ReportUploadStatus``, 17 bytes
    (DAP §4.4.2, digest §5.2)."""

    report_id: ReportId
    error: ReportError

    def _encode_into(self, enc: Encoder) -> None:
        self.report_id._encode_into(enc)
        enc.u8(self.error, "ReportUploadStatus.error")

    @classmethod
    def _decode_from(cls, dec: Decoder) -> Self:
        report_id = ReportId._decode_from(dec)
        return cls(report_id, dec.enum8(ReportError, "ReportUploadStatus.error"))


@dataclass(frozen=True, slots=True)
class UploadErrors(TlsStruct):
    """``struct { ReportUploadStatus status[message_length]; } UploadErrors``: the rejected
    reports only, in request order, no prefix (DAP §4.4.2, digest §5.3). Empty (the empty
    body) means every report was accepted."""

    status: tuple[ReportUploadStatus, ...]

    def __post_init__(self) -> None:
        _freeze(self, "status")

    def _encode_into(self, enc: Encoder) -> None:
        enc.vector_to_end(self.status, "UploadErrors.status")

    @classmethod
    def _decode_from(cls, dec: Decoder) -> Self:
        return cls(tuple(dec.vector_to_end(ReportUploadStatus._decode_from, "UploadErrors.status")))


# --- aggregation (DAP §4.5) ---------------------------------------------------------------------


class AggregationJobExtension(Extension):
    """``struct { AggregationJobExtensionType extension_type;
    opaque extension_data<0..2^16-1>; }`` (DAP §4.5.1, digest §6.1)."""

    __slots__ = ()

    @classmethod
    def leader_selected_batch_id(cls, batch_id: BatchId) -> Self:
        """The batch of a leader-selected task's job (DAP §5.2.2, digest §8)."""
        return cls(AggregationJobExtensionType.LEADER_SELECTED_BATCH_ID, batch_id.value)


class ReportShare(BaseReportShare[ReportMetadata]):
    """``struct { ReportMetadata report_metadata; opaque public_share<0..2^32-1>;
    HpkeCiphertext encrypted_input_share; }`` (DAP §4.5.1, digest §6.1)."""

    __slots__ = ()

    @classmethod
    def _decode_metadata(cls, dec: Decoder) -> ReportMetadata:
        return ReportMetadata._decode_from(dec)


class VerifyInit(BaseReportInit[ReportShare]):
    """``struct { ReportShare report_share; opaque payload<1..2^32-1>; }``; `payload` is an
    encoded ping-pong `Message` (DAP §4.5.1, digest §6.1)."""

    __slots__ = ()
    PAYLOAD_MIN_LEN = 1

    @classmethod
    def _decode_report_share(cls, dec: Decoder) -> ReportShare:
        return ReportShare._decode_from(dec)


class StoredReportShare(NamedTuple):
    """One report of a leader's aggregation job in the parts the leader stores
    (`AggregationJobInitReq.encode_reports`); `time` in time_precision units."""

    report_id: bytes
    time: int
    public_share: bytes
    #: The HpkeCiphertext, encoded.
    encrypted_input_share: bytes
    payload: bytes


#: One report's answer for `AggregationJobResp.encode_answers`: (report id, continuation
#: payload, ReportError), exactly one of the last two set.
VerifyAnswer = tuple[bytes, bytes | None, "ReportError | None"]
#: One report's answer as `AggregationJobResp.decode_answers` reads it.
DecodedVerifyResp = tuple[bytes, "VerifyRespType", bytes | None, "ReportError | None"]

#: ReportID, Time, an empty public_extensions and the public share's length: how each VerifyInit
#: of a leader's job starts.
_REPORT_SHARE_HEAD = struct.Struct(">16sQHI")
_U32 = struct.Struct(">I")
_CONTINUE_HEAD = struct.Struct(">BI")
_REJECT_HEAD = struct.Struct(">BB")
_RESP_TYPES: dict[int, VerifyRespType] = {t.value: t for t in VerifyRespType}
_REPORT_ERRORS: dict[int, ReportError] = {e.value: e for e in ReportError}


@dataclass(frozen=True, slots=True)
class AggregationJobInitReq(_Checked):
    """``struct { uint8 verification_key_id; opaque agg_param<0..2^32-1>;
    AggregationJobExtension extensions<0..2^16-1>;
    VerifyInit verify_inits[verify_inits_length]; }`` (DAP §4.5.3.1, digest §6.1).

    `verify_inits` has no prefix: it runs to the end of the body, and is decoded after the
    fields before it (the -18 prose for its length forgets the key-id byte: digest §16 item 1).
    Refused here, as whole-job `invalidMessage`s (digest §6.3): no verify_inits (digest §16
    item 11), a report ID twice, extensions out of strictly increasing order, and a
    `leader_selected_batch_id` extension whose data is not a BatchID. An unknown extension
    type decodes (`unsupportedExtension`), and so does a batch id in a time-interval task's job
    (the task decides: digest §16 item 10).
    """

    verification_key_id: int
    agg_param: bytes
    extensions: tuple[AggregationJobExtension, ...]
    verify_inits: tuple[VerifyInit, ...]

    def __post_init__(self) -> None:
        _freeze(self, "extensions")
        _freeze(self, "verify_inits")

    @property
    def batch_id(self) -> BatchId | None:
        """The `leader_selected_batch_id` extension's batch, if present."""
        return self._batch_id_of(self.extensions)

    @staticmethod
    def _batch_id_of(extensions: Sequence[AggregationJobExtension]) -> BatchId | None:
        for ext in extensions:
            if ext.extension_type == AggregationJobExtensionType.LEADER_SELECTED_BATCH_ID:
                return BatchId(ext.extension_data)
        return None

    def _problem(self) -> str | None:
        return self._problem_of(
            self.extensions, (v.report_share.report_metadata.report_id for v in self.verify_inits)
        )

    @staticmethod
    def _problem_of(
        extensions: Sequence[AggregationJobExtension], report_ids: Iterable[ReportId | bytes]
    ) -> str | None:
        unordered = first_unordered_extension(extensions)
        if unordered is not None:
            return f"extension 0x{unordered:04x} breaks the strictly increasing order"
        try:
            AggregationJobInitReq._batch_id_of(extensions)
        except ValueError as exc:
            return f"leader_selected_batch_id: {exc}"
        dup = first_duplicate(report_ids)
        if dup is None:
            return None
        shown = dup if isinstance(dup, ReportId) else ReportId(dup)
        return f"report {shown.to_b64url()} listed twice"

    @classmethod
    def encode_reports(
        cls,
        verification_key_id: int,
        agg_param: bytes,
        extensions: Sequence[AggregationJobExtension],
        reports: Sequence[StoredReportShare],
    ) -> bytes:
        """``cls(...).encode()``, byte for byte (tested), of VerifyInits built from each
        report's stored parts, without a struct per report: the leader sends every report it
        stores this way, and building and encoding the structs cost ~9 us a report against
        ~0.4 here. Reports carry no public extensions (the leader refuses them at upload), and
        each encrypted input share is the HpkeCiphertext as encoded at upload."""
        name = cls.__name__
        if not reports:
            raise ValueError(f"{name}.verify_inits: encoded length below the minimum 1")
        problem = cls._problem_of(extensions, (r.report_id for r in reports))
        if problem is not None:
            raise ValueError(f"{name}: {problem}")
        head = Encoder()
        head.u8(verification_key_id, f"{name}.verification_key_id")
        head.opaque32(agg_param, f"{name}.agg_param")
        head.vector16(extensions, f"{name}.extensions")
        parts = [head.to_bytes()]
        for r in reports:
            if len(r.report_id) != REPORT_ID_SIZE or not 0 < len(r.payload) <= U32_MAX:
                raise ValueError(f"{name}: report id or payload of the wrong length")
            if not 0 <= r.time <= U64_MAX:
                raise ValueError(f"{name}: time {r.time} does not fit in uint64")
            if len(r.public_share) > U32_MAX:
                raise ValueError(f"{name}: public share too long")
            parts += (
                _REPORT_SHARE_HEAD.pack(r.report_id, r.time, 0, len(r.public_share)),
                r.public_share,
                r.encrypted_input_share,
                _U32.pack(len(r.payload)),
                r.payload,
            )
        return b"".join(parts)

    @classmethod
    def read_inits(cls, data: bytes) -> JobInitParts:
        """The request as the helper checks it, without a struct per field: what `decode`
        gives, and refused exactly where it refuses (as `UploadRequest.read_reports`)."""
        try:
            return _read_job_init(data)
        except (_IrregularError, DecodeError):
            request = cls.decode(data)
            return JobInitParts(
                request.verification_key_id,
                request.agg_param,
                request.extensions,
                [SealedInit.of(v) for v in request.verify_inits],
            )

    def _encode_into(self, enc: Encoder) -> None:
        self._check_encode()
        enc.u8(self.verification_key_id, "AggregationJobInitReq.verification_key_id")
        enc.opaque32(self.agg_param, "AggregationJobInitReq.agg_param")
        enc.vector16(self.extensions, "AggregationJobInitReq.extensions")
        enc.vector_to_end(self.verify_inits, "AggregationJobInitReq.verify_inits", min_len=1)

    @classmethod
    def _decode_from(cls, dec: Decoder) -> Self:
        at = dec.offset
        return cls(
            dec.u8("AggregationJobInitReq.verification_key_id"),
            dec.opaque32("AggregationJobInitReq.agg_param"),
            tuple(
                dec.vector16(
                    AggregationJobExtension._decode_from, "AggregationJobInitReq.extensions"
                )
            ),
            tuple(
                dec.vector_to_end(
                    VerifyInit._decode_from, "AggregationJobInitReq.verify_inits", min_len=1
                )
            ),
        )._checked(at)


class JobInitParts(NamedTuple):
    """An AggregationJobInitReq as the helper reads it (`AggregationJobInitReq.read_inits`)."""

    verification_key_id: int
    agg_param: bytes
    extensions: tuple[AggregationJobExtension, ...]
    inits: list[SealedInit]

    @property
    def batch_id(self) -> BatchId | None:
        """The `leader_selected_batch_id` extension's batch, if present."""
        return AggregationJobInitReq._batch_id_of(self.extensions)


def _read_job_init(data: bytes) -> JobInitParts:
    dec = Decoder(data)
    name = AggregationJobInitReq.__name__
    key_id = dec.u8(f"{name}.verification_key_id")
    agg_param = dec.opaque32(f"{name}.agg_param")
    extensions = tuple(dec.vector16(AggregationJobExtension._decode_from, f"{name}.extensions"))
    inits = _read_plain(data, dec.offset, SealedInit, False)
    if AggregationJobInitReq._problem_of(extensions, (i.sealed.report_id for i in inits)):
        raise _IrregularError
    return JobInitParts(key_id, agg_param, extensions, inits)


class VerifyResp(BaseReportResp[VerifyRespType, ReportError]):
    """``struct { ReportID report_id; VerifyRespType verify_resp_type;
    select (verify_resp_type) { case continue: opaque payload<1..2^32-1>; case finish: Empty;
    case reject: ReportError report_error; }; }`` (DAP §4.5.1, digest §6.1); `state` holds
    verify_resp_type and `error` report_error."""

    __slots__ = ()
    STATES = VerifyRespType
    ERRORS = ReportError
    STATE_FIELD = "verify_resp_type"
    ERROR_FIELD = "report_error"
    PAYLOAD_MIN_LEN = 1


@dataclass(frozen=True, slots=True)
class AggregationJobResp(TlsStruct):
    """``struct { VerifyResp verify_resps[message_length]; }``, no prefix (DAP §4.5.1,
    digest §6.1). Never empty: an empty body means "not ready yet" (DAP §3.1; digest §16
    item 11)."""

    verify_resps: tuple[VerifyResp, ...]

    def __post_init__(self) -> None:
        _freeze(self, "verify_resps")

    def _encode_into(self, enc: Encoder) -> None:
        enc.vector_to_end(self.verify_resps, "AggregationJobResp.verify_resps", min_len=1)

    @classmethod
    def _decode_from(cls, dec: Decoder) -> Self:
        return cls(
            tuple(
                dec.vector_to_end(
                    VerifyResp._decode_from, "AggregationJobResp.verify_resps", min_len=1
                )
            )
        )

    @staticmethod
    def encode_answers(answers: Sequence[VerifyAnswer]) -> bytes:
        """``AggregationJobResp(...).encode()``, byte for byte (tested), of continue and reject
        answers given as (report id, payload or None, ReportError or None), without a struct
        per report: a helper answers every report it is sent (~4 us a report with the structs,
        a tenth of that here)."""
        if not answers:
            raise ValueError("AggregationJobResp.verify_resps: encoded length below the minimum 1")
        parts: list[bytes] = []
        for report_id, payload, error in answers:
            if len(report_id) != REPORT_ID_SIZE:
                raise ValueError(f"VerifyResp: a report id is {REPORT_ID_SIZE} bytes")
            if error is not None:
                if payload is not None or type(error) is not ReportError:
                    raise ValueError("VerifyResp: a reject has a ReportError and no payload")
                parts += (report_id, _REJECT_HEAD.pack(VerifyRespType.REJECT, error))
            elif payload is not None and 0 < len(payload) <= U32_MAX:
                parts += (
                    report_id,
                    _CONTINUE_HEAD.pack(VerifyRespType.CONTINUE, len(payload)),
                    payload,
                )
            else:
                raise ValueError("VerifyResp: a continue has a payload of 1..2^32-1 bytes")
        return b"".join(parts)

    @staticmethod
    def decode_answers(data: bytes) -> list[DecodedVerifyResp]:
        """What `decode` reads, as (report id, VerifyRespType, payload, ReportError) per report
        instead of structs, with the same errors: the leader reads every report's answer."""
        end = len(data)
        if end == 0:
            raise DecodeError(
                "AggregationJobResp.verify_resps: 0 bytes at offset 0 is below the minimum 1"
            )
        answers: list[DecodedVerifyResp] = []
        pos = 0
        while pos < end:
            if end - pos < REPORT_ID_SIZE + 1:
                raise DecodeError(f"VerifyResp: need {REPORT_ID_SIZE + 1} bytes at offset {pos}")
            report_id = data[pos : pos + REPORT_ID_SIZE]
            kind = _RESP_TYPES.get(data[pos + REPORT_ID_SIZE])
            pos += REPORT_ID_SIZE + 1
            if kind is None:
                raise DecodeError(f"VerifyResp.verify_resp_type: unknown value at offset {pos - 1}")
            if kind == VerifyRespType.CONTINUE:
                if end - pos < 4:
                    raise DecodeError(f"VerifyResp.payload: need 4 bytes at offset {pos}")
                (n,) = _U32.unpack_from(data, pos)
                if n < 1 or end - pos - 4 < n:
                    raise DecodeError(f"VerifyResp.payload: bad length {n} at offset {pos}")
                answers.append((report_id, kind, data[pos + 4 : pos + 4 + n], None))
                pos += 4 + n
            elif kind == VerifyRespType.REJECT:
                error = _REPORT_ERRORS.get(data[pos]) if pos < end else None
                if error is None:
                    raise DecodeError(
                        f"VerifyResp.report_error: missing or unknown at offset {pos}"
                    )
                answers.append((report_id, kind, None, error))
                pos += 1
            else:
                answers.append((report_id, kind, None, None))
        return answers


class VerifyContinue(BaseReportContinue):
    """``struct { ReportID report_id; opaque payload<1..2^32-1>; }`` (DAP §4.5.4.1,
    digest §6.1)."""

    __slots__ = ()
    PAYLOAD_MIN_LEN = 1


@dataclass(frozen=True, slots=True)
class AggregationJobContinueReq(_Checked):
    """``struct { uint16 step; VerifyContinue verify_continues[verify_continues_length]; }``,
    no prefix on the list (DAP §4.5.4.1, digest §6.1). Step 0, an empty list and a report ID
    twice are refused (`invalidMessage`, digest §6.7)."""

    step: int
    verify_continues: tuple[VerifyContinue, ...]

    def __post_init__(self) -> None:
        _freeze(self, "verify_continues")

    def _problem(self) -> str | None:
        if self.step == 0:
            return "step 0 is the initialization, never a continuation"
        dup = first_duplicate(v.report_id for v in self.verify_continues)
        return None if dup is None else f"report {dup.to_b64url()} listed twice"

    def _encode_into(self, enc: Encoder) -> None:
        self._check_encode()
        enc.u16(self.step, "AggregationJobContinueReq.step")
        enc.vector_to_end(
            self.verify_continues, "AggregationJobContinueReq.verify_continues", min_len=1
        )

    @classmethod
    def _decode_from(cls, dec: Decoder) -> Self:
        at = dec.offset
        return cls(
            dec.u16("AggregationJobContinueReq.step"),
            tuple(
                dec.vector_to_end(
                    VerifyContinue._decode_from,
                    "AggregationJobContinueReq.verify_continues",
                    min_len=1,
                )
            ),
        )._checked(at)


# --- collection (DAP §4.6, §5) ------------------------------------------------------------------


def _decode_batch_config(
    dec: Decoder, what: str, mode: BatchMode, leader_selected_id: bool
) -> Interval | BatchId | None:
    """The `config` of a Query (`leader_selected_id` False: Empty) or BatchSelector (True:
    BatchID) of `mode`: exactly one Interval for time_interval (DAP §5.1, §5.2)."""
    at = dec.offset
    config = dec.opaque16(what)
    try:
        if mode == BatchMode.TIME_INTERVAL:
            return Interval.decode(config)
        if leader_selected_id:
            return BatchId.decode(config)
    except DecodeError as exc:
        raise DecodeError(f"{what} at offset {at}: {exc}") from None
    if config:
        raise DecodeError(f"{what}: must be empty for leader_selected, at offset {at}")
    return None


@dataclass(frozen=True, slots=True)
class Query(TlsStruct):
    """``struct { BatchMode batch_mode; opaque config<0..2^16-1>; } Query``: for time_interval
    `config` is the batch Interval (in time_precision units), for leader_selected it is empty
    ("the next batch") (DAP §4.6.1, §5; digest §7.1, §8)."""

    batch_mode: BatchMode
    batch_interval: Interval | None = None

    def __post_init__(self) -> None:
        if (self.batch_mode == BatchMode.TIME_INTERVAL) != (self.batch_interval is not None):
            raise ValueError("Query: batch_interval must be set exactly for time_interval")

    @classmethod
    def time_interval(cls, batch_interval: Interval) -> Self:
        return cls(BatchMode.TIME_INTERVAL, batch_interval)

    @classmethod
    def leader_selected(cls) -> Self:
        return cls(BatchMode.LEADER_SELECTED)

    def _encode_into(self, enc: Encoder) -> None:
        enc.u8(self.batch_mode, "Query.batch_mode")
        config = b"" if self.batch_interval is None else self.batch_interval.encode()
        enc.opaque16(config, "Query.config")

    @classmethod
    def _decode_from(cls, dec: Decoder) -> Self:
        mode = dec.enum8(BatchMode, "Query.batch_mode")
        interval = _decode_batch_config(dec, "Query.config", mode, leader_selected_id=False)
        return cls(mode, interval if isinstance(interval, Interval) else None)


@dataclass(frozen=True, slots=True)
class BatchSelector(TlsStruct):
    """``struct { BatchMode batch_mode; opaque config<0..2^16-1>; } BatchSelector``: the batch
    Interval (units) for time_interval, the BatchID for leader_selected (DAP §4.6.4, §5;
    digest §7.1, §8)."""

    batch_mode: BatchMode
    batch_interval: Interval | None = None
    batch_id: BatchId | None = None

    def __post_init__(self) -> None:
        if (self.batch_mode == BatchMode.TIME_INTERVAL) != (self.batch_interval is not None) or (
            self.batch_mode == BatchMode.LEADER_SELECTED
        ) != (self.batch_id is not None):
            raise ValueError("BatchSelector: exactly the field of batch_mode's case must be set")

    @classmethod
    def time_interval(cls, batch_interval: Interval) -> Self:
        return cls(BatchMode.TIME_INTERVAL, batch_interval=batch_interval)

    @classmethod
    def leader_selected(cls, batch_id: BatchId) -> Self:
        return cls(BatchMode.LEADER_SELECTED, batch_id=batch_id)

    def _encode_into(self, enc: Encoder) -> None:
        enc.u8(self.batch_mode, "BatchSelector.batch_mode")
        config = self.batch_id if self.batch_interval is None else self.batch_interval
        assert config is not None  # __post_init__ sets one of the two
        enc.opaque16(config.encode(), "BatchSelector.config")

    @classmethod
    def _decode_from(cls, dec: Decoder) -> Self:
        mode = dec.enum8(BatchMode, "BatchSelector.batch_mode")
        config = _decode_batch_config(dec, "BatchSelector.config", mode, leader_selected_id=True)
        if isinstance(config, Interval):
            return cls(mode, batch_interval=config)
        return cls(mode, batch_id=config)


class CollectionJobExtension(Extension):
    """``struct { CollectionJobExtensionType extension_type;
    opaque extension_data<0..2^16-1>; }`` (DAP §4.6.2, digest §7.1); none are registered."""

    __slots__ = ()


@dataclass(frozen=True, slots=True)
class CollectionJobReq(TlsStruct):
    """``struct { Query query; opaque agg_param<0..2^32-1>;
    CollectionJobExtension extensions<0..2^16-1>; }`` (DAP §4.6.1, digest §7.1).

    Extensions decode in any order: the Leader answers an unordered list with
    `invalidExtension` (DAP §4.6.2), not `invalidMessage` (`first_unordered_extension`). Its
    exact bytes are bound into the aggregate-share AAD; the strict codec re-encodes them.
    """

    query: Query
    agg_param: bytes
    extensions: tuple[CollectionJobExtension, ...] = ()

    def __post_init__(self) -> None:
        _freeze(self, "extensions")

    def _encode_into(self, enc: Encoder) -> None:
        self.query._encode_into(enc)
        enc.opaque32(self.agg_param, "CollectionJobReq.agg_param")
        enc.vector16(self.extensions, "CollectionJobReq.extensions")

    @classmethod
    def _decode_from(cls, dec: Decoder) -> Self:
        return cls(
            Query._decode_from(dec),
            dec.opaque32("CollectionJobReq.agg_param"),
            tuple(dec.vector16(CollectionJobExtension._decode_from, "CollectionJobReq.extensions")),
        )


@dataclass(frozen=True, slots=True)
class CollectionJobResp(TlsStruct):
    """``struct { uint64 report_count; Interval interval;
    HpkeCiphertext leader_encrypted_agg_share; HpkeCiphertext helper_encrypted_agg_share; }``
    (DAP §4.6.1, digest §7.1): no batch selector since -18 (#778); `interval` in units."""

    report_count: int
    interval: Interval
    leader_encrypted_agg_share: HpkeCiphertext
    helper_encrypted_agg_share: HpkeCiphertext

    def _encode_into(self, enc: Encoder) -> None:
        enc.u64(self.report_count, "CollectionJobResp.report_count")
        self.interval._encode_into(enc)
        self.leader_encrypted_agg_share._encode_into(enc)
        self.helper_encrypted_agg_share._encode_into(enc)

    @classmethod
    def _decode_from(cls, dec: Decoder) -> Self:
        return cls(
            dec.u64("CollectionJobResp.report_count"),
            Interval._decode_from(dec),
            HpkeCiphertext._decode_from(dec),
            HpkeCiphertext._decode_from(dec),
        )


@dataclass(frozen=True, slots=True)
class AggregateShareReq(TlsStruct):
    """``struct { CollectionJobReq collection_job_req; BatchSelector batch_selector;
    uint64 report_count; opaque checksum[32]; }`` (DAP §4.6.4, digest §7.1): the Collector's
    request travels to the Helper, which binds it into its aggregate share's AAD."""

    collection_job_req: CollectionJobReq
    batch_selector: BatchSelector
    report_count: int
    checksum: bytes

    def __post_init__(self) -> None:
        if len(self.checksum) != REPORT_ID_CHECKSUM_SIZE:
            raise ValueError(f"AggregateShareReq: checksum must be {REPORT_ID_CHECKSUM_SIZE} bytes")

    def _encode_into(self, enc: Encoder) -> None:
        self.collection_job_req._encode_into(enc)
        self.batch_selector._encode_into(enc)
        enc.u64(self.report_count, "AggregateShareReq.report_count")
        enc.fixed(self.checksum, REPORT_ID_CHECKSUM_SIZE, "AggregateShareReq.checksum")

    @classmethod
    def _decode_from(cls, dec: Decoder) -> Self:
        return cls(
            CollectionJobReq._decode_from(dec),
            BatchSelector._decode_from(dec),
            dec.u64("AggregateShareReq.report_count"),
            dec.fixed(REPORT_ID_CHECKSUM_SIZE, "AggregateShareReq.checksum"),
        )


@dataclass(frozen=True, slots=True)
class AggregateShareAad(TlsStruct):
    """``struct { TaskID task_id; TaskConfiguration task_configuration;
    CollectionJobReq collection_job_req; }``, the AAD of aggregate-share encryption
    (DAP §4.6.7, digest §7.4): the batch selector and agg_param are no longer separate fields."""

    task_id: TaskId
    task_configuration: TaskConfiguration
    collection_job_req: CollectionJobReq

    def _encode_into(self, enc: Encoder) -> None:
        self.task_id._encode_into(enc)
        self.task_configuration._encode_into(enc)
        self.collection_job_req._encode_into(enc)

    @classmethod
    def _decode_from(cls, dec: Decoder) -> Self:
        return cls(
            TaskId._decode_from(dec),
            TaskConfiguration._decode_from(dec),
            CollectionJobReq._decode_from(dec),
        )
