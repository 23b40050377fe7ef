"""The finite fields of VDAF-08 §6.1 (parameters in §6.1.3), as compiled kernels over arrays.

A field array is a ``numpy`` array of dtype uint64 whose last axis holds the limbs of one
element (little-endian 64-bit words: one for Field64, two ``[lo, hi]`` for Field128); every other
axis is an element axis. Values are canonical, in ``[0, p)``, so the VDAF-08 encoding (ENCODED_SIZE
bytes little-endian per element, §6.1) is the array's memory read as ``<u8``.

Arithmetic runs in numba kernels compiled once and cached on disk (``cache=True``), with no Python
work per element. Numba has no 128-bit integer, so a tiny LLVM intrinsic provides the 64x64 ->
128-bit product; everything else is 64-bit words with explicit carries:

* Field64, p = 2^64 - 2^32 + 1: a 128-bit product is reduced with 2^64 = 2^32 - 1 and 2^96 = -1.
* Field128, p = 2^128 - 28 * 2^64 + 1: a 256-bit product is reduced with
  2^128 = 28 * 2^64 - 1 and 2^192 = 783 * 2^64 - 28, which needs only small multipliers.

Sums of products (``inner``, ``sum``, schoolbook ``poly_mul``) accumulate the unreduced products in
a few extra words and reduce once per result.

Inputs that are not canonical give unspecified (but memory-safe) results; ``decode`` is the
checked way in.
"""

from __future__ import annotations

import itertools
import math
import operator
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, NamedTuple, TypeAlias, TypeVar, cast

import numpy as np
import numpy.typing as npt
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

from shared.codec import DecodeError

__all__ = ["Field", "Field64", "Field128", "FieldArray"]

#: A field array: uint64, last axis = limbs (see the module docstring).
FieldArray: TypeAlias = npt.NDArray[np.uint64]

_Fn = TypeVar("_Fn", bound=Callable[..., Any])


def _jit(fn: _Fn) -> _Fn:
    """Compile lazily on first call and keep the machine code in ``__pycache__``."""
    return cast(_Fn, njit(cache=True)(fn))


@_jit
def _below_k(words: FieldArray, p: FieldArray) -> npt.NDArray[np.bool_]:
    """Row i's value < p, comparing limbs from the most significant (rows of limbs)."""
    n, limbs = words.shape
    out = np.zeros(n, np.bool_)
    for i in range(n):
        for limb in range(limbs - 1, -1, -1):
            if words[i, limb] != p[limb]:
                out[i] = words[i, limb] < p[limb]
                break
    return out


@intrinsic
def _mulw_intrinsic(typingctx: Any, a: Any, b: Any) -> Any:
    """The full 128-bit product of two uint64 as ``(lo, hi)``: LLVM has i128, numba does not."""
    if a != types.uint64 or b != types.uint64:
        return None
    sig = types.UniTuple(types.uint64, 2)(types.uint64, types.uint64)  # type: ignore[no-untyped-call]

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        i64, i128 = ir.IntType(64), ir.IntType(128)
        prod = builder.mul(builder.zext(args[0], i128), builder.zext(args[1], i128))
        lo = builder.trunc(prod, i64)
        hi = builder.trunc(builder.lshr(prod, ir.Constant(i128, 64)), i64)
        return context.make_tuple(builder, signature.return_type, (lo, hi))

    return sig, codegen


#: The same object, typed for mypy; kernels resolve it by this global name.
_mulw = cast(Callable[[np.uint64, np.uint64], tuple[np.uint64, np.uint64]], _mulw_intrinsic)

# Kernel operation codes for the element-wise kernels.
_ADD, _SUB, _MUL = 0, 1, 2

_U0 = np.uint64(0)
_U1 = np.uint64(1)
_S32 = np.uint64(32)
_LO32 = np.uint64(0xFFFF_FFFF)

# Whether a sum reaches p is a coin flip for random operands, so the conditional corrections below
# are written as selects (`x if c else y`), which LLVM turns into conditional moves: a
# mispredicted branch costs more than computing both sides.


# --- Field64 scalar helpers ----------------------------------------------------------------------

_P64_INT = 2**64 - 2**32 + 1
_P64 = np.uint64(_P64_INT)
#: 2^64 mod p, also 2^64 - p.
_EPS64 = np.uint64(2**32 - 1)
#: 2^128 mod p, weight of the third accumulator word.
_W128_64 = np.uint64(2**128 % _P64_INT)


@_jit
def _a64(a: np.uint64, b: np.uint64) -> np.uint64:
    s = a + b
    # A carry out of 64 bits or a sum >= p both need exactly one subtraction of p (mod 2^64).
    return s - _P64 if (s < a) | (s >= _P64) else s


@_jit
def _s64(a: np.uint64, b: np.uint64) -> np.uint64:
    d = a - b
    return d + _P64 if a < b else d


@_jit
def _r64(lo: np.uint64, hi: np.uint64) -> np.uint64:
    """hi * 2^64 + lo mod p, for any 128-bit input."""
    hh = hi >> _S32
    hl = hi & _LO32
    # hh * 2^96 = -hh.
    t = lo - hh
    if lo < hh:
        # Borrowed 2^64, which is EPS mod p.
        t -= _EPS64
    # hl * 2^64 = hl * EPS < 2^64.
    u = hl * _EPS64
    s = t + u
    s = s + _EPS64 if s < u else s
    return s - _P64 if s >= _P64 else s


@_jit
def _m64(a: np.uint64, b: np.uint64) -> np.uint64:
    lo, hi = _mulw(a, b)
    return _r64(lo, hi)


@_jit
def _r64x3(x0: np.uint64, x1: np.uint64, x2: np.uint64) -> np.uint64:
    """Reduce a 192-bit lazy accumulator."""
    r = _r64(x0, x1)
    if x2 != _U0:
        if x2 >= _P64:
            x2 -= _P64
        r = _a64(r, _m64(x2, _W128_64))
    return r


