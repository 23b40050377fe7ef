"""`verify_token` and the client/issuer round trip with fresh keys; independent interop check."""

from __future__ import annotations

import pytest
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding

from shared.codec import DecodeError
from shared.privacypass.attestation import auth_message
from shared.privacypass.client import create_token_request, finalize_token
from shared.privacypass.headers import format_authorization
from shared.privacypass.issuance import IssuanceError, IssuerKey, issue
from shared.privacypass.messages import (
    TOKEN_TYPE_BLIND_RSA,
    TOKEN_TYPE_VOPRF,
    Token,
    TokenChallenge,
    TokenRequest,
    TokenResponse,
)
from shared.privacypass.rsabssa import InvalidSignatureError, blind_sign
from shared.privacypass.verify import InvalidTokenError, verify_authorization, verify_token

CHALLENGE = TokenChallenge(TOKEN_TYPE_BLIND_RSA, b"issuer.sagg", bytes(range(32)), b"leader,helper")


@pytest.fixture(scope="module")
def key() -> IssuerKey:
    return IssuerKey.generate()


@pytest.fixture(scope="module")
def other_key() -> IssuerKey:
    return IssuerKey.generate()


@pytest.fixture(scope="module")
def token(key: IssuerKey) -> bytes:
    request, state = create_token_request(CHALLENGE, key.token_key)
    return finalize_token(state, issue(key, request.encode()).encode()).encode()


def test_valid_token(key: IssuerKey, other_key: IssuerKey, token: bytes) -> None:
    parsed = verify_token(token, [other_key.token_key, key.token_key], CHALLENGE.digest())
    assert parsed.token_key_id == key.token_key_id
    assert parsed.challenge_digest == CHALLENGE.digest()
    assert len(token) == 354


def test_independent_rsa_pss_check(key: IssuerKey, token: bytes) -> None:
    """cryptography's own RSASSA-PSS verify (SHA-384, MGF1-SHA-384, sLen 48) accepts the
    authenticator over the first 98 bytes, and refuses it over anything else."""
    pub = key.private_key.to_cryptography().public_key()
    pss = padding.PSS(mgf=padding.MGF1(hashes.SHA384()), salt_length=48)
    pub.verify(token[98:], token[:98], pss, hashes.SHA384())
    with pytest.raises(InvalidSignature):
        pub.verify(token[98:], token[:97] + bytes([token[97] ^ 1]), pss, hashes.SHA384())


def test_tokens_are_unlinkable_to_requests(key: IssuerKey) -> None:
    """Neither the blinded message nor the response appears in the token."""
    request, state = create_token_request(CHALLENGE, key.token_key)
    response = issue(key, request)
    token = finalize_token(state, response).encode()
    assert request.blinded_msg not in token and response.blind_sig not in token


@pytest.mark.parametrize("position", [0, 50, 97, 98, 200, 353])
def test_any_flipped_byte_is_refused(key: IssuerKey, token: bytes, position: int) -> None:
    forged = bytearray(token)
    forged[position] ^= 0x01
    with pytest.raises(InvalidTokenError):
        verify_token(bytes(forged), [key.token_key], CHALLENGE.digest())


def test_forged_authenticator_refused(key: IssuerKey, other_key: IssuerKey, token: bytes) -> None:
    """A valid signature by another key, relabelled with the accepted key id, is refused."""
    parsed = Token.decode(token)
    request, state = create_token_request(CHALLENGE, other_key.token_key)
    foreign = finalize_token(state, issue(other_key, request))
    relabelled = Token(
        foreign.nonce, foreign.challenge_digest, key.token_key_id, foreign.authenticator
    )
    with pytest.raises(InvalidTokenError, match="authenticator"):
        verify_token(relabelled, [key.token_key], CHALLENGE.digest())
    zero = Token(parsed.nonce, parsed.challenge_digest, parsed.token_key_id, bytes(256))
    with pytest.raises(InvalidTokenError, match="authenticator"):
        verify_token(zero, [key.token_key], CHALLENGE.digest())
    huge = Token(parsed.nonce, parsed.challenge_digest, parsed.token_key_id, b"\xff" * 256)
    with pytest.raises(InvalidTokenError, match="authenticator"):
        verify_token(huge, [key.token_key], CHALLENGE.digest())


