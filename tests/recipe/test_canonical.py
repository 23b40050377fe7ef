"""RFC 8785 canonical JSON: number forms, escaping, member order, stability."""

from __future__ import annotations

import json
import math
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shared.recipe.canonical import CanonicalizationError, canonical_json, format_number

# RFC 8785 appendix B: IEEE-754 bit patterns and their ECMAScript serializations.
RFC8785_NUMBERS = [
    ("0000000000000000", "0"),
    ("8000000000000000", "0"),
    ("0000000000000001", "5e-324"),
    ("8000000000000001", "-5e-324"),
    ("7fefffffffffffff", "1.7976931348623157e+308"),
    ("ffefffffffffffff", "-1.7976931348623157e+308"),
    ("4340000000000000", "9007199254740992"),
    ("c340000000000000", "-9007199254740992"),
    ("4430000000000000", "295147905179352830000"),
    ("44b52d02c7e14af5", "9.999999999999997e+22"),
    ("44b52d02c7e14af6", "1e+23"),
    ("44b52d02c7e14af7", "1.0000000000000001e+23"),
    ("444b1ae4d6e2ef4e", "999999999999999700000"),
    ("444b1ae4d6e2ef4f", "999999999999999900000"),
    ("444b1ae4d6e2ef50", "1e+21"),
    ("3eb0c6f7a0b5ed8c", "9.999999999999997e-7"),
    ("3eb0c6f7a0b5ed8d", "0.000001"),
    ("41b3de4355555553", "333333333.3333332"),
    ("41b3de4355555554", "333333333.33333325"),
    ("41b3de4355555555", "333333333.3333333"),
    ("41b3de4355555556", "333333333.3333334"),
    ("41b3de4355555557", "333333333.33333343"),
    ("becbf647612f3696", "-0.0000033333333333333333"),
    ("43143ff3c1cb0959", "1424953923781206.2"),
]


@pytest.mark.parametrize(("bits", "expected"), RFC8785_NUMBERS)
def test_rfc8785_numbers(bits: str, expected: str) -> None:
    value = struct.unpack(">d", bytes.fromhex(bits))[0]
    assert format_number(value) == expected


def test_rfc8785_structure_example() -> None:
    # RFC 8785 §3.2.2 / §3.2.3 examples: literals, escapes, and UTF-16 member order.
    value = {
        "numbers": [333333333.33333329, 1e30, 4.50, 2e-3, 0.000000000000000000000000001],
        "string": "\u20ac$\u000f\nA'\u0042\u0022\u005c\\\"/",
        "literals": [None, True, False],
    }
    assert (
        canonical_json(value)
        == (
            '{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],'
            '"string":"\u20ac$\\u000f\\nA\'B\\"\\\\\\\\\\"/"}'
        ).encode()
    )
    # Sorting is by UTF-16 code units: U+1F600 (surrogates D83D...) sorts before U+FB33.
    assert canonical_json({"\ufb33": 1, "\U0001f600": 2, "\r": 3, "1": 4}) == (
        '{"\\r":3,"1":4,"\U0001f600":2,"\ufb33":1}'.encode()
    )


def test_refuses_non_json() -> None:
    for bad in (math.nan, math.inf, 2**53 + 1, {1: 2}, b"x", {1.5}, "\ud800"):
        with pytest.raises(CanonicalizationError):
            canonical_json(bad)


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**53), 2**53)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=5), children, max_size=4)
    ),
    max_leaves=20,
)


@given(json_values)
def test_round_trip_is_stable(value: object) -> None:
    once = canonical_json(value)
    parsed = json.loads(once)
    assert canonical_json(parsed) == once


@given(st.dictionaries(st.text(max_size=6), st.integers(0, 9), min_size=2, max_size=8))
def test_member_order_does_not_matter(value: dict[str, int]) -> None:
    reversed_order = dict(reversed(list(value.items())))
    assert canonical_json(reversed_order) == canonical_json(value)
    assert b" " not in canonical_json(value) or any(" " in k for k in value)
