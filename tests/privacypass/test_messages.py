"""Strict decoding of the wire structures (RFC 9577 §2.1.1, §2.2; RFC 9578 §6)."""

from __future__ import annotations

import pytest
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from hypothesis import given
from hypothesis import strategies as st

from shared.codec import DecodeError
from shared.privacypass.keys import InvalidKeyError, TokenKey, decode_spki, encode_spki
from shared.privacypass.messages import Token, TokenChallenge, TokenRequest, TokenResponse
from shared.privacypass.rsabssa import RsaPrivateKey


def test_challenge_redemption_context_lengths() -> None:
    for n in (1, 31, 33):
        with pytest.raises(ValueError):
            TokenChallenge(2, b"i", bytes(n))
        data = b"\x00\x02\x00\x01i" + bytes([n]) + bytes(n) + b"\x00\x00"
        with pytest.raises(DecodeError, match="redemption_context"):
            TokenChallenge.decode(data)


def test_challenge_strictness() -> None:
    good = TokenChallenge(2, b"i", b"", b"o").encode()
    assert good == b"\x00\x02\x00\x01i\x00\x00\x01o"
    with pytest.raises(DecodeError):
        TokenChallenge.decode(good + b"\x00")
    with pytest.raises(DecodeError):
        TokenChallenge.decode(good[:-1])
    with pytest.raises(DecodeError):
        TokenChallenge.decode(b"\x00\x02\x00\x00\x00\x00\x00")  # empty issuer_name
    with pytest.raises(ValueError):
        TokenChallenge(2, b"")


@given(
    token_type=st.integers(0, 0xFFFF),
    issuer=st.binary(min_size=1, max_size=40),
    context=st.sampled_from([b"", bytes(range(32))]),
    origin=st.binary(max_size=40),
)
def test_challenge_round_trip(
    token_type: int, issuer: bytes, context: bytes, origin: bytes
) -> None:
    challenge = TokenChallenge(token_type, issuer, context, origin)
    assert TokenChallenge.decode(challenge.encode()) == challenge


def test_request_and_token_sizes() -> None:
    request = TokenRequest(7, bytes(256))
    assert len(request.encode()) == 259
    assert TokenRequest.decode(request.encode()) == request
    with pytest.raises(ValueError):
        TokenRequest(7, bytes(255)).encode()
    with pytest.raises(DecodeError, match="token_type"):
        TokenRequest.decode(b"\x00\x01" + request.encode()[2:])
    token = Token(bytes(32), bytes(32), bytes(32), bytes(256))
    assert len(token.encode()) == 354
    with pytest.raises(DecodeError, match="token_type"):
        Token.decode(b"\x00\x01" + token.encode()[2:])
    assert len(TokenResponse(bytes(256)).encode()) == 256


@pytest.fixture(scope="module")
def key() -> RsaPrivateKey:
    return RsaPrivateKey.generate(2048)


def test_spki_decoding_is_strict(key: RsaPrivateKey) -> None:
    spki = encode_spki(key.public_key)
    assert decode_spki(spki) == key.public_key
    assert spki.startswith(bytes.fromhex("30820152303d06092a864886f70d01010a"))
    rsa_encryption = (
        key.to_cryptography()
        .public_key()
        .public_bytes(Encoding.DER, PublicFormat.SubjectPublicKeyInfo)
    )
    for bad in (rsa_encryption, spki + b"\x00", spki[:-1], b"", b"\x30\x00"):
        with pytest.raises(InvalidKeyError):
            decode_spki(bad)
    # SHA-256 instead of SHA-384 in the PSS parameters: parses, but is not our encoding.
    sha256 = spki.replace(
        bytes.fromhex("0609608648016503040202"), bytes.fromhex("0609608648016503040201")
    )
    with pytest.raises(InvalidKeyError):
        decode_spki(sha256)


def test_token_key_requires_2048_bits() -> None:
    with pytest.raises(InvalidKeyError):
        TokenKey(RsaPrivateKey.generate(3072).public_key)
