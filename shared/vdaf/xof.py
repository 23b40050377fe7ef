"""XofTurboShake128 (VDAF-08 §6.2.1, VDAF-20 §6.2.1) and domain-separation tags (VDAF-08 §6.2.3).

The XOF stream for (seed, dst, binder) is TurboSHAKE128(M, D=1) where M frames its inputs as
VDAF-08 does, `u8(len(dst)) || dst || seed || binder` with 16-byte seeds (`XofTurboShake128`), or
as VDAF-12 and later do, `u16le(len(dst)) || dst || u8(len(seed)) || seed || binder` with 32-byte
seeds (`XofTurboShake128V20`). Everything after the framing is shared.
Field vectors are read in one bulk `read()` and rejection-sampled with numpy; the rare rejected
element (probability below 2^-31 per element for Field64, 2^-59 for Field128) pulls the missing
elements from the same stream, exactly as the element-by-element definition does.

Prio3 works on batches of reports, one stream per report: `derive_seeds` and `expand_into_vecs`
hash a batch of streams in one compiled call (`shared.vdaf.turboshake`); a stream with a rejected
element is read again on its own, as above.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Final

import numpy as np
import numpy.typing as npt
from Crypto.Hash import TurboSHAKE128

from shared.vdaf.field import Field, FieldArray
from shared.vdaf.turboshake import turboshake128

#: A batch of byte strings of one length: a sequence, or the rows of a uint8 matrix.
Rows = Sequence[bytes] | npt.NDArray[np.uint8]

#: Version byte in every domain-separation tag (VDAF-08 §6.2.3).
VDAF_VERSION: Final = 8

#: Algorithm classes in the DST (VDAF-08 §6.2.3).
ALGO_CLASS_VDAF: Final = 0

#: XofTurboShake128 seed size and Prio3 sizes (VDAF-08 §6.2.1, §7.2).
XOF_SEED_SIZE: Final = 16

#: XofTurboShake128's seed size from VDAF-12 on (VDAF-20 §6.2.1).
XOF_SEED_SIZE_V20: Final = 32


#: Domain-separation byte of TurboSHAKE128 that VDAF-08 fixes.
_TURBOSHAKE_DOMAIN = 1


def domain_separation_tag(
    algo_id: int, usage: int, version: int = VDAF_VERSION, ctx: bytes = b""
) -> bytes:
    """`u8 VERSION || u8 algo_class || u32 algo_id || u16 usage || ctx`.

    VDAF-08 §6.2.3 has no application context (ctx is empty); VDAF-20 §6.2.3 appends it raw.
    """
    return struct.pack(">BBIH", version, ALGO_CLASS_VDAF, algo_id, usage) + ctx


class XofTurboShake128:
    """One XOF stream; `next` and `next_vec` continue where the previous read stopped."""

    SEED_SIZE = XOF_SEED_SIZE

    __slots__ = ("_shake",)

    def __init__(self, seed: bytes, dst: bytes, binder: bytes) -> None:
        if len(seed) != self.SEED_SIZE:
            raise ValueError(f"XOF seed must be {self.SEED_SIZE} bytes, got {len(seed)}")
        self._shake = TurboSHAKE128.new(domain=_TURBOSHAKE_DOMAIN)
        self._shake.update(self._frame(seed, dst) + binder)

    @staticmethod
    def _frame(seed: bytes, dst: bytes) -> bytes:
        """`u8(len(dst)) || dst || seed` (VDAF-08 §6.2.1)."""
        if len(dst) > 255:
            raise ValueError("XOF domain-separation tag longer than 255 bytes")
        return bytes((len(dst),)) + dst + seed

    def next(self, length: int) -> bytes:
        return bytes(self._shake.read(length))

    def next_vec(self, field: type[Field], length: int) -> FieldArray:
        """`length` field elements by rejection sampling (VDAF-08 §6.2)."""
        values, ok = field.candidates(self.next(length * field.ENCODED_SIZE))
        if bool(ok.all()):
            return values
        kept = [values[ok]]
        missing = length - int(ok.sum())
        while missing > 0:
            more, more_ok = field.candidates(self.next(missing * field.ENCODED_SIZE))
            kept.append(more[more_ok])
            missing -= int(more_ok.sum())
        return np.ascontiguousarray(np.concatenate(kept))

    @classmethod
    def derive_seed(cls, seed: bytes, dst: bytes, binder: bytes) -> bytes:
        return cls(seed, dst, binder).next(cls.SEED_SIZE)

    @classmethod
    def expand_into_vec(
        cls, field: type[Field], seed: bytes, dst: bytes, binder: bytes, length: int
    ) -> FieldArray:
        return cls(seed, dst, binder).next_vec(field, length)

    @classmethod
    def derive_seeds(cls, seeds: Rows, dst: bytes, binders: Rows) -> npt.NDArray[np.uint8]:
        """Row i: `derive_seed(seeds[i], dst, binders[i])`, all in one compiled call."""
        return cls._streams(seeds, dst, binders, cls.SEED_SIZE)

    @classmethod
    def expand_into_vecs(
        cls, field: type[Field], seeds: Rows, dst: bytes, binders: Rows, length: int
    ) -> FieldArray:
        """`expand_into_vec(field, seeds[i], dst, binders[i], length)` as row i of an
        (n, length) field array, the streams hashed in one compiled call."""
        size = field.ENCODED_SIZE
        out = cls._streams(seeds, dst, binders, length * size)
        values, ok = field.candidates(out.reshape(-1))
        values = values.reshape(len(out), length, field.LIMBS)
        for r in map(int, np.flatnonzero(~ok.reshape(len(out), length).all(axis=1))):
            seed, binder = (byte_rows(rows)[r].tobytes() for rows in (seeds, binders))
            values[r] = cls.expand_into_vec(field, seed, dst, binder, length)
        return values

    @classmethod
    def _streams(
        cls, seeds: Rows, dst: bytes, binders: Rows, out_len: int
    ) -> npt.NDArray[np.uint8]:
        """Row i: the first `out_len` bytes of the stream (seeds[i], dst, binders[i])."""
        n = len(seeds)
        if len(binders) != n:
            raise ValueError("one binder per seed")
        if not n:
            return np.zeros((0, out_len), np.uint8)
        seed_rows = byte_rows(seeds)
        if seed_rows.shape[1] != cls.SEED_SIZE:
            raise ValueError(f"XOF seed must be {cls.SEED_SIZE} bytes")
        # The framing is `prefix || seed` with a prefix that depends on dst alone.
        prefix = cls._frame(bytes(cls.SEED_SIZE), dst)[: -cls.SEED_SIZE]
        head = np.broadcast_to(np.frombuffer(prefix, np.uint8), (n, len(prefix)))
        messages = np.hstack((head, seed_rows, byte_rows(binders)))
        return turboshake128(messages, _TURBOSHAKE_DOMAIN, out_len)


class XofTurboShake128V20(XofTurboShake128):
    """XofTurboShake128 as VDAF-12..20 frame it (VDAF-20 §6.2.1): 32-byte seeds, u16 DST length."""

    SEED_SIZE = XOF_SEED_SIZE_V20

    __slots__ = ()

    @staticmethod
    def _frame(seed: bytes, dst: bytes) -> bytes:
        """`u16le(len(dst)) || dst || u8(len(seed)) || seed` (VDAF-20 §6.2.1)."""
        if len(dst) > 0xFFFF:
            raise ValueError("XOF domain-separation tag longer than 65535 bytes")
        return struct.pack("<H", len(dst)) + dst + bytes((len(seed),)) + seed


def byte_rows(rows: Rows, width: int = 0) -> npt.NDArray[np.uint8]:
    """`rows` as a (len(rows), width) uint8 matrix, `width` being what an empty batch has;
    ValueError unless all rows have one length."""
    n = len(rows)
    if isinstance(rows, np.ndarray):
        return rows.reshape(n, -1) if n else rows.reshape(0, width)
    if not n:
        return np.zeros((0, width), np.uint8)
    width = len(rows[0])
    if any(len(row) != width for row in rows):
        raise ValueError("a batch of XOF inputs must have one length")
    return np.frombuffer(b"".join(rows), np.uint8).reshape(n, width)
