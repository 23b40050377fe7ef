"""RFC 9578 Appendix A.2 (token type 2) and RFC 9577 Appendix A.1 reproduced byte for byte."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding, rsa
from cryptography.hazmat.primitives.serialization import load_pem_private_key

from shared.codec import DecodeError
from shared.privacypass import rsabssa
from shared.privacypass.client import create_token_request, finalize_token
from shared.privacypass.issuance import IssuerKey, issue
from shared.privacypass.keys import TokenKey, decode_spki, encode_spki, token_key_id
from shared.privacypass.messages import (
    Token,
    TokenChallenge,
    TokenRequest,
    TokenResponse,
    authenticator_input,
)
from shared.privacypass.verify import verify_token
from tests.privacypass.vectors import h, load


@pytest.fixture(scope="module")
def type2(vectors_dir: Path) -> list[dict[str, Any]]:
    doc = load("rfc9578-type2-blindrsa.json", vectors_dir)
    assert doc["token_type"] == 2
    assert len(doc["vectors"]) == 5
    return list(doc["vectors"])


@pytest.fixture(scope="module")
def challenge_vectors(vectors_dir: Path) -> list[dict[str, Any]]:
    doc = load("rfc9577-challenge-token.json", vectors_dir)
    assert len(doc["vectors"]) == 6
    return list(doc["vectors"])


def _issuer_key(v: dict[str, Any]) -> IssuerKey:
    sk = load_pem_private_key(v["skS_pem"].encode(), None)
    assert isinstance(sk, rsa.RSAPrivateKey)
    # The RFC carries the PEM as hex of its ASCII text; both forms must agree.
    assert h(v["skS"]).decode() == v["skS_pem"]
    return IssuerKey(rsabssa.RsaPrivateKey.from_cryptography(sk))


@pytest.mark.parametrize("i", range(5))
def test_spki_and_key_id(type2: list[dict[str, Any]], i: int) -> None:
    v = type2[i]
    key = _issuer_key(v)
    assert encode_spki(key.private_key.public_key) == h(v["pkS"])
    assert len(h(v["pkS"])) == 342
    assert token_key_id(h(v["pkS"])) == h(v["token_key_id"])
    assert key.token_key_id == h(v["token_key_id"])
    assert decode_spki(h(v["pkS"])) == key.private_key.public_key


@pytest.mark.parametrize("i", range(5))
def test_issuance_byte_for_byte(type2: list[dict[str, Any]], i: int) -> None:
    v = type2[i]
    key = _issuer_key(v)
    token_key = TokenKey.from_spki(h(v["pkS"]))
    challenge = TokenChallenge.decode(h(v["token_challenge"]))
    assert challenge.encode() == h(v["token_challenge"])

    request, state = create_token_request(
        h(v["token_challenge"]),
        token_key,
        nonce=h(v["nonce"]),
        salt=h(v["salt"]),
        blind=int(v["blind"], 16),
    )
    assert request.encode() == h(v["token_request"])
    assert TokenRequest.decode(h(v["token_request"])) == request

    response = issue(key, h(v["token_request"]))
    assert response.encode() == h(v["token_response"])

    token = finalize_token(state, h(v["token_response"]))
    assert token.encode() == h(v["token"])
    assert Token.decode(h(v["token"])) == token
    assert verify_token(h(v["token"]), [token_key], challenge.digest()) == token


@pytest.mark.parametrize("i", range(5))
def test_vector_token_verifies_independently(type2: list[dict[str, Any]], i: int) -> None:
    v = type2[i]
    token = Token.decode(h(v["token"]))
    pub = decode_spki(h(v["pkS"])).to_cryptography()
    pub.verify(
        token.authenticator,
        h(v["token"])[:98],
        padding.PSS(mgf=padding.MGF1(hashes.SHA384()), salt_length=48),
        hashes.SHA384(),
    )


@pytest.mark.parametrize("i", range(5))
def test_challenge_token_vectors(challenge_vectors: list[dict[str, Any]], i: int) -> None:
    """RFC 9577 A.1 vectors 1-5: TokenChallenge encoding, digest and authenticator input."""
    v = challenge_vectors[i]
    challenge = TokenChallenge(
        int(v["token_type"], 16),
        h(v["issuer_name"]),
        h(v["redemption_context"]),
        h(v["origin_info"]),
    )
    assert challenge.encode() == h(v["token_challenge_derived"])
    assert TokenChallenge.decode(h(v["token_challenge_derived"])) == challenge
    assert challenge.digest() == h(v["challenge_digest_derived"])
    assert authenticator_input(
        h(v["nonce"]), challenge.digest(), h(v["token_key_id"]), int(v["token_type"], 16)
    ) == h(v["token_authenticator_input"])


def test_origin_info_names(challenge_vectors: list[dict[str, Any]]) -> None:
    v = challenge_vectors[4]
    challenge = TokenChallenge.decode(h(v["token_challenge_derived"]))
    assert challenge.origin_names() == ["foo.example", "bar.example"]
    assert TokenChallenge(2, b"i.example").origin_names() == []


def test_greased_vector_is_not_a_type2_token(challenge_vectors: list[dict[str, Any]]) -> None:
    """Vector 6 is a greased type 0x0000 with random bytes: never a type 2 authenticator input."""
    v = challenge_vectors[5]
    assert v["token_type"] == "0000"
    data = h(v["token_authenticator_input"])
    assert int.from_bytes(data[:2], "big") == 0
    # Padding it to a full token still fails as the token type is wrong.

    with pytest.raises(DecodeError):
        Token.decode(data[:98].ljust(354, b"\x00"))


def test_response_size_is_checked(type2: list[dict[str, Any]]) -> None:

    v = type2[0]
    with pytest.raises(DecodeError):
        TokenResponse.decode(h(v["token_response"])[:-1])
    with pytest.raises(DecodeError):
        TokenResponse.decode(h(v["token_response"]) + b"\x00")
