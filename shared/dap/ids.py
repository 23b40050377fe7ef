"""DAP-09 identifiers (DAP-09 §4.1, digest §1): fixed-size opaque strings.

    opaque ReportID[16]; opaque TaskID[32]; opaque BatchID[32];
    opaque AggregationJobID[16]; opaque CollectionJobID[16];

In URLs and JSON they are unpadded base64url (RFC 4648 §5; DAP-09 §4.3, digest §3).
Each kind is its own class, so a `ReportId` never compares equal to an `AggregationJobId`
holding the same bytes.
"""

from __future__ import annotations

import functools
import secrets
from typing import ClassVar, Final, Self

from shared.b64url import b64url_decode, b64url_encode
from shared.codec import DecodeError, Decoder, Encoder, TlsStruct

#: Sizes of DAP identifiers in bytes (DAP-09 §4.1).
TASK_ID_SIZE: Final = 32

REPORT_ID_SIZE: Final = 16

BATCH_ID_SIZE: Final = 32

AGGREGATION_JOB_ID_SIZE: Final = 16

COLLECTION_JOB_ID_SIZE: Final = 16


__all__ = ["AggregationJobId", "BatchId", "CollectionJobId", "ReportId", "TaskId"]


@functools.total_ordering
class _FixedId(TlsStruct):
    """An immutable, hashable, ordered wrapper over exactly `SIZE` bytes."""

    __slots__ = ("_value",)
    SIZE: ClassVar[int]
    _value: bytes

    def __init__(self, value: bytes) -> None:
        if type(value) is not bytes:
            raise TypeError(f"{type(self).__name__} takes bytes, got {type(value).__name__}")
        if len(value) != self.SIZE:
            raise ValueError(f"{type(self).__name__} must be {self.SIZE} bytes, got {len(value)}")
        object.__setattr__(self, "_value", value)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable")

    @property
    def value(self) -> bytes:
        return self._value

    def __bytes__(self) -> bytes:
        return self._value

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, _FixedId) or type(other) is not type(self):
            return NotImplemented
        return self._value == other._value

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, _FixedId) or type(other) is not type(self):
            return NotImplemented
        return self._value < other._value

    def __hash__(self) -> int:
        return hash((type(self).__name__, self._value))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.to_b64url()})"

    def __reduce__(self) -> tuple[type[Self], tuple[bytes]]:
        return (type(self), (self._value,))

    @classmethod
    def random(cls) -> Self:
        """A fresh ID from the OS CSPRNG (DAP-09 requires random report/job/task IDs)."""
        return cls(secrets.token_bytes(cls.SIZE))

    def to_b64url(self) -> str:
        """Unpadded base64url, as used in DAP URLs and problem documents."""
        return b64url_encode(self._value)

    @classmethod
    def from_b64url(cls, text: str) -> Self:
        """Parse unpadded base64url; padding, other characters, wrong lengths and
        non-canonical trailing bits (two spellings of one ID would defeat string-keyed
        lookups) all raise `DecodeError`."""
        name = cls.__name__
        try:
            raw = b64url_decode(text, name)
        except ValueError as exc:
            raise DecodeError(f"{exc}: {text!r}") from None
        if len(raw) != cls.SIZE:
            raise DecodeError(f"{name}: base64url decodes to {len(raw)} bytes, need {cls.SIZE}")
        return cls(raw)

    def _encode_into(self, enc: Encoder) -> None:
        enc.fixed(self._value, self.SIZE, type(self).__name__)

    @classmethod
    def _decode_from(cls, dec: Decoder) -> Self:
        # `fixed` returns exactly SIZE bytes: what `__init__` checks holds already, and each
        # report of an upload or job decodes one of these.
        new = object.__new__(cls)
        object.__setattr__(new, "_value", dec.fixed(cls.SIZE, cls.__name__))
        return new


class TaskId(_FixedId):
    """``opaque TaskID[32]``."""

    __slots__ = ()
    SIZE = TASK_ID_SIZE


class ReportId(_FixedId):
    """``opaque ReportID[16]``; also the VDAF nonce."""

    __slots__ = ()
    SIZE = REPORT_ID_SIZE


class BatchId(_FixedId):
    """``opaque BatchID[32]`` (fixed_size tasks)."""

    __slots__ = ()
    SIZE = BATCH_ID_SIZE


class AggregationJobId(_FixedId):
    """``opaque AggregationJobID[16]``."""

    __slots__ = ()
    SIZE = AGGREGATION_JOB_ID_SIZE


class CollectionJobId(_FixedId):
    """``opaque CollectionJobID[16]``."""

    __slots__ = ()
    SIZE = COLLECTION_JOB_ID_SIZE
