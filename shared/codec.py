"""TLS presentation-language codec (RFC 8446 §3), the wire format of every DAP message.

DAP-09 §4 and DAP-19 §4 (digests §1) define all their messages in this language: big-endian
integers, fixed-length opaque strings, variable-length opaque strings with a 1/2/4-byte length
prefix, and vectors of structs whose prefix is the *byte* length of the encoded items, not a
count. DAP-19 adds ``T v[message_length]``: a vector with no prefix at all that runs to the end
of the HTTP content (`Decoder.vector_to_end`, `Encoder.vector_to_end`).

Decoding is strict: short input, trailing bytes, a length prefix pointing past the buffer,
a length outside the declared range and an unknown enum value all raise `DecodeError`, and
nothing else. Every error names the field being decoded and the absolute byte offset, so a
rejected upload can be diagnosed from the log line alone.
"""

from __future__ import annotations

import struct
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from enum import IntEnum
from typing import Protocol, Self, TypeAlias, TypeVar

from shared.errors import SaggError

__all__ = [
    "Buffer",
    "DecodeError",
    "Decoder",
    "Encoder",
    "TlsStruct",
    "U8_MAX",
    "U16_MAX",
    "U32_MAX",
    "U64_MAX",
    "decode_all",
]

#: Anything a `Decoder` can read from without copying it first.
Buffer: TypeAlias = bytes | bytearray | memoryview

_T = TypeVar("_T")
_E = TypeVar("_E", bound=IntEnum)

_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
_U64 = struct.Struct(">Q")

U8_MAX = 0xFF
U16_MAX = 0xFFFF
U32_MAX = 0xFFFF_FFFF
U64_MAX = 0xFFFF_FFFF_FFFF_FFFF


class DecodeError(SaggError, ValueError):
    """Malformed wire bytes. The message says what was being decoded and at which offset."""


