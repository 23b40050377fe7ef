"""Tests for shared.codec: the TLS presentation-language primitives (RFC 8446 §3)."""

from __future__ import annotations

import array
import re
from dataclasses import dataclass
from enum import IntEnum
from typing import Self

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shared.codec import (
    U16_MAX,
    U32_MAX,
    U64_MAX,
    DecodeError,
    Decoder,
    Encoder,
    TlsStruct,
    decode_all,
)

# --- a small struct family exercising every primitive ------------------------------------------


class Color(IntEnum):
    RED = 0
    GREEN = 1


@dataclass(frozen=True, slots=True)
class Item(TlsStruct):
    """struct { uint16 tag; opaque data<0..2^8-1>; } Item;"""

    tag: int
    data: bytes

    def _encode_into(self, enc: Encoder) -> None:
        enc.u16(self.tag, "Item.tag")
        enc.opaque8(self.data, "Item.data")

    @classmethod
    def _decode_from(cls, dec: Decoder) -> Self:
        return cls(dec.u16("Item.tag"), dec.opaque8("Item.data"))


@dataclass(frozen=True, slots=True)
class Everything(TlsStruct):
    """struct { uint8 a; uint32 b; uint64 c; opaque d[3]; Color e; opaque f<1..2^16-1>;
    opaque g<0..2^32-1>; Item h<0..2^16-1>; Item i<1..2^32-1>; } Everything;"""

    a: int
    b: int
    c: int
    d: bytes
    e: Color
    f: bytes
    g: bytes
    h: tuple[Item, ...]
    i: tuple[Item, ...]

    def _encode_into(self, enc: Encoder) -> None:
        enc.u8(self.a)
        enc.u32(self.b)
        enc.u64(self.c)
        enc.fixed(self.d, 3)
        enc.u8(self.e)
        enc.opaque16(self.f, "Everything.f", min_len=1)
        enc.opaque32(self.g)
        enc.vector16(self.h)
        enc.vector32(self.i, min_len=1)

    @classmethod
    def _decode_from(cls, dec: Decoder) -> Self:
        return cls(
            dec.u8("Everything.a"),
            dec.u32("Everything.b"),
            dec.u64("Everything.c"),
            dec.fixed(3, "Everything.d"),
            dec.enum8(Color, "Everything.e"),
            dec.opaque16("Everything.f", min_len=1),
            dec.opaque32("Everything.g"),
            tuple(dec.vector16(Item._decode_from, "Everything.h")),
            tuple(dec.vector32(Item._decode_from, "Everything.i", min_len=1)),
        )


SAMPLE = Everything(
    a=0xAB,
    b=0x01020304,
    c=0x0102030405060708,
    d=b"xyz",
    e=Color.GREEN,
    f=b"F",
    g=b"gg",
    h=(Item(1, b""), Item(0xFFFF, b"hi")),
    i=(Item(2, b"i"),),
)
SAMPLE_HEX = (
    "ab"  # a
    "01020304"  # b
    "0102030405060708"  # c
    "78797a"  # d
    "01"  # e
    "0001 46"  # f
    "00000002 6767"  # g
    "0008 0001 00 ffff 02 6869"  # h: 8 bytes, two items
    "00000004 0002 01 69"  # i: 4 bytes, one item
)
SAMPLE_BYTES = bytes.fromhex(SAMPLE_HEX)


def expect_decode_error(data: bytes, match: str | None = None) -> DecodeError:
    with pytest.raises(DecodeError, match=match) as info:
        Everything.decode(data)
    return info.value


# --- integers ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "value", "hex_"),
    [
        ("u8", 0, "00"),
        ("u8", 0xFF, "ff"),
        ("u16", 0x1234, "1234"),
        ("u16", U16_MAX, "ffff"),
        ("u32", 0x01020304, "01020304"),
        ("u32", U32_MAX, "ffffffff"),
        ("u64", 12345, "0000000000003039"),
        ("u64", U64_MAX, "ffffffffffffffff"),
    ],
)
def test_integers_are_big_endian(method: str, value: int, hex_: str) -> None:
    enc = Encoder()
    getattr(enc, method)(value)
    assert enc.to_bytes().hex() == hex_
    dec = Decoder(bytes.fromhex(hex_))
    assert getattr(dec, method)() == value
    dec.finish()


