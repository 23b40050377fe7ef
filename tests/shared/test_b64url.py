"""The one base64url codec (`shared.b64url`): both spellings, strict and canonical."""

from __future__ import annotations

import base64

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shared.b64url import b64url_decode, b64url_encode


@given(st.binary(max_size=80))
def test_round_trip_in_both_spellings(data: bytes) -> None:
    unpadded, padded = b64url_encode(data), b64url_encode(data, padded=True)
    assert padded == base64.urlsafe_b64encode(data).decode()
    assert unpadded == padded.rstrip("=")
    assert b64url_decode(unpadded) == data
    assert b64url_decode(padded, padding_allowed=True) == data
    assert b64url_decode(unpadded, padding_allowed=True) == data


@pytest.mark.parametrize(
    ("text", "padding_allowed", "problem"),
    [
        ("AQ==", False, "must be unpadded"),  # padding where the spelling has none
        ("AQ=", True, "bad base64url padding"),
        ("a+b/", False, "must be unpadded"),  # the standard alphabet
        ("AQ\n", False, "must be unpadded"),
        ("A", False, "not valid"),  # a length no encoding has
        ("AR", False, "not canonical"),  # stray low bits: a second spelling of b"\x01"
    ],
)
def test_refusals_name_the_value_not_its_text(
    text: str, padding_allowed: bool, problem: str
) -> None:
    with pytest.raises(ValueError, match=problem) as info:
        b64url_decode(text, "the field", padding_allowed=padding_allowed)
    assert str(info.value).startswith("the field")
