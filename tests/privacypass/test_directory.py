"""The issuer directory document (RFC 9578 §4)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from shared.privacypass.directory import DirectoryError, DirectoryKey, IssuerDirectory
from shared.privacypass.headers import b64url_encode
from tests.privacypass.vectors import h, load


@pytest.fixture(scope="module")
def spki(vectors_dir: Path) -> bytes:
    return h(load("rfc9578-type2-blindrsa.json", vectors_dir)["vectors"][0]["pkS"])


def test_round_trip_and_format(spki: bytes) -> None:
    d = IssuerDirectory(
        "/token-request",
        (DirectoryKey(2, spki, 1_700_000_100), DirectoryKey(2, spki)),
    )
    doc = json.loads(d.encode())
    assert doc == {
        "issuer-request-uri": "/token-request",
        "token-keys": [
            {"token-type": 2, "token-key": b64url_encode(spki), "not-before": 1_700_000_100},
            {"token-type": 2, "token-key": b64url_encode(spki)},
        ],
    }
    assert doc["token-keys"][0]["token-key"].startswith("MIIBUjA9BgkqhkiG9w0BAQow")
    assert IssuerDirectory.decode(d.encode()) == d


def test_select_key_honours_not_before(spki: bytes) -> None:
    future, past = DirectoryKey(2, spki, 200), DirectoryKey(2, spki, 100)
    d = IssuerDirectory("/r", (future, past))
    assert d.select_key(150) is past
    assert d.select_key(200) is future
    assert d.select_key(50) is None
    assert IssuerDirectory("/r", (DirectoryKey(1, b"x"), past)).select_key(150) is past


def test_unknown_members_and_other_types_are_kept(spki: bytes) -> None:
    doc = {
        "issuer-request-uri": "https://issuer.example/r",
        "issuer-policy-window": 86400,
        "token-keys": [
            {"token-type": 1, "token-key": b64url_encode(b"\x02" * 49)},
            {"token-type": 2, "token-key": b64url_encode(spki), "origin": "x"},
        ],
    }
    d = IssuerDirectory.from_json(doc)
    assert [k.token_type for k in d.token_keys] == [1, 2]
    assert d.keys_of_type()[0].token_key_object().spki == spki


@pytest.mark.parametrize(
    "mutate",
    [
        lambda d: d.pop("issuer-request-uri"),
        lambda d: d.update({"issuer-request-uri": 5}),
        lambda d: d.update({"token-keys": {}}),
        lambda d: d["token-keys"].append("x"),
        lambda d: d["token-keys"][0].update({"token-type": "2"}),
        lambda d: d["token-keys"][0].update({"token-type": True}),
        lambda d: d["token-keys"][0].update({"token-type": 70000}),
        lambda d: d["token-keys"][0].update({"token-key": 7}),
        lambda d: d["token-keys"][0].update({"token-key": "AA+/"}),
        lambda d: d["token-keys"][0].update({"token-key": b64url_encode(b"\x30\x00")}),
        lambda d: d["token-keys"][0].update({"not-before": "1"}),
        lambda d: d["token-keys"][0].update({"not-before": -1}),
    ],
)
def test_malformed_directory(spki: bytes, mutate: object) -> None:
    doc = IssuerDirectory("/r", (DirectoryKey(2, spki, 1),)).to_json()
    IssuerDirectory.from_json(doc)  # valid before the mutation
    mutate(doc)  # type: ignore[operator]
    with pytest.raises(DirectoryError):
        IssuerDirectory.from_json(doc)


def test_not_json() -> None:
    with pytest.raises(DirectoryError):
        IssuerDirectory.decode(b"\xff")
    with pytest.raises(DirectoryError):
        IssuerDirectory.decode("[]")