@_jit
def _pow64(x: np.uint64, ebits: npt.NDArray[np.uint8]) -> np.uint64:
    acc = _U1
    for bit in ebits:
        acc = _m64(acc, acc)
        if bit:
            acc = _m64(acc, x)
    return acc


# --- Field128 scalar helpers ---------------------------------------------------------------------

_P128_INT = 2**66 * 4611686018427387897 + 1
_P128_HI = np.uint64(_P128_INT >> 64)
_C128 = np.uint64(28)
_C128SQ_M1 = np.uint64(783)
#: 2^256 mod p as [lo, hi], weight of the fifth accumulator word.
_W256_LO = np.uint64(2**256 % _P128_INT & (2**64 - 1))
_W256_HI = np.uint64(2**256 % _P128_INT >> 64)


@_jit
def _sub_p128(lo: np.uint64, hi: np.uint64) -> tuple[np.uint64, np.uint64]:
    """(hi, lo) - p mod 2^128; p's low word is 1."""
    if lo == _U0:
        hi -= _U1
    return lo - _U1, hi - _P128_HI


@_jit
def _add_p128(lo: np.uint64, hi: np.uint64) -> tuple[np.uint64, np.uint64]:
    """(hi, lo) + p mod 2^128."""
    lo += _U1
    if lo == _U0:
        hi += _U1
    return lo, hi + _P128_HI


@_jit
def _a128(
    alo: np.uint64, ahi: np.uint64, blo: np.uint64, bhi: np.uint64
) -> tuple[np.uint64, np.uint64]:
    lo = alo + blo
    # bhi + carry < 2^64 because bhi < p_hi, so a wrap of hi shows as hi < ahi.
    hi = ahi + (bhi + np.uint64(lo < alo))
    # Subtract p (low word 1) if the sum wrapped or the subtraction does not borrow.
    b = np.uint64(lo == _U0)
    over = (hi < ahi) | (hi >= _P128_HI + b)
    return (lo - _U1 if over else lo), (hi - (_P128_HI + b) if over else hi)


@_jit
def _s128(
    alo: np.uint64, ahi: np.uint64, blo: np.uint64, bhi: np.uint64
) -> tuple[np.uint64, np.uint64]:
    borrow = np.uint64(alo < blo)
    lo = alo - blo
    hi = ahi - bhi - borrow
    # Add p (low word 1) back if the subtraction wrapped.
    wrapped = ahi < bhi + borrow
    lo2 = lo + _U1 if wrapped else lo
    return lo2, hi + (_P128_HI + np.uint64(lo2 < lo) if wrapped else _U0)


@_jit
def _r128(
    x0: np.uint64, x1: np.uint64, x2: np.uint64, x3: np.uint64
) -> tuple[np.uint64, np.uint64]:
    """x3*2^192 + x2*2^128 + x1*2^64 + x0 mod p, for any 256-bit input.

    With C = 28 the input equals L + M*2^64 (mod p) where L = x0 - x2 - C*x3 is in
    (-30*2^64, 2^64) and M = x1 + C*x2 + (C^2-1)*x3 < 812*2^64. Folding M's top word once more
    leaves N*2^64 + K with N < 2^64 and K > -31*2^64: a value within one p of [0, p).
    """
    c3lo, c3hi = _mulw(x3, _C128)
    t = x0 - x2
    lw = t - c3lo
    # L = lw - neg * 2^64.
    neg = np.uint64(x0 < x2) + np.uint64(t < c3lo) + c3hi

    c2lo, c2hi = _mulw(x2, _C128)
    d3lo, d3hi = _mulw(x3, _C128SQ_M1)
    m0 = x1 + c2lo
    k1 = np.uint64(m0 < c2lo)
    m0 += d3lo
    m1 = c2hi + d3hi + k1 + np.uint64(m0 < d3lo)

    # m1 * 2^128 = m1 * C * 2^64 - m1; a carry out of n0 is one more 2^128 = C * 2^64 - 1, and
    # adding C then cannot carry again because n0 < C * 812 in that case.
    n0 = m0 + _C128 * m1
    c = np.uint64(n0 < m0)
    n0 += _C128 * c
    k = lw - m1
    lo = k - c
    neg += np.uint64(lw < m1) + np.uint64(k < c)

    hi = n0 - neg
    if n0 < neg:
        return _add_p128(lo, hi)
    if hi > _P128_HI or (hi == _P128_HI and lo != _U0):
        return _sub_p128(lo, hi)
    return lo, hi


@_jit
def _mul256(
    alo: np.uint64, ahi: np.uint64, blo: np.uint64, bhi: np.uint64
) -> tuple[np.uint64, np.uint64, np.uint64, np.uint64]:
    """The full 256-bit product as four words, low first."""
    l00, h00 = _mulw(alo, blo)
    l01, h01 = _mulw(alo, bhi)
    l10, h10 = _mulw(ahi, blo)
    l11, h11 = _mulw(ahi, bhi)
    x1 = h00 + l01
    k = np.uint64(x1 < l01)
    x1 += l10
    k += np.uint64(x1 < l10)
    x2 = h01 + l11
    k2 = np.uint64(x2 < l11)
    x2 += h10
    k2 += np.uint64(x2 < h10)
    x2 += k
    k2 += np.uint64(x2 < k)
    return l00, x1, x2, h11 + k2


@_jit
def _m128(
    alo: np.uint64, ahi: np.uint64, blo: np.uint64, bhi: np.uint64
) -> tuple[np.uint64, np.uint64]:
    x0, x1, x2, x3 = _mul256(alo, ahi, blo, bhi)
    return _r128(x0, x1, x2, x3)


_Acc5 = tuple[np.uint64, np.uint64, np.uint64, np.uint64, np.uint64]
_ACC0 = (_U0, _U0, _U0, _U0, _U0)