class Decoder:
    """A cursor over a byte buffer.

    Every read takes a `what` label (e.g. ``"Report.public_share"``) used only in error
    messages. Vectors are decoded by narrowing the readable end to the vector's declared
    length, so offsets in errors stay absolute and an item cannot read past its vector.

    Integers are unpacked from a memoryview and opaque fields sliced from `bytes`: measured
    on CPython 3.11, those are the fastest forms of each (a memoryview slice still needs a
    `tobytes()` copy). A non-`bytes` input is copied once up front for that reason.
    """

    __slots__ = ("_data", "_end", "_pos", "_view")

    def __init__(self, data: Buffer) -> None:
        if type(data) is not bytes:
            view = memoryview(data)
            if view.ndim != 1 or view.itemsize != 1:
                view = view.cast("B")
            data = view.tobytes()
        self._data: bytes = data
        self._view = memoryview(data)
        self._pos = 0
        self._end = len(data)

    @property
    def offset(self) -> int:
        """Absolute position of the next byte to read."""
        return self._pos

    @property
    def remaining(self) -> int:
        """Bytes left before the current end (the enclosing vector's end, if any)."""
        return self._end - self._pos

    def _short(self, need: int, what: str, at: int | None = None) -> DecodeError:
        pos = self._pos if at is None else at
        return DecodeError(f"{what}: need {need} bytes at offset {pos}, have {self._end - pos}")

    def u8(self, what: str = "uint8") -> int:
        pos = self._pos
        if pos >= self._end:
            raise self._short(1, what)
        self._pos = pos + 1
        return self._data[pos]

    def u16(self, what: str = "uint16") -> int:
        pos = self._pos
        if self._end - pos < 2:
            raise self._short(2, what)
        self._pos = pos + 2
        value: int = _U16.unpack_from(self._view, pos)[0]
        return value

    def u32(self, what: str = "uint32") -> int:
        pos = self._pos
        if self._end - pos < 4:
            raise self._short(4, what)
        self._pos = pos + 4
        value: int = _U32.unpack_from(self._view, pos)[0]
        return value

    def u64(self, what: str = "uint64") -> int:
        pos = self._pos
        if self._end - pos < 8:
            raise self._short(8, what)
        self._pos = pos + 8
        value: int = _U64.unpack_from(self._view, pos)[0]
        return value

    def fixed(self, n: int, what: str = "opaque") -> bytes:
        """``opaque x[n]``."""
        pos = self._pos
        if self._end - pos < n:
            raise self._short(n, what)
        self._pos = pos + n
        return self._data[pos : pos + n]

    def enum8(self, enum_cls: type[_E], what: str) -> _E:
        """A one-byte enum; values outside `enum_cls` are rejected."""
        pos = self._pos
        value = self.u8(what)
        # The members by value: a dict lookup, where calling the enum class costs ~10 times as
        # much, once per report in an aggregation job's answers.
        member: _E | None = enum_cls._value2member_map_.get(value)  # type: ignore[assignment]
        if member is None:
            raise DecodeError(f"{what}: unknown value {value} at offset {pos}")
        return member

    def _bad_length(
        self, n: int, prefix_at: int, body_at: int, min_len: int, what: str
    ) -> DecodeError:
        if n < min_len:
            return DecodeError(
                f"{what}: length {n} at offset {prefix_at} is below the minimum {min_len}"
            )
        return self._short(n, what, body_at)

    def opaque8(self, what: str = "opaque", min_len: int = 0) -> bytes:
        """``opaque x<min_len..2^8-1>``."""
        at = self._pos
        n = self.u8(what)
        pos = at + 1
        if n < min_len or self._end - pos < n:
            raise self._bad_length(n, at, pos, min_len, what)
        self._pos = pos + n
        return self._data[pos : pos + n]

    def opaque16(self, what: str = "opaque", min_len: int = 0) -> bytes:
        """``opaque x<min_len..2^16-1>``."""
        at = self._pos
        if self._end - at < 2:
            raise self._short(2, what)
        n: int = _U16.unpack_from(self._view, at)[0]
        pos = at + 2
        if n < min_len or self._end - pos < n:
            raise self._bad_length(n, at, pos, min_len, what)
        self._pos = pos + n
        return self._data[pos : pos + n]

    def opaque32(self, what: str = "opaque", min_len: int = 0) -> bytes:
        """``opaque x<min_len..2^32-1>``."""
        at = self._pos
        if self._end - at < 4:
            raise self._short(4, what)
        n: int = _U32.unpack_from(self._view, at)[0]
        pos = at + 4
        if n < min_len or self._end - pos < n:
            raise self._bad_length(n, at, pos, min_len, what)
        self._pos = pos + n
        return self._data[pos : pos + n]

    def _items(self, n: int, decode_item: Callable[[Decoder], _T], what: str) -> list[_T]:
        limit = self._pos + n
        saved_end = self._end
        self._end = limit
        items: list[_T] = []
        try:
            while self._pos < limit:
                before = self._pos
                items.append(decode_item(self))
                if self._pos == before:
                    # A zero-width item would make the loop spin forever on hostile input.
                    raise DecodeError(f"{what}: item at offset {before} consumed no bytes")
        finally:
            self._end = saved_end
        return items

    def vector16(
        self, decode_item: Callable[[Decoder], _T], what: str = "vector", min_len: int = 0
    ) -> list[_T]:
        """``T x<min_len..2^16-1>``: a u16 byte length, then items filling it exactly."""
        at = self._pos
        n = self.u16(what)
        if n == 0 and min_len == 0:
            # Most reports' extension lists: nothing to narrow the end for.
            return []
        if n < min_len or self._end - self._pos < n:
            raise self._bad_length(n, at, self._pos, min_len, what)
        return self._items(n, decode_item, what)

    def vector32(
        self, decode_item: Callable[[Decoder], _T], what: str = "vector", min_len: int = 0
    ) -> list[_T]:
        """``T x<min_len..2^32-1>``: a u32 byte length, then items filling it exactly."""
        at = self._pos
        n = self.u32(what)
        if n < min_len or self._end - self._pos < n:
            raise self._bad_length(n, at, self._pos, min_len, what)
        return self._items(n, decode_item, what)

    def vector_to_end(
        self, decode_item: Callable[[Decoder], _T], what: str = "vector", min_len: int = 0
    ) -> list[_T]:
        """``T x[message_length]`` (DAP-19 §4): no prefix, items up to the current end. A
        partial item at the end is the item decoder's `DecodeError`."""
        n = self._end - self._pos
        if n < min_len:
            raise DecodeError(
                f"{what}: {n} bytes at offset {self._pos} is below the minimum {min_len}"
            )
        return self._items(n, decode_item, what)

    def finish(self, what: str = "message") -> None:
        """Require that everything up to the end has been consumed."""
        if self._pos != self._end:
            raise DecodeError(
                f"{what}: {self._end - self._pos} trailing bytes at offset {self._pos}"
            )