@pytest.mark.parametrize(
    ("method", "bad"),
    [("u8", 256), ("u8", -1), ("u16", 1 << 16), ("u32", 1 << 32), ("u64", 1 << 64), ("u64", -1)],
)
def test_encoding_out_of_range_integer_is_value_error(method: str, bad: int) -> None:
    enc = Encoder()
    with pytest.raises(ValueError, match="does not fit"):
        getattr(enc, method)(bad, "X.field")
    assert len(enc) == 0


@pytest.mark.parametrize(("method", "size"), [("u8", 1), ("u16", 2), ("u32", 4), ("u64", 8)])
def test_short_integer_reports_field_offset_and_available(method: str, size: int) -> None:
    dec = Decoder(b"\x00" * (size + 2))
    dec.fixed(3)
    with pytest.raises(DecodeError) as info:
        getattr(dec, method)("S.n")
    assert str(info.value) == f"S.n: need {size} bytes at offset 3, have {size - 1}"


# --- opaque ------------------------------------------------------------------------------------


def test_fixed_round_trip_and_wrong_length() -> None:
    enc = Encoder()
    enc.fixed(b"abcd", 4)
    assert enc.to_bytes() == b"abcd"
    with pytest.raises(ValueError, match="exactly 4 bytes"):
        Encoder().fixed(b"abc", 4)
    dec = Decoder(b"abc")
    with pytest.raises(DecodeError, match=r"^T\.id: need 4 bytes at offset 0, have 3$"):
        dec.fixed(4, "T.id")


@pytest.mark.parametrize(
    ("method", "prefix_len"), [("opaque8", 1), ("opaque16", 2), ("opaque32", 4)]
)
def test_opaque_length_prefixes(method: str, prefix_len: int) -> None:
    enc = Encoder()
    getattr(enc, method)(b"hello")
    out = enc.to_bytes()
    assert out == (5).to_bytes(prefix_len, "big") + b"hello"
    dec = Decoder(out)
    assert getattr(dec, method)() == b"hello"
    dec.finish()
    empty = Encoder()
    getattr(empty, method)(b"")
    assert empty.to_bytes() == bytes(prefix_len)


@pytest.mark.parametrize(("method", "limit"), [("opaque8", 0xFF), ("opaque16", U16_MAX)])
def test_encoding_oversized_opaque_is_value_error(method: str, limit: int) -> None:
    enc = Encoder()
    getattr(enc, method)(bytes(limit))
    with pytest.raises(ValueError, match="outside"):
        getattr(enc, method)(bytes(limit + 1))


def test_encoding_empty_opaque_where_forbidden_is_value_error() -> None:
    with pytest.raises(ValueError, match=r"length 0 outside 1\.\."):
        Encoder().opaque16(b"", "X.f", min_len=1)


def test_length_prefix_past_the_buffer_message() -> None:
    data = bytes(40) + (1234).to_bytes(4, "big") + bytes(12)
    dec = Decoder(data)
    dec.fixed(40)
    with pytest.raises(DecodeError) as info:
        dec.opaque32("Report.public_share")
    assert str(info.value) == "Report.public_share: need 1234 bytes at offset 44, have 12"


@pytest.mark.parametrize(
    ("method", "prefix"), [("opaque8", "00"), ("opaque16", "0000"), ("opaque32", "00000000")]
)
def test_zero_length_where_forbidden(method: str, prefix: str) -> None:
    dec = Decoder(bytes.fromhex("ff" + prefix))
    dec.u8()
    with pytest.raises(DecodeError) as info:
        getattr(dec, method)("H.enc", min_len=1)
    assert str(info.value) == "H.enc: length 0 at offset 1 is below the minimum 1"


# --- enums -------------------------------------------------------------------------------------


def test_enum_out_of_range() -> None:
    assert Decoder(b"\x01").enum8(Color, "C") is Color.GREEN
    with pytest.raises(DecodeError, match=r"^C: unknown value 2 at offset 0$"):
        Decoder(b"\x02").enum8(Color, "C")


# --- vectors -----------------------------------------------------------------------------------


