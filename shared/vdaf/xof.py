"""XofTurboShake128 (VDAF-08 §6.2.1) and Prio3 domain-separation tags (VDAF-08 §6.2.3).

The XOF stream for (seed, dst, binder) is TurboSHAKE128(len(dst) || dst || seed || binder, D=1).
Field vectors are read in one bulk `read()` and rejection-sampled with numpy; the rare rejected
element (probability below 2^-31 per element for Field64, 2^-59 for Field128) pulls the missing
elements from the same stream, exactly as the element-by-element definition does.
"""

from __future__ import annotations

import struct
from typing import Final

import numpy as np
from Crypto.Hash import TurboSHAKE128

from shared.vdaf.field import Field, FieldArray

#: Version byte in every domain-separation tag (VDAF-08 §6.2.3).
VDAF_VERSION: Final = 8

#: Algorithm classes in the DST (VDAF-08 §6.2.3).
ALGO_CLASS_VDAF: Final = 0

#: XofTurboShake128 seed size and Prio3 sizes (VDAF-08 §6.2.1, §7.2).
XOF_SEED_SIZE: Final = 16


#: Domain-separation byte of TurboSHAKE128 that VDAF-08 fixes.
_TURBOSHAKE_DOMAIN = 1


def domain_separation_tag(algo_id: int, usage: int) -> bytes:
    """`u8 VERSION || u8 algo_class || u32 algo_id || u16 usage` (VDAF-08 §6.2.3)."""
    return struct.pack(">BBIH", VDAF_VERSION, ALGO_CLASS_VDAF, algo_id, usage)


class XofTurboShake128:
    """One XOF stream; `next` and `next_vec` continue where the previous read stopped."""

    SEED_SIZE = XOF_SEED_SIZE

    __slots__ = ("_shake",)

    def __init__(self, seed: bytes, dst: bytes, binder: bytes) -> None:
        if len(seed) != self.SEED_SIZE:
            raise ValueError(f"XOF seed must be {self.SEED_SIZE} bytes, got {len(seed)}")
        if len(dst) > 255:
            raise ValueError("XOF domain-separation tag longer than 255 bytes")
        self._shake = TurboSHAKE128.new(domain=_TURBOSHAKE_DOMAIN)
        self._shake.update(bytes((len(dst),)) + dst + seed + binder)

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