class Encoder:
    """Appends TLS encodings to one growing `bytearray`.

    Out-of-range values raise `ValueError` (never `struct.error`): sagg must not emit a
    message its own decoder, or a peer's, would reject.
    """

    __slots__ = ("_buf",)

    def __init__(self) -> None:
        self._buf = bytearray()

    def to_bytes(self) -> bytes:
        return bytes(self._buf)

    def __len__(self) -> int:
        return len(self._buf)

    def u8(self, value: int, what: str = "uint8") -> None:
        if not 0 <= value <= U8_MAX:
            raise ValueError(f"{what}: {value} does not fit in uint8")
        self._buf.append(value)

    def u16(self, value: int, what: str = "uint16") -> None:
        if not 0 <= value <= U16_MAX:
            raise ValueError(f"{what}: {value} does not fit in uint16")
        self._buf += _U16.pack(value)

    def u32(self, value: int, what: str = "uint32") -> None:
        if not 0 <= value <= U32_MAX:
            raise ValueError(f"{what}: {value} does not fit in uint32")
        self._buf += _U32.pack(value)

    def u64(self, value: int, what: str = "uint64") -> None:
        if not 0 <= value <= U64_MAX:
            raise ValueError(f"{what}: {value} does not fit in uint64")
        self._buf += _U64.pack(value)

    def fixed(self, data: bytes, n: int, what: str = "opaque") -> None:
        """``opaque x[n]``."""
        if len(data) != n:
            raise ValueError(f"{what}: expected exactly {n} bytes, got {len(data)}")
        self._buf += data

    @staticmethod
    def _check_len(n: int, min_len: int, max_len: int, what: str) -> None:
        if not min_len <= n <= max_len:
            raise ValueError(f"{what}: length {n} outside {min_len}..{max_len}")

    def opaque8(self, data: bytes, what: str = "opaque", min_len: int = 0) -> None:
        self._check_len(len(data), min_len, U8_MAX, what)
        self._buf.append(len(data))
        self._buf += data

    def opaque16(self, data: bytes, what: str = "opaque", min_len: int = 0) -> None:
        self._check_len(len(data), min_len, U16_MAX, what)
        self._buf += _U16.pack(len(data))
        self._buf += data

    def opaque32(self, data: bytes, what: str = "opaque", min_len: int = 0) -> None:
        self._check_len(len(data), min_len, U32_MAX, what)
        self._buf += _U32.pack(len(data))
        self._buf += data

    def _vector(
        self,
        items: Iterable[TlsStruct],
        prefix: struct.Struct,
        max_len: int,
        what: str,
        min_len: int,
    ) -> None:
        # The byte length is only known after encoding, so reserve the prefix and patch it.
        buf = self._buf
        at = len(buf)
        buf += bytes(prefix.size)
        for item in items:
            item._encode_into(self)
        n = len(buf) - at - prefix.size
        if not min_len <= n <= max_len:
            del buf[at:]
            raise ValueError(f"{what}: encoded length {n} outside {min_len}..{max_len}")
        prefix.pack_into(buf, at, n)

    def vector16(self, items: Iterable[TlsStruct], what: str = "vector", min_len: int = 0) -> None:
        """``T x<min_len..2^16-1>``: u16 byte length, then the concatenated items."""
        self._vector(items, _U16, U16_MAX, what, min_len)

    def vector32(self, items: Iterable[TlsStruct], what: str = "vector", min_len: int = 0) -> None:
        """``T x<min_len..2^32-1>``: u32 byte length, then the concatenated items."""
        self._vector(items, _U32, U32_MAX, what, min_len)

    def vector_to_end(
        self, items: Iterable[TlsStruct], what: str = "vector", min_len: int = 0
    ) -> None:
        """``T x[message_length]`` (DAP-19 §4): the concatenated items, no prefix. Only valid
        as the last field of a message."""
        at = len(self._buf)
        for item in items:
            item._encode_into(self)
        if len(self._buf) - at < min_len:
            del self._buf[at:]
            raise ValueError(f"{what}: encoded length below the minimum {min_len}")


class TlsStruct(ABC):
    """Base of every wire struct: `encode()`/`decode()` over `_encode_into`/`_decode_from`.

    `_decode_from` reads one struct from a `Decoder` (for nesting); `decode` reads a whole
    buffer and rejects trailing bytes.
    """

    __slots__ = ()

    @abstractmethod
    def _encode_into(self, enc: Encoder) -> None: ...

    @classmethod
    @abstractmethod
    def _decode_from(cls, dec: Decoder) -> Self: ...

    def encode(self) -> bytes:
        enc = Encoder()
        self._encode_into(enc)
        return enc.to_bytes()

    @classmethod
    def decode(cls, data: Buffer) -> Self:
        return decode_all(cls, data)


class _Decodable(Protocol):
    @classmethod
    def _decode_from(cls, dec: Decoder) -> Self: ...


_D = TypeVar("_D", bound=_Decodable)


def decode_all(cls: type[_D], data: Buffer) -> _D:
    """Decode exactly one `cls` from `data`; trailing bytes are a `DecodeError`."""
    dec = Decoder(data)
    value = cls._decode_from(dec)
    dec.finish(cls.__name__)
    return value