def test_vector_prefix_is_byte_length_not_count() -> None:
    items = [Item(1, b"a"), Item(2, b"bc"), Item(3, b"")]
    enc = Encoder()
    enc.vector16(items)
    out = enc.to_bytes()
    assert out[:2] == (4 + 5 + 3).to_bytes(2, "big")
    assert Decoder(out).vector16(Item._decode_from) == items
    enc32 = Encoder()
    enc32.vector32(items)
    assert enc32.to_bytes() == (12).to_bytes(4, "big") + out[2:]


def test_empty_vector_where_forbidden() -> None:
    with pytest.raises(ValueError, match=r"encoded length 0 outside 1\.\."):
        Encoder().vector32([], "V", min_len=1)
    with pytest.raises(DecodeError, match=r"^V: length 0 at offset 0 is below the minimum 1$"):
        Decoder(bytes(4)).vector32(Item._decode_from, "V", min_len=1)


def test_failed_vector_encoding_leaves_encoder_unchanged() -> None:
    enc = Encoder()
    enc.u8(7)
    with pytest.raises(ValueError):
        enc.vector16([], min_len=1)
    assert enc.to_bytes() == b"\x07"


def test_oversized_vector_is_value_error() -> None:
    items = [Item(0, bytes(200))] * 330  # 330 * 203 bytes > 2^16 - 1
    with pytest.raises(ValueError, match=r"outside 0\.\.65535"):
        Encoder().vector16(items)


def test_vector_item_cannot_read_past_vector_end() -> None:
    # The vector claims 3 bytes but its item needs 4 (u16 tag + 1-byte prefix + 1 byte).
    data = bytes.fromhex("0003 0001 01 41 00")
    dec = Decoder(data)
    with pytest.raises(DecodeError) as info:
        dec.vector16(Item._decode_from, "V")
    assert str(info.value) == "Item.data: need 1 bytes at offset 5, have 0"
    assert dec.remaining == len(data) - 5  # the enclosing end is restored after the failure


def test_vector_length_past_the_buffer() -> None:
    with pytest.raises(DecodeError, match=r"^V: need 9 bytes at offset 2, have 3$"):
        Decoder(bytes.fromhex("0009 000100")).vector16(Item._decode_from, "V")


# --- unprefixed vectors running to the end (DAP-19 `T v[message_length]`) ----------------------


def test_vector_to_end_has_no_prefix_and_reads_to_the_end() -> None:
    items = [Item(1, b"a"), Item(2, b""), Item(0xFFFF, b"xyz")]
    enc = Encoder()
    enc.u8(9)
    enc.vector_to_end(items, "V")
    out = enc.to_bytes()
    assert out == bytes.fromhex("09 0001 01 61 0002 00 ffff 03 78797a")
    dec = Decoder(out)
    assert dec.u8() == 9
    assert dec.vector_to_end(Item._decode_from, "V") == items
    dec.finish()
    assert Decoder(b"").vector_to_end(Item._decode_from, "V") == []


def test_vector_to_end_stops_at_the_enclosing_vector_end() -> None:
    # Nested in a 4-byte u16 vector, the unprefixed list ends with that vector, not the buffer.
    dec = Decoder(bytes.fromhex("0004 0001 01 41 0002 00"))
    nested = dec.vector16(lambda d: d.vector_to_end(Item._decode_from, "V"), "Outer")
    assert nested == [[Item(1, b"A")]]
    assert dec.remaining == 3
    assert dec.vector_to_end(Item._decode_from, "V") == [Item(2, b"")]


def test_vector_to_end_partial_trailing_item_is_decode_error() -> None:
    whole = bytes.fromhex("0001 01 61 0002 00")
    for cut in (1, 3, 5, 6):
        with pytest.raises(DecodeError, match="need"):
            Decoder(whole[:cut]).vector_to_end(Item._decode_from, "V")
    # a cut at an item boundary is a shorter, valid list
    assert Decoder(whole[:4]).vector_to_end(Item._decode_from, "V") == [Item(1, b"a")]


def test_vector_to_end_minimum() -> None:
    with pytest.raises(DecodeError, match=r"^V: 0 bytes at offset 1 is below the minimum 1$"):
        dec = Decoder(b"\x07")
        dec.u8()
        dec.vector_to_end(Item._decode_from, "V", min_len=1)
    enc = Encoder()
    enc.u8(7)
    with pytest.raises(ValueError, match=r"^V: encoded length below the minimum 1$"):
        enc.vector_to_end([], "V", min_len=1)
    assert enc.to_bytes() == b"\x07"  # nothing half-written