@_jit
def _acc256(acc: _Acc5, alo: np.uint64, ahi: np.uint64, blo: np.uint64, bhi: np.uint64) -> _Acc5:
    """Add a * b to a 320-bit accumulator (five words, low first)."""
    x0, x1, x2, x3, x4 = acc
    p0, p1, p2, p3 = _mul256(alo, ahi, blo, bhi)
    x0 += p0
    c = np.uint64(x0 < p0)
    # a + b + carry overflows at most once, so every carry below is 0 or 1.
    x1 += p1
    c1 = np.uint64(x1 < p1)
    x1 += c
    c1 += np.uint64(x1 < c)
    x2 += p2
    c2 = np.uint64(x2 < p2)
    x2 += c1
    c2 += np.uint64(x2 < c1)
    x3 += p3
    c3 = np.uint64(x3 < p3)
    x3 += c2
    c3 += np.uint64(x3 < c2)
    return x0, x1, x2, x3, x4 + c3


@_jit
def _r128x5(acc: _Acc5) -> tuple[np.uint64, np.uint64]:
    x0, x1, x2, x3, x4 = acc
    lo, hi = _r128(x0, x1, x2, x3)
    if x4 != _U0:
        # x4 < 2^64 < p, already canonical.
        wlo, whi = _m128(x4, _U0, _W256_LO, _W256_HI)
        lo, hi = _a128(lo, hi, wlo, whi)
    return lo, hi


@_jit
def _pow128(
    xlo: np.uint64, xhi: np.uint64, ebits: npt.NDArray[np.uint8]
) -> tuple[np.uint64, np.uint64]:
    lo, hi = _U1, _U0
    for bit in ebits:
        lo, hi = _m128(lo, hi, lo, hi)
        if bit:
            lo, hi = _m128(lo, hi, xlo, xhi)
    return lo, hi


# --- Field64 kernels ----------------------------------------------------------------------------
#
# Arrays are flat, C-contiguous word arrays; `geom` tuples give loop counts and element strides
# (a stride of 0 broadcasts), as computed by `Field`'s methods.


@_jit
def _ew64_k(
    op: int,
    a: FieldArray,
    b: FieldArray,
    out: FieldArray,
    geom: tuple[int, int, int, int, int, int],
) -> None:
    rows, cols, ars, acs, brs, bcs = geom
    for r in range(rows):
        ia, ib, io = r * ars, r * brs, r * cols
        if op == _MUL:
            for c in range(cols):
                out[io + c] = _m64(a[ia + c * acs], b[ib + c * bcs])
        elif op == _ADD:
            for c in range(cols):
                out[io + c] = _a64(a[ia + c * acs], b[ib + c * bcs])
        else:
            for c in range(cols):
                out[io + c] = _s64(a[ia + c * acs], b[ib + c * bcs])


@_jit
def _pow64_k(a: FieldArray, out: FieldArray, ebits: npt.NDArray[np.uint8]) -> None:
    for i in range(a.size):
        out[i] = _pow64(a[i], ebits)


@_jit
def _inv64_k(a: FieldArray, out: FieldArray, ebits: npt.NDArray[np.uint8]) -> None:
    # Montgomery's trick: one exponentiation for the whole batch, three products per element.
    acc = _U1
    for i in range(a.size):
        out[i] = acc
        if a[i] != _U0:
            acc = _m64(acc, a[i])
    inv = _pow64(acc, ebits)
    for i in range(a.size - 1, -1, -1):
        x = a[i]
        if x != _U0:
            out[i] = _m64(inv, out[i])
            inv = _m64(inv, x)
        else:
            out[i] = _U0


@_jit
def _sum64_k(a: FieldArray, out: FieldArray, geom: tuple[int, int, int]) -> None:
    outer, n, inner = geom
    lo = np.empty(inner, np.uint64)
    hi = np.empty(inner, np.uint64)
    for o in range(outer):
        lo[:] = _U0
        hi[:] = _U0
        for i in range(n):
            row = (o * n + i) * inner
            for j in range(inner):
                s = lo[j] + a[row + j]
                hi[j] += np.uint64(s < lo[j])
                lo[j] = s
        for j in range(inner):
            out[o * inner + j] = _r64(lo[j], hi[j])


@_jit
def _dot64_k(a: FieldArray, b: FieldArray, out: FieldArray, geom: tuple[int, int, int]) -> None:
    n, ars, brs = geom
    for r in range(out.size):
        ia, ib = r * ars, r * brs
        x0, x1, x2 = _U0, _U0, _U0
        for j in range(n):
            plo, phi = _mulw(a[ia + j], b[ib + j])
            x0 += plo
            # phi <= 2^64 - 2, so adding the carry cannot wrap.
            phi += np.uint64(x0 < plo)
            x1 += phi
            x2 += np.uint64(x1 < phi)
        out[r] = _r64x3(x0, x1, x2)


@_jit
def _powers64_k(x: FieldArray, out: FieldArray, n: int) -> None:
    for r in range(x.size):
        xv, acc = x[r], _U1
        for k in range(r * n, (r + 1) * n):
            out[k] = acc
            acc = _m64(acc, xv)


@_jit
def _horner64_k(c: FieldArray, x: FieldArray, out: FieldArray, geom: tuple[int, int, int]) -> None:
    d, crs, xrs = geom
    for r in range(out.size):
        xv, base, acc = x[r * xrs], r * crs, _U0
        for k in range(base + d - 1, base - 1, -1):
            # acc * x + c < p^2 + p < 2^128: add before the single reduction.
            lo, hi = _mulw(acc, xv)
            lo += c[k]
            hi += np.uint64(lo < c[k])
            acc = _r64(lo, hi)
        out[r] = acc