@pytest.mark.parametrize("length", [0, 1, 98, 353, 355])
def test_truncated_or_long_token_refused(key: IssuerKey, token: bytes, length: int) -> None:
    data = (token + b"\x00")[:length]
    with pytest.raises(InvalidTokenError, match="malformed"):
        verify_token(data, [key.token_key], CHALLENGE.digest())


def test_wrong_key_id_refused(key: IssuerKey, other_key: IssuerKey, token: bytes) -> None:
    with pytest.raises(InvalidTokenError, match="key id"):
        verify_token(token, [other_key.token_key], CHALLENGE.digest())
    with pytest.raises(InvalidTokenError, match="key id"):
        verify_token(token, [], CHALLENGE.digest())


def test_wrong_token_type_refused(key: IssuerKey, token: bytes) -> None:
    for token_type in (TOKEN_TYPE_VOPRF, 0x0000, 0x0003):
        data = token_type.to_bytes(2, "big") + token[2:]
        with pytest.raises(InvalidTokenError, match="malformed"):
            verify_token(data, [key.token_key], CHALLENGE.digest())
    # A parsed Token carrying another type fails on the signature, which covers the type.
    parsed = Token.decode(token)
    retyped = Token(
        parsed.nonce, parsed.challenge_digest, parsed.token_key_id, parsed.authenticator, 3
    )
    with pytest.raises(InvalidTokenError):
        verify_token(retyped, [key.token_key], CHALLENGE.digest())


def test_wrong_challenge_refused(key: IssuerKey, token: bytes) -> None:
    other = TokenChallenge(TOKEN_TYPE_BLIND_RSA, b"issuer.sagg", bytes(32), b"leader,helper")
    with pytest.raises(InvalidTokenError, match="challenge"):
        verify_token(token, [key.token_key], other.digest())


def test_issue_refuses_bad_requests(key: IssuerKey, other_key: IssuerKey) -> None:
    request, _ = create_token_request(CHALLENGE, key.token_key)
    data = request.encode()
    assert len(data) == 259
    issue(key, data)
    with pytest.raises(IssuanceError, match="key id"):
        issue(key, data[:2] + bytes([data[2] ^ 1]) + data[3:])
    for bad in (data[:-1], data + b"\x00", b"\x00\x01" + data[2:], b""):
        with pytest.raises(IssuanceError):
            issue(key, bad)
    n = int(key.private_key.public_key.n)
    with pytest.raises(IssuanceError):
        issue(key, TokenRequest(data[2], n.to_bytes(256, "big")))


def test_finalize_refuses_a_wrong_response(key: IssuerKey, other_key: IssuerKey) -> None:
    request, state = create_token_request(CHALLENGE, key.token_key)

    # Reduced mod the other modulus, which may be the smaller one, so that it signs at all.
    n_other = int(other_key.private_key.public_key.n)
    reduced = (int.from_bytes(request.blinded_msg, "big") % n_other).to_bytes(256, "big")
    wrong = TokenResponse(blind_sign(other_key.private_key, reduced))
    with pytest.raises(InvalidSignatureError):
        finalize_token(state, wrong)
    with pytest.raises(DecodeError):
        finalize_token(state, bytes(255))


def test_client_state_repr_hides_secrets(key: IssuerKey) -> None:
    _, state = create_token_request(CHALLENGE, key.token_key)
    text = repr(state)
    assert state.nonce.hex() not in text and str(state.inv.value) not in text


def test_verify_authorization_header(key: IssuerKey, token: bytes) -> None:
    header = format_authorization(token)
    assert verify_authorization(header, [key.token_key], CHALLENGE.digest()).encode() == token
    for bad in ('Bearer token="x"', header[:-3] + '"', format_authorization(token[:-1])):
        with pytest.raises(InvalidTokenError):
            verify_authorization(bad, [key.token_key], CHALLENGE.digest())


def test_attestation_message_binds_everything() -> None:

    base = auth_message(bytes(32), bytes(32), b"body")
    assert base.startswith(b"sagg-attester-token-request-v1\x00")
    assert len(base) == 31 + 32 + 32 + 32
    assert auth_message(b"\x01" + bytes(31), bytes(32), b"body") != base
    assert auth_message(bytes(32), b"\x01" + bytes(31), b"body") != base
    assert auth_message(bytes(32), bytes(32), b"bodY") != base
    with pytest.raises(ValueError):
        auth_message(bytes(31), bytes(32), b"")