def test_zero_width_items_are_rejected() -> None:
    calls: list[int] = []

    def nothing(dec: Decoder) -> None:
        calls.append(dec.offset)
        assert len(calls) == 1, "the decoder kept looping on a zero-width item"

    with pytest.raises(DecodeError, match="consumed no bytes"):
        Decoder(bytes.fromhex("0001 00")).vector16(nothing, "V")


# --- whole messages ----------------------------------------------------------------------------


def test_sample_known_encoding() -> None:
    assert SAMPLE.encode() == SAMPLE_BYTES
    assert Everything.decode(SAMPLE_BYTES) == SAMPLE
    assert decode_all(Everything, SAMPLE_BYTES) == SAMPLE


@pytest.mark.parametrize(
    "wrap", [bytes, bytearray, memoryview, lambda b: memoryview(bytearray(b))[0:]]
)
def test_decoder_accepts_buffers(wrap: object) -> None:
    data = SAMPLE_BYTES
    assert Everything.decode(wrap(data)) == SAMPLE  # type: ignore[operator]


def test_decoder_flattens_multibyte_memoryviews() -> None:
    words = array.array("H", [0x0102, 0x0304])
    dec = Decoder(memoryview(words))
    assert dec.remaining == 4
    assert sorted(dec.fixed(4)) == [1, 2, 3, 4]


def test_every_truncation_is_decode_error() -> None:
    data = SAMPLE_BYTES
    for cut in range(len(data)):
        expect_decode_error(data[:cut])


def test_trailing_byte_is_decode_error() -> None:
    data = SAMPLE_BYTES
    err = expect_decode_error(data + b"\x00")
    assert str(err) == f"Everything: 1 trailing bytes at offset {len(data)}"


def test_malformed_cases_name_the_field() -> None:
    data = bytearray(SAMPLE_BYTES)
    bad_enum = bytearray(data)
    bad_enum[16] = 9
    expect_decode_error(bytes(bad_enum), r"^Everything\.e: unknown value 9 at offset 16$")
    zero_f = data[:17] + bytes.fromhex("0000") + data[20:]
    expect_decode_error(bytes(zero_f), r"^Everything\.f: length 0 at offset 17")
    huge_g = data[:20] + bytes.fromhex("ffffffff") + data[24:]
    expect_decode_error(bytes(huge_g), r"^Everything\.g: need 4294967295 bytes at offset 24")


def test_decoder_offsets() -> None:
    dec = Decoder(SAMPLE_BYTES)
    assert (dec.offset, dec.remaining) == (0, len(SAMPLE_BYTES))
    dec.u8()
    dec.u32()
    assert (dec.offset, dec.remaining) == (5, len(SAMPLE_BYTES) - 5)


# --- property tests ----------------------------------------------------------------------------

items = st.builds(Item, st.integers(0, U16_MAX), st.binary(max_size=8))
everything = st.builds(
    Everything,
    a=st.integers(0, 255),
    b=st.integers(0, U32_MAX),
    c=st.integers(0, U64_MAX),
    d=st.binary(min_size=3, max_size=3),
    e=st.sampled_from(Color),
    f=st.binary(min_size=1, max_size=8),
    g=st.binary(max_size=8),
    h=st.lists(items, max_size=3).map(tuple),
    i=st.lists(items, min_size=1, max_size=3).map(tuple),
)


@given(everything)
def test_round_trip(value: Everything) -> None:
    assert Everything.decode(value.encode()) == value


@given(st.binary(max_size=64))
def test_fuzz_only_decode_error(data: bytes) -> None:
    try:
        value = Everything.decode(data)
    except DecodeError as exc:
        assert re.search(r"offset \d+", str(exc))
        return
    assert value.encode() == data


@given(everything, st.data())
def test_fuzz_mutations_only_decode_error(value: Everything, data: st.DataObject) -> None:
    raw = bytearray(value.encode())
    at = data.draw(st.integers(0, len(raw) - 1))
    raw[at] = data.draw(st.integers(0, 255))
    try:
        decoded = Everything.decode(bytes(raw))
    except DecodeError:
        return
    assert decoded.encode() == bytes(raw)