@_jit
def _pmul64_k(
    a: FieldArray, b: FieldArray, out: FieldArray, geom: tuple[int, int, int, int]
) -> None:
    la, lb, ars, brs = geom
    length = la + lb - 1
    for r in range(out.size // length):
        ia, ib, io = r * ars, r * brs, r * length
        for k in range(length):
            x0, x1, x2 = _U0, _U0, _U0
            for i in range(max(0, k - lb + 1), min(k, la - 1) + 1):
                plo, phi = _mulw(a[ia + i], b[ib + k - i])
                x0 += plo
                phi += np.uint64(x0 < plo)
                x1 += phi
                x2 += np.uint64(x1 < phi)
            out[io + k] = _r64x3(x0, x1, x2)


@_jit
def _ntt64_k(
    a: FieldArray,
    out: FieldArray,
    tw: FieldArray,
    rev: npt.NDArray[np.int64],
    scale: FieldArray,
) -> None:
    # Iterative radix-2 decimation in time: bit-reversed load, then stages whose twiddles
    # w_{2m}^k sit contiguously at tw[m + k]; scale is 1 (forward) or 1/n (inverse).
    n, s = rev.size, scale[0]
    for base in range(0, a.size, n):
        for j in range(n):
            out[base + rev[j]] = a[base + j]
        m = 1
        while m < n:
            for blk in range(base, base + n, 2 * m):
                for k in range(m):
                    u = out[blk + k]
                    v = _m64(out[blk + k + m], tw[m + k])
                    out[blk + k] = _a64(u, v)
                    out[blk + k + m] = _s64(u, v)
            m *= 2
        if s != _U1:
            for j in range(base, base + n):
                out[j] = _m64(out[j], s)


# --- Field128 kernels: as above, with element i in words 2i (low) and 2i+1 (high) ---------------


@_jit
def _ew128_k(
    op: int,
    a: FieldArray,
    b: FieldArray,
    out: FieldArray,
    geom: tuple[int, int, int, int, int, int],
) -> None:
    rows, cols, ars, acs, brs, bcs = geom
    for r in range(rows):
        ia, ib, io = r * ars, r * brs, r * cols
        for c in range(cols):
            i = 2 * (ia + c * acs)
            j = 2 * (ib + c * bcs)
            if op == _MUL:
                lo, hi = _m128(a[i], a[i + 1], b[j], b[j + 1])
            elif op == _ADD:
                lo, hi = _a128(a[i], a[i + 1], b[j], b[j + 1])
            else:
                lo, hi = _s128(a[i], a[i + 1], b[j], b[j + 1])
            o = 2 * (io + c)
            out[o] = lo
            out[o + 1] = hi


@_jit
def _pow128_k(a: FieldArray, out: FieldArray, ebits: npt.NDArray[np.uint8]) -> None:
    for i in range(0, a.size, 2):
        out[i], out[i + 1] = _pow128(a[i], a[i + 1], ebits)


@_jit
def _inv128_k(a: FieldArray, out: FieldArray, ebits: npt.NDArray[np.uint8]) -> None:
    alo, ahi = _U1, _U0
    for i in range(0, a.size, 2):
        out[i], out[i + 1] = alo, ahi
        if a[i] != _U0 or a[i + 1] != _U0:
            alo, ahi = _m128(alo, ahi, a[i], a[i + 1])
    ilo, ihi = _pow128(alo, ahi, ebits)
    for i in range(a.size - 2, -1, -2):
        xlo, xhi = a[i], a[i + 1]
        if xlo != _U0 or xhi != _U0:
            out[i], out[i + 1] = _m128(ilo, ihi, out[i], out[i + 1])
            ilo, ihi = _m128(ilo, ihi, xlo, xhi)
        else:
            out[i], out[i + 1] = _U0, _U0


@_jit
def _sum128_k(a: FieldArray, out: FieldArray, geom: tuple[int, int, int]) -> None:
    outer, n, inner = geom
    acc = np.empty((inner, 3), np.uint64)
    for o in range(outer):
        acc[:] = _U0
        for i in range(n):
            row = 2 * (o * n + i) * inner
            for j in range(inner):
                vlo, vhi = a[row + 2 * j], a[row + 2 * j + 1]
                x0 = acc[j, 0] + vlo
                vhi += np.uint64(x0 < vlo)
                x1 = acc[j, 1] + vhi
                acc[j, 2] += np.uint64(x1 < vhi)
                acc[j, 0], acc[j, 1] = x0, x1
        for j in range(inner):
            o2 = 2 * (o * inner + j)
            out[o2], out[o2 + 1] = _r128(acc[j, 0], acc[j, 1], acc[j, 2], _U0)


@_jit
def _dot128_k(a: FieldArray, b: FieldArray, out: FieldArray, geom: tuple[int, int, int]) -> None:
    n, ars, brs = geom
    for r in range(0, out.size, 2):
        ia, ib = r * ars, r * brs
        acc = _ACC0
        for j in range(0, 2 * n, 2):
            acc = _acc256(acc, a[ia + j], a[ia + j + 1], b[ib + j], b[ib + j + 1])
        out[r], out[r + 1] = _r128x5(acc)


@_jit
def _powers128_k(x: FieldArray, out: FieldArray, n: int) -> None:
    for r in range(0, x.size, 2):
        xlo, xhi = x[r], x[r + 1]
        lo, hi = _U1, _U0
        for k in range(r * n, (r + 2) * n, 2):
            out[k], out[k + 1] = lo, hi
            lo, hi = _m128(lo, hi, xlo, xhi)


@_jit
def _horner128_k(c: FieldArray, x: FieldArray, out: FieldArray, geom: tuple[int, int, int]) -> None:
    d, crs, xrs = geom
    for r in range(0, out.size, 2):
        xlo, xhi = x[r * xrs], x[r * xrs + 1]
        base = r * crs
        lo, hi = _U0, _U0
        for k in range(base + 2 * (d - 1), base - 1, -2):
            # acc * x + c < p^2 + p < 2^256: add before the single reduction.
            x0, x1, x2, x3 = _mul256(lo, hi, xlo, xhi)
            clo, chi = c[k], c[k + 1]
            x0 += clo
            chi += np.uint64(x0 < clo)
            x1 += chi
            cy = np.uint64(x1 < chi)
            x2 += cy
            x3 += np.uint64(x2 < cy)
            lo, hi = _r128(x0, x1, x2, x3)
        out[r], out[r + 1] = lo, hi


@_jit
def _pmul128_k(
    a: FieldArray, b: FieldArray, out: FieldArray, geom: tuple[int, int, int, int]
) -> None:
    la, lb, ars, brs = geom
    length = la + lb - 1
    for r in range(out.size // (2 * length)):
        ia, ib, io = 2 * r * ars, 2 * r * brs, 2 * r * length
        for k in range(length):
            acc = _ACC0
            for i in range(max(0, k - lb + 1), min(k, la - 1) + 1):
                ja, jb = ia + 2 * i, ib + 2 * (k - i)
                acc = _acc256(acc, a[ja], a[ja + 1], b[jb], b[jb + 1])
            out[io + 2 * k], out[io + 2 * k + 1] = _r128x5(acc)


@_jit
def _ntt128_k(
    a: FieldArray,
    out: FieldArray,
    tw: FieldArray,
    rev: npt.NDArray[np.int64],
    scale: FieldArray,
) -> None:
    # Indices count elements and are doubled for word offsets.
    n, slo, shi = rev.size, scale[0], scale[1]
    for base in range(0, a.size // 2, n):
        for j in range(n):
            d, s = 2 * (base + rev[j]), 2 * (base + j)
            out[d], out[d + 1] = a[s], a[s + 1]
        m = 1
        while m < n:
            for blk in range(base, base + n, 2 * m):
                for k in range(m):
                    i, j, t = 2 * (blk + k), 2 * (blk + k + m), 2 * (m + k)
                    ulo, uhi = out[i], out[i + 1]
                    vlo, vhi = _m128(out[j], out[j + 1], tw[t], tw[t + 1])
                    out[i], out[i + 1] = _a128(ulo, uhi, vlo, vhi)
                    out[j], out[j + 1] = _s128(ulo, uhi, vlo, vhi)
            m *= 2
        if slo != _U1 or shi != _U0:
            for j in range(2 * base, 2 * (base + n), 2):
                out[j], out[j + 1] = _m128(out[j], out[j + 1], slo, shi)


# --- Python side ----------------------------------------------------------------------------------


class _Kernels(NamedTuple):
    """One field's compiled kernels; see the Field64 versions for the argument conventions."""

    ew: Callable[..., None]
    pow: Callable[..., None]
    inv: Callable[..., None]
    sum: Callable[..., None]
    dot: Callable[..., None]
    powers: Callable[..., None]
    horner: Callable[..., None]
    pmul: Callable[..., None]
    ntt: Callable[..., None]


@dataclass(frozen=True)
class _NttTables:
    """Twiddles w_{2m}^k at [m + k] for each stage m, forward and inverse, flattened to words."""

    fwd: FieldArray
    inv: FieldArray
    rev: npt.NDArray[np.int64]
    n_inv: FieldArray


_M64 = 2**64 - 1

#: poly_mul switches to NTT when la * lb exceeds this times N * log2(2N), N the padded size
#: (measured crossover: 4-5 for both fields, batched or not).
_NTT_FACTOR = 5


def _exp_bits(e: int) -> npt.NDArray[np.uint8]:
    """Exponent bits, most significant first."""
    return np.frombuffer(bin(e)[2:].encode(), np.uint8) - np.uint8(ord("0"))


def _element_shape(shape: int | tuple[int, ...]) -> tuple[int, ...]:
    return (shape,) if isinstance(shape, int) else tuple(shape)


def _group_strides(
    shape: tuple[int, ...], full: tuple[int, ...], bounds: Sequence[int]
) -> tuple[int, ...] | None:
    """Element strides of a C-contiguous array of `shape` seen as broadcast to `full`, where the
    axes are grouped at `bounds` and each group is addressed by one flat index.

    A group the array spans fully gets the array's stride for it; a group of size-1 axes gets 0;
    a group that mixes the two cannot be addressed this way (None).
    """
    strides = []
    for lo, hi in itertools.pairwise(bounds):
        part = shape[lo:hi]
        if part == full[lo:hi]:
            strides.append(math.prod(shape[hi:]))
        elif part.count(1) == hi - lo:
            strides.append(0)
        else:
            return None
    return tuple(strides)


def _broadcast(s: tuple[int, ...], t: tuple[int, ...]) -> tuple[int, ...]:
    """numpy's broadcast shape of two shapes (np.broadcast_shapes costs microseconds)."""
    if s == t:
        return s
    ndim = max(len(s), len(t))
    out = [1] * ndim
    for shape in (s, t):
        for i, d in enumerate(shape, ndim - len(shape)):
            if d != 1:
                if out[i] not in (1, d):
                    raise ValueError(f"shapes {s} and {t} do not broadcast")
                out[i] = d
    return tuple(out)


def _padded(a: FieldArray, ndim: int) -> tuple[int, ...]:
    """The element shape of `a` with size-1 axes prepended up to `ndim` axes."""
    es = a.shape[:-1]
    return (1,) * (ndim - len(es)) + es


class Field:
    """A prime field of VDAF-08 §6.1; use the subclasses. Every member is class-level."""

    MODULUS: ClassVar[int]
    ENCODED_SIZE: ClassVar[int]
    LIMBS: ClassVar[int]
    GEN_ORDER: ClassVar[int]
    GENERATOR: ClassVar[int]

    _K: ClassVar[_Kernels]
    _INV_BITS: ClassVar[npt.NDArray[np.uint8]]
    _ONE: ClassVar[FieldArray]
    _NTT: ClassVar[dict[int, _NttTables]]
    #: Words of next_power_of_2(p) - 1, the XOF sampling mask (VDAF-08 §6.2).
    _MASK: ClassVar[FieldArray]
    #: The words of p, least significant first.
    _P_LIMBS: ClassVar[FieldArray]

    # --- construction and conversion ---

    @classmethod
    def _words(cls, v: int) -> list[int]:
        return [(v >> (64 * i)) & _M64 for i in range(cls.LIMBS)]

    @classmethod
    def zeros(cls, shape: int | tuple[int, ...]) -> FieldArray:
        return np.zeros((*_element_shape(shape), cls.LIMBS), np.uint64)

    @classmethod
    def ones(cls, shape: int | tuple[int, ...]) -> FieldArray:
        out = cls.zeros(shape)
        out[..., 0] = 1
        return out

    @classmethod
    def from_int(cls, v: int) -> FieldArray:
        return np.array(cls._words(operator.index(v) % cls.MODULUS), np.uint64)

    @classmethod
    def from_ints(cls, values: Iterable[int]) -> FieldArray:
        p, size = cls.MODULUS, cls.ENCODED_SIZE
        data = b"".join((operator.index(v) % p).to_bytes(size, "little") for v in values)
        return np.frombuffer(data, "<u8").astype(np.uint64).reshape(-1, cls.LIMBS)

    @classmethod
    def to_ints(cls, a: FieldArray) -> list[int]:
        words = cls._check(a).reshape(-1, cls.LIMBS)
        if cls.LIMBS == 1:
            return cast(list[int], words[:, 0].tolist())
        data, size = np.ascontiguousarray(words, "<u8").tobytes(), cls.ENCODED_SIZE
        return [int.from_bytes(data[i : i + size], "little") for i in range(0, len(data), size)]

    @classmethod
    def encode(cls, a: FieldArray) -> bytes:
        return np.ascontiguousarray(cls._check(a), "<u8").tobytes()

    @classmethod
    def _words_of(cls, data: bytes | bytearray | memoryview | npt.NDArray[np.uint8]) -> FieldArray:
        raw = np.frombuffer(data, np.uint8)
        if raw.size % cls.ENCODED_SIZE:
            raise DecodeError(
                f"{cls.__name__} vector of {raw.size} bytes: "
                f"not a multiple of the element size {cls.ENCODED_SIZE}"
            )
        return raw.view("<u8").astype(np.uint64).reshape(-1, cls.LIMBS)

    @classmethod
    def _below_p(cls, words: FieldArray) -> npt.NDArray[np.bool_]:
        """Elementwise value < p (on every XOF expansion and share decode: compiled)."""
        flat = _below_k(words.reshape(-1, cls.LIMBS), cls._P_LIMBS)
        return flat.reshape(words.shape[:-1])

    @classmethod
    def decode(cls, data: bytes | bytearray | memoryview, n: int | None = None) -> FieldArray:
        """Decode a vector (VDAF-08 §6.1 decode_vec), rejecting any value >= p."""
        words = cls._words_of(data)
        if n is not None and words.shape[0] != n:
            raise DecodeError(
                f"{cls.__name__} vector: expected {n} elements ({n * cls.ENCODED_SIZE} bytes), "
                f"got {words.shape[0] * cls.ENCODED_SIZE} bytes"
            )
        ok = cls._below_p(words)
        if not ok.all():
            i = int(np.argmin(ok))
            raise DecodeError(
                f"{cls.__name__} vector: element {i} (byte offset {i * cls.ENCODED_SIZE}) "
                "is not less than the modulus"
            )
        return words

    @classmethod
    def candidates(
        cls, data: bytes | bytearray | memoryview | npt.NDArray[np.uint8]
    ) -> tuple[FieldArray, npt.NDArray[np.bool_]]:
        """XOF output as masked candidates and which of them are < p (VDAF-08 §6.2 next_vec)."""
        try:
            words = cls._words_of(data)
        except DecodeError as exc:
            # A partial element here is the caller's arithmetic error, not bad input.
            raise ValueError(str(exc)) from None
        words &= cls._MASK
        return words, cls._below_p(words)

    @classmethod
    def random(cls, shape: int | tuple[int, ...], rng: np.random.Generator) -> FieldArray:
        """Uniform elements: uniform words below p's top limb + 1, resampling the rare >= p."""
        out = cls.zeros(shape)
        top = cls.MODULUS >> (64 * (cls.LIMBS - 1))
        todo = np.ones(out.shape[:-1], np.bool_)
        while todo.any():
            k = int(todo.sum())
            words = rng.integers(0, _M64, (k, cls.LIMBS), np.uint64, endpoint=True)
            words[:, -1] = rng.integers(0, top, k, np.uint64, endpoint=True)
            out[todo] = words
            todo = ~cls._below_p(out)
        return out

    # --- plumbing ---

    @classmethod
    def _check(cls, a: FieldArray) -> FieldArray:
        arr = np.asarray(a)
        if arr.dtype != np.uint64:
            raise TypeError(f"{cls.__name__} arrays have dtype uint64, not {arr.dtype}")
        if arr.ndim == 0 or arr.shape[-1] != cls.LIMBS:
            raise ValueError(
                f"{cls.__name__} arrays need a last (limb) axis of length {cls.LIMBS}, "
                f"got shape {arr.shape}"
            )
        return arr

    @staticmethod
    def _flat(a: FieldArray) -> FieldArray:
        """A C-contiguous, aligned, writable 1-D view (or copy): numba compiles a kernel once per
        distinct array type, and those flags are part of the type."""
        if a.flags.c_contiguous and a.flags.aligned and a.flags.writeable:
            return a.reshape(-1)
        return np.array(a, np.uint64, order="C").reshape(-1)

    @classmethod
    def _operand(
        cls, a: FieldArray, full: tuple[int, ...], bounds: Sequence[int]
    ) -> tuple[FieldArray, tuple[int, ...]]:
        """`a`'s flat words and group strides against element shape `full` (see
        `_group_strides`), materialising the broadcast when the groups cannot express it."""
        strides = _group_strides(_padded(a, len(full)), full, bounds)
        if strides is None:
            a = np.broadcast_to(a, (*full, cls.LIMBS))
            strides = tuple(math.prod(full[hi:]) for hi in bounds[1:])
        return cls._flat(a), strides

    @classmethod
    def _elementwise(cls, op: int, a: FieldArray, b: FieldArray) -> FieldArray:
        a, b = cls._check(a), cls._check(b)
        # Fast paths (per-call overhead matters for small arrays): equal shapes, or one operand
        # a single element.
        if a.shape == b.shape or a.ndim == 1 or b.ndim == 1:
            out = np.empty(a.shape if a.ndim >= b.ndim else b.shape, np.uint64)
            n = out.size // cls.LIMBS
            geom = (1, n, 0, int(a.shape == out.shape), 0, int(b.shape == out.shape))
            cls._K.ew(op, cls._flat(a), cls._flat(b), out.reshape(-1), geom)
            return out
        full = _broadcast(a.shape[:-1], b.shape[:-1])
        pa, pb = _padded(a, len(full)), _padded(b, len(full))
        # Look for a split of the axes into (rows, cols) that addresses both operands without
        # copying, e.g. rows of a matrix against one vector; else copy the broadcast (split 0).
        for split in range(1, len(full)):
            bounds = (0, split, len(full))
            sa, sb = _group_strides(pa, full, bounds), _group_strides(pb, full, bounds)
            if sa is not None and sb is not None:
                fa, fb = cls._flat(a), cls._flat(b)
                break
        else:
            split, bounds = 0, (0, 0, len(full))
            (fa, sa), (fb, sb) = cls._operand(a, full, bounds), cls._operand(b, full, bounds)
        out = np.empty((*full, cls.LIMBS), np.uint64)
        rows, cols = math.prod(full[:split]), math.prod(full[split:])
        cls._K.ew(op, fa, fb, out.reshape(-1), (rows, cols, *sa, *sb))
        return out

    # --- arithmetic ---

    @classmethod
    def add(cls, a: FieldArray, b: FieldArray) -> FieldArray:
        return cls._elementwise(_ADD, a, b)

    @classmethod
    def sub(cls, a: FieldArray, b: FieldArray) -> FieldArray:
        return cls._elementwise(_SUB, a, b)

    @classmethod
    def neg(cls, a: FieldArray) -> FieldArray:
        return cls._elementwise(_SUB, cls.zeros(()), a)

    @classmethod
    def mul(cls, a: FieldArray, b: FieldArray) -> FieldArray:
        return cls._elementwise(_MUL, a, b)

    @classmethod
    def pow(cls, a: FieldArray, e: int) -> FieldArray:
        """a^e elementwise; 0^0 = 1, and a negative e means inv(a)^-e."""
        a, e = cls._check(a), operator.index(e)
        if e < 0:
            a, e = cls.inv(a), -e
        if e >= cls.MODULUS:
            # Same power for a != 0 (Fermat), and stays positive so 0^e is still 0.
            e = (e - 1) % (cls.MODULUS - 1) + 1
        out = np.empty(a.shape, np.uint64)
        cls._K.pow(cls._flat(a), out.reshape(-1), _exp_bits(e))
        return out

    @classmethod
    def inv(cls, a: FieldArray) -> FieldArray:
        """Elementwise a^(p-2): the inverse, with inv(0) = 0."""
        a = cls._check(a)
        out = np.empty(a.shape, np.uint64)
        cls._K.inv(cls._flat(a), out.reshape(-1), cls._INV_BITS)
        return out

    @classmethod
    def sum(cls, a: FieldArray, axis: int = -1) -> FieldArray:
        """Sum over one element axis (`axis` counts element axes only)."""
        a = cls._check(a)
        es = a.shape[:-1]
        ax = np.lib.array_utils.normalize_axis_index(axis, len(es))
        out = np.empty((*es[:ax], *es[ax + 1 :], cls.LIMBS), np.uint64)
        outer, inner = math.prod(es[:ax]), math.prod(es[ax + 1 :])
        cls._K.sum(cls._flat(a), out.reshape(-1), (outer, es[ax], inner))
        return out

    @classmethod
    def _vector_operand(cls, a: FieldArray, lead: tuple[int, ...]) -> tuple[FieldArray, int]:
        """Flat words and row stride of a stack of vectors (last element axis) against `lead`."""
        fa, (stride,) = cls._operand(a, (*lead, a.shape[-2]), (0, len(lead)))
        return fa, stride

    @classmethod
    def _vectors(cls, a: FieldArray, what: str) -> FieldArray:
        a = cls._check(a)
        if a.ndim < 2:
            raise ValueError(f"{what} needs an element axis, got shape {a.shape}")
        return a

    @classmethod
    def inner(cls, a: FieldArray, b: FieldArray) -> FieldArray:
        """Sum over the last element axis of a * b, reduced once per result."""
        a, b = cls._vectors(a, "inner"), cls._vectors(b, "inner")
        full = _broadcast(a.shape[:-1], b.shape[:-1])
        lead, n = full[:-1], full[-1]
        # A length-1 vector broadcast along the summed axis is rare: copy it out.
        if a.shape[-2] != n:
            a = np.broadcast_to(a, (*a.shape[:-2], n, cls.LIMBS))
        if b.shape[-2] != n:
            b = np.broadcast_to(b, (*b.shape[:-2], n, cls.LIMBS))
        fa, ars = cls._vector_operand(a, lead)
        fb, brs = cls._vector_operand(b, lead)
        out = np.empty((*lead, cls.LIMBS), np.uint64)
        cls._K.dot(fa, fb, out.reshape(-1), (n, ars, brs))
        return out

    @classmethod
    def equal(cls, a: FieldArray, b: FieldArray) -> npt.NDArray[np.bool_]:
        a, b = cls._check(a), cls._check(b)
        return np.asarray(np.all(a == b, axis=-1))

    @classmethod
    def is_zero(cls, a: FieldArray) -> npt.NDArray[np.bool_]:
        return np.asarray(np.all(cls._check(a) == 0, axis=-1))

    @classmethod
    def powers(cls, x: FieldArray, n: int) -> FieldArray:
        """x^0 .. x^(n-1) along a new last element axis."""
        x, n = cls._check(x), operator.index(n)
        if n < 0:
            raise ValueError(f"powers: negative count {n}")
        out = np.empty((*x.shape[:-1], n, cls.LIMBS), np.uint64)
        cls._K.powers(cls._flat(x), out.reshape(-1), n)
        return out

    # --- polynomials (coefficients along the last element axis, lowest degree first) ---

    @classmethod
    def poly_eval(cls, coeffs: FieldArray, x: FieldArray) -> FieldArray:
        """Evaluate the polynomials at x (Horner), broadcasting coeffs' leading axes with x."""
        c, x = cls._vectors(coeffs, "poly_eval"), cls._check(x)
        lead = _broadcast(c.shape[:-2], x.shape[:-1])
        fc, crs = cls._vector_operand(c, lead)
        fx, (xrs,) = cls._operand(x, lead, (0, len(lead)))
        out = np.empty((*lead, cls.LIMBS), np.uint64)
        cls._K.horner(fc, fx, out.reshape(-1), (c.shape[-2], crs, xrs))
        return out

    @classmethod
    def poly_mul(cls, a: FieldArray, b: FieldArray) -> FieldArray:
        """The full product (length la + lb - 1), by NTT when the schoolbook cost is higher."""
        a, b = cls._vectors(a, "poly_mul"), cls._vectors(b, "poly_mul")
        la, lb = a.shape[-2], b.shape[-2]
        if la == 0 or lb == 0:
            raise ValueError("poly_mul: empty polynomial")
        lead = _broadcast(a.shape[:-2], b.shape[:-2])
        length = la + lb - 1
        size = 1 << (length - 1).bit_length()
        if la * lb > _NTT_FACTOR * size * size.bit_length() and size <= cls.GEN_ORDER:
            pa = cls.zeros((*a.shape[:-2], size))
            pa[..., :la, :] = a
            pb = cls.zeros((*b.shape[:-2], size))
            pb[..., :lb, :] = b
            prod = cls.intt(cls.mul(cls.ntt(pa), cls.ntt(pb)))
            return np.ascontiguousarray(prod[..., :length, :])
        fa, ars = cls._vector_operand(a, lead)
        fb, brs = cls._vector_operand(b, lead)
        out = np.empty((*lead, length, cls.LIMBS), np.uint64)
        cls._K.pmul(fa, fb, out.reshape(-1), (la, lb, ars, brs))
        return out

    @classmethod
    def root(cls, n: int) -> int:
        """alpha_n = GENERATOR^(GEN_ORDER / n), a primitive n-th root of unity."""
        if n < 1 or n & (n - 1) or cls.GEN_ORDER % n:
            raise ValueError(f"{cls.__name__}: no NTT of size {n}")
        return pow(cls.GENERATOR, cls.GEN_ORDER // n, cls.MODULUS)

    @classmethod
    def _tables(cls, n: int) -> _NttTables:
        tables = cls._NTT.get(n)
        if tables is not None:
            return tables
        alpha, p = cls.root(n), cls.MODULUS
        fwd, inv = cls.zeros(n), cls.zeros(n)
        w = cls.powers(cls.from_int(alpha), n // 2)
        w_inv = cls.powers(cls.from_int(pow(alpha, -1, p)), n // 2)
        m = 1
        while m < n:
            fwd[m : 2 * m] = w[:: n // (2 * m)]
            inv[m : 2 * m] = w_inv[:: n // (2 * m)]
            m *= 2
        idx = np.arange(n, dtype=np.int64)
        rev = np.zeros(n, np.int64)
        bits = n.bit_length() - 1
        for bit in range(bits):
            rev |= ((idx >> bit) & 1) << (bits - 1 - bit)
        tables = _NttTables(fwd.reshape(-1), inv.reshape(-1), rev, cls.from_int(pow(n, -1, p)))
        cls._NTT[n] = tables
        return tables

    @classmethod
    def _transform(cls, a: FieldArray, inverse: bool) -> FieldArray:
        a = cls._vectors(a, "ntt")
        n = a.shape[-2]
        t = cls._tables(n)
        out = np.empty(a.shape, np.uint64)
        tw, scale = (t.inv, t.n_inv) if inverse else (t.fwd, cls._ONE)
        cls._K.ntt(cls._flat(a), out.reshape(-1), tw, t.rev, scale)
        return out

    @classmethod
    def ntt(cls, a: FieldArray) -> FieldArray:
        """out[i] = sum_j a[j] * alpha_n^(i*j) along the last element axis (natural order)."""
        return cls._transform(a, inverse=False)

    @classmethod
    def intt(cls, a: FieldArray) -> FieldArray:
        """The exact inverse of `ntt`, 1/n factor included."""
        return cls._transform(a, inverse=True)


def _setup(cls: type[Field], kernels: _Kernels) -> None:
    cls._K = kernels
    cls._INV_BITS = _exp_bits(cls.MODULUS - 2)
    cls._ONE = cls.from_int(1)
    cls._NTT = {}
    cls._MASK = np.array(cls._words((1 << cls.MODULUS.bit_length()) - 1), np.uint64)
    cls._P_LIMBS = np.array(cls._words(cls.MODULUS), np.uint64)


class Field64(Field):
    """p = 2^32 * 4294967295 + 1 (VDAF-08 §6.1.3)."""

    MODULUS = _P64_INT
    ENCODED_SIZE = 8
    LIMBS = 1
    GEN_ORDER = 2**32
    GENERATOR = pow(7, 4294967295, _P64_INT)


class Field128(Field):
    """p = 2^66 * 4611686018427387897 + 1 (VDAF-08 §6.1.3)."""

    MODULUS = _P128_INT
    ENCODED_SIZE = 16
    LIMBS = 2
    GEN_ORDER = 2**66
    GENERATOR = pow(7, 4611686018427387897, _P128_INT)


_setup(
    Field64,
    _Kernels(
        _ew64_k,
        _pow64_k,
        _inv64_k,
        _sum64_k,
        _dot64_k,
        _powers64_k,
        _horner64_k,
        _pmul64_k,
        _ntt64_k,
    ),
)
_setup(
    Field128,
    _Kernels(
        _ew128_k,
        _pow128_k,
        _inv128_k,
        _sum128_k,
        _dot128_k,
        _powers128_k,
        _horner128_k,
        _pmul128_k,
        _ntt128_k,
    ),
)
