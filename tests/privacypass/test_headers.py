"""RFC 9577 Appendix A.2 WWW-Authenticate vectors, and the Authorization header."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from shared.codec import DecodeError
from shared.privacypass.client import select_challenge
from shared.privacypass.headers import (
    HeaderError,
    PrivateTokenChallenge,
    b64url_decode,
    b64url_encode,
    format_authorization,
    format_www_authenticate,
    parse_authorization,
    parse_www_authenticate,
)
from shared.privacypass.keys import TokenKey
from tests.privacypass.vectors import h, load

UNKNOWN = ',unknownChallengeAttribute="ignore-me"'


@pytest.fixture(scope="module")
def header_vectors(vectors_dir: Path) -> list[dict[str, Any]]:
    doc = load("rfc9577-www-authenticate-headers.json", vectors_dir)
    assert len(doc["vectors"]) == 3
    return list(doc["vectors"])


def _expected(v: dict[str, Any]) -> list[PrivateTokenChallenge]:
    out = []
    i = 0
    while f"token-challenge-{i}" in v:
        max_age = v.get(f"max-age-{i}")
        out.append(
            PrivateTokenChallenge(h(v[f"token-challenge-{i}"]), h(v[f"token-key-{i}"]), max_age)
        )
        i += 1
    return out


@pytest.mark.parametrize("i", range(3))
def test_parse_vectors(header_vectors: list[dict[str, Any]], i: int) -> None:
    v = header_vectors[i]
    parsed = parse_www_authenticate(v["WWW-Authenticate"])
    assert parsed == _expected(v)
    for j, ch in enumerate(parsed):
        assert ch.token_type == v[f"token-type-{j}"]


@pytest.mark.parametrize("i", range(2))
def test_format_vectors(header_vectors: list[dict[str, Any]], i: int) -> None:
    """Our output equals the RFC header minus the unknown attribute it adds to test parsers."""
    v = header_vectors[i]
    expected = v["WWW-Authenticate"].replace(UNKNOWN, "")
    assert UNKNOWN in v["WWW-Authenticate"]
    assert format_www_authenticate(_expected(v)) == expected


def test_vector_type2_challenge_and_key_decode(header_vectors: list[dict[str, Any]]) -> None:
    ch = parse_www_authenticate(header_vectors[0]["WWW-Authenticate"])[0]
    challenge = ch.token_challenge()
    assert challenge.token_type == 2
    assert challenge.issuer_name == b"issuer.example"
    assert ch.token_key is not None
    TokenKey.from_spki(ch.token_key)


def test_greased_challenge_is_kept_raw(header_vectors: list[dict[str, Any]]) -> None:
    grease = parse_www_authenticate(header_vectors[2]["WWW-Authenticate"])[0]
    assert grease.token_type == 0
    assert grease.max_age is None
    with pytest.raises(DecodeError):
        grease.token_challenge()


def test_other_schemes_are_skipped() -> None:
    assert parse_www_authenticate('Basic realm="x", Bearer') == []
    assert parse_www_authenticate("Negotiate abc==, Basic") == []


@pytest.mark.parametrize(
    "value",
    [
        "PrivateToken",  # no challenge parameter
        'PrivateToken token-key="AAAA"',
        'PrivateToken challenge="AA+A"',  # not the url-safe alphabet
        'PrivateToken challenge="AAB"',  # non-canonical trailing bits
        'PrivateToken challenge="AAAA", challenge="AAAA"',  # repeated parameter
        'PrivateToken challenge="AAAA", max-age="-1"',
        'PrivateToken challenge="AAAA", max-age="\u00b2"',  # a digit to str.isdigit only
        'PrivateToken challenge="AAAA',  # unterminated
        'PrivateToken challenge="AAAA" x',
        "=",
    ],
)
def test_malformed_www_authenticate(value: str) -> None:
    with pytest.raises(HeaderError):
        parse_www_authenticate(value)


def test_unquoted_and_unpadded_values() -> None:
    parsed = parse_www_authenticate("privatetoken Challenge=AAIA, max-age=5")
    assert parsed == [PrivateTokenChallenge(b"\x00\x02\x00", None, 5)]


def test_quoted_pair_is_unescaped() -> None:
    parsed = parse_www_authenticate('PrivateToken challenge="AA\\IA"')
    assert parsed[0].challenge == b"\x00\x02\x00"


def test_authorization_round_trip() -> None:
    token = bytes(range(256)) + bytes(98)
    value = format_authorization(token)
    assert value.startswith('PrivateToken token="')
    assert parse_authorization(value) == token
    assert parse_authorization(value + ', other="x"') == token


@pytest.mark.parametrize(
    "value",
    [
        'Bearer token="AAAA"',
        "PrivateToken",
        'PrivateToken tok="AAAA"',
        'PrivateToken token="AAAA", PrivateToken token="AAAA"',
        'PrivateToken token="AA/A"',
    ],
)
def test_malformed_authorization(value: str) -> None:
    with pytest.raises(HeaderError):
        parse_authorization(value)


def test_b64url() -> None:
    for n in range(10):
        data = bytes(range(250, 250 - n, -1))
        assert b64url_decode(b64url_encode(data)) == data
        assert b64url_decode(b64url_encode(data).rstrip("=")) == data
    with pytest.raises(HeaderError):
        b64url_decode("AA=")  # padding of the wrong length


def test_select_challenge(header_vectors: list[dict[str, Any]]) -> None:
    """Vectors 1 and 2 offer a type 2 challenge first; vector 3 only grease and type 1."""
    for v in header_vectors[:2]:
        chosen = select_challenge(v["WWW-Authenticate"])
        assert chosen is not None
        assert chosen.challenge == h(v["token-challenge-0"])
        assert chosen.token_key == h(v["token-key-0"])
    assert select_challenge(header_vectors[2]["WWW-Authenticate"]) is None
    # A type 2 challenge with a 5-byte redemption context is skipped for the next one.
    bad = b"\x00\x02\x00\x01i\x05" + bytes(5) + b"\x00\x00"
    good = b"\x00\x02\x00\x01i\x00\x00\x00"
    value = format_www_authenticate([PrivateTokenChallenge(bad), PrivateTokenChallenge(good)])
    chosen = select_challenge(value)
    assert chosen is not None and chosen.challenge == good
