"""Canonical JSON: the JSON Canonicalization Scheme of RFC 8785 (JCS).

Recipes are signed and logged as their canonical JSON bytes, so that every implementation (the
server in Python, a device SDK in Swift or Kotlin) derives identical bytes from the same value:

- objects: members sorted by the UTF-16 code units of their names (RFC 8785 §3.2.3), no
  duplicate names;
- no whitespace; UTF-8 output; strings escaped as RFC 8785 §3.2.2.2 says (only ``"``, ``\\`` and
  control characters, the latter as ``\\b \\t \\n \\f \\r`` or ``\\u00xx`` lowercase);
- numbers as ECMAScript's Number.prototype.toString renders the IEEE-754 double (RFC 8785
  §3.2.2.3): shortest round-tripping digits, ``1e-7`` and ``1e+21`` style exponents, integral
  values without a fraction (``1.0`` becomes ``1``). Integers beyond +-2^53 must already be
  in the canonical form of a double (so nothing changes value when read as one); NaN and
  infinities are refused.

`canonical_json` raises `CanonicalizationError` for anything outside that model (non-str keys,
lone surrogates, sets, bytes...), rather than guessing.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from decimal import Decimal

from shared.errors import SaggError

__all__ = ["CanonicalizationError", "canonical_json", "format_number"]

#: Largest integer magnitude a double represents exactly (I-JSON, RFC 7493 §2.2).
MAX_SAFE_INTEGER = 2**53


class CanonicalizationError(SaggError, ValueError):
    """The value has no canonical JSON form."""


def format_number(value: int | float) -> str:
    """A number as ECMAScript renders it (ECMA-262 Number::toString, radix 10)."""
    if isinstance(value, bool):
        raise CanonicalizationError("booleans are not numbers")
    if isinstance(value, int):
        # Beyond 2^53 an integer passes only if it is already the canonical form of a double
        # (as a large float re-parsed from its canonical digits comes back): any other would
        # silently change value in an implementation that reads numbers as doubles.
        try:
            as_float = float(value)
        except OverflowError:
            as_float = math.inf
        if abs(value) > MAX_SAFE_INTEGER and (
            not math.isfinite(as_float) or format_number(as_float) != str(value)
        ):
            raise CanonicalizationError(f"integer {value} is not exactly representable")
        value = as_float
    if not math.isfinite(value):
        raise CanonicalizationError("NaN and infinities have no JSON form")
    if value == 0:
        return "0"  # also for -0.0, as ECMAScript does
    sign = "-" if value < 0 else ""
    # repr() yields the shortest digit string that round-trips (Python's float repr contract),
    # which is the digit string ECMA-262 asks for; only the layout differs.
    _, digit_tuple, exponent = Decimal(repr(abs(value))).as_tuple()
    assert isinstance(exponent, int)
    digits = "".join(map(str, digit_tuple)).rstrip("0")
    exponent += len("".join(map(str, digit_tuple))) - len(digits)
    k = len(digits)
    n = exponent + k  # value = 0.digits * 10^n
    if k <= n <= 21:
        body = digits + "0" * (n - k)
    elif 0 < n <= 21:
        body = digits[:n] + "." + digits[n:]
    elif -6 < n <= 0:
        body = "0." + "0" * (-n) + digits
    else:
        e = n - 1
        mantissa = digits if k == 1 else digits[0] + "." + digits[1:]
        body = f"{mantissa}e{'+' if e >= 0 else '-'}{abs(e)}"
    return sign + body


def _string(text: str) -> str:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise CanonicalizationError("strings must not contain lone surrogates") from exc
    # json.dumps with ensure_ascii=False escapes exactly what RFC 8785 §3.2.2.2 escapes, in the
    # same forms (short escapes where JSON has them, else \u00xx in lowercase hex).
    return json.dumps(text, ensure_ascii=False)


def _utf16_key(name: str) -> bytes:
    return name.encode("utf-16-be", "surrogatepass")


def _emit(value: object, out: list[str]) -> None:
    if value is None:
        out.append("null")
    elif value is True:
        out.append("true")
    elif value is False:
        out.append("false")
    elif isinstance(value, int | float):
        out.append(format_number(value))
    elif isinstance(value, str):
        out.append(_string(value))
    elif isinstance(value, Mapping):
        names = list(value)
        if not all(isinstance(k, str) for k in names):
            raise CanonicalizationError("object member names must be strings")
        out.append("{")
        for i, name in enumerate(sorted(names, key=_utf16_key)):
            if i:
                out.append(",")
            out.append(_string(name))
            out.append(":")
            _emit(value[name], out)
        out.append("}")
    elif isinstance(value, Sequence) and not isinstance(value, bytes | bytearray):
        out.append("[")
        for i, item in enumerate(value):
            if i:
                out.append(",")
            _emit(item, out)
        out.append("]")
    else:
        raise CanonicalizationError(f"{type(value).__name__} has no JSON form")


def canonical_json(value: object) -> bytes:
    """The RFC 8785 canonical UTF-8 bytes of a JSON value (dicts, lists, str, numbers...)."""
    out: list[str] = []
    try:
        _emit(value, out)
    except RecursionError:
        raise CanonicalizationError("value nested too deeply") from None
    return "".join(out).encode("utf-8")
