"""Hostile input: decoders and parsers fail only with their own error types, never crash."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shared.codec import DecodeError, TlsStruct
from shared.privacypass.directory import DirectoryError, IssuerDirectory
from shared.privacypass.headers import HeaderError, parse_authorization, parse_www_authenticate
from shared.privacypass.keys import InvalidKeyError, decode_spki
from shared.privacypass.messages import Token, TokenChallenge, TokenRequest, TokenResponse

_STRUCTS = [Token, TokenChallenge, TokenRequest, TokenResponse]


@pytest.mark.parametrize("cls", _STRUCTS, ids=lambda c: c.__name__)
@settings(max_examples=200)
@given(data=st.binary(max_size=400))
def test_struct_decoders(cls: type[TlsStruct], data: bytes) -> None:
    try:
        value = cls.decode(data)
    except DecodeError:
        return
    assert value.encode() == data  # whatever decodes re-encodes to the same bytes


@settings(max_examples=300)
@given(
    text=st.text(alphabet=st.sampled_from(list('PrivateTokn chalegk=y-"\\\\,AQ_=\\t')), max_size=80)
)
def test_header_parsers(text: str) -> None:
    for parse in (parse_www_authenticate, parse_authorization):
        with contextlib.suppress(HeaderError):
            parse(text)


@settings(max_examples=100)
@given(data=st.binary(max_size=400))
def test_spki_decoder(data: bytes) -> None:
    with contextlib.suppress(InvalidKeyError):
        decode_spki(data)


@settings(max_examples=100)
@given(
    doc=st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=8),
        lambda inner: (
            st.lists(inner, max_size=3)
            | st.dictionaries(
                st.sampled_from(
                    [
                        "issuer-request-uri",
                        "token-keys",
                        "token-type",
                        "token-key",
                        "not-before",
                        "x",
                    ]
                ),
                inner,
                max_size=4,
            )
        ),
        max_leaves=12,
    )
)
def test_directory_parser(doc: object) -> None:
    with contextlib.suppress(DirectoryError):
        IssuerDirectory.from_json(doc)
