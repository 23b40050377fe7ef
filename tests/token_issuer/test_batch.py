"""Batched token requests at the attester (draft-ietf-privacypass-batched-tokens-04 §5).

The wire format is checked against bytes laid out by hand from the draft's structs; issued
tokens are checked with the issuer's public key through `cryptography`'s RSASSA-PSS
verification (RFC 9578 §6.4), not through the code that made them.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding
from fastapi.testclient import TestClient
from httpx import Response

from client_sdk.manufacturer import ManufacturerCA, SimulatedDevice
from services.common.clock import TestClock
from services.token_issuer.app import create_app
from services.token_issuer.settings import TokenIssuerSettings
from shared.codec import DecodeError
from shared.privacypass.batch import (
    MEDIA_BATCH_REQUEST,
    MEDIA_BATCH_RESPONSE,
    BatchTokenRequest,
    BatchTokenResponse,
)
from shared.privacypass.client import create_token_request, finalize_token
from shared.privacypass.keys import TokenKey
from shared.privacypass.messages import TokenChallenge, TokenRequest, TokenResponse
from tests.token_issuer.helpers import current_key, enroll, nonce, obtain_token, post_request

QUOTA = 3


def _challenge(i: int) -> TokenChallenge:
    return TokenChallenge(2, b"issuer.sagg.test", bytes([i]) * 32, b"leader.test,helper.test")


@pytest.fixture
def client(
    tmp_path: Path, clock: TestClock, manufacturer: ManufacturerCA, store_factory: object
) -> Iterator[TestClient]:
    settings = TokenIssuerSettings(
        role="joint",
        issuer_database_url=f"sqlite:///{tmp_path / 'issuer.db'}",
        attester_database_url=f"sqlite:///{tmp_path / 'attester.db'}",
        quota_tokens=QUOTA,
        quota_window_seconds=3600,
        nonce_ttl_seconds=30,
    )
    app = create_app(
        settings,
        clock=clock,
        trust_anchors=[manufacturer.certificate],
        key_store_factory=store_factory,  # type: ignore[arg-type]
    )
    with TestClient(app) as c:
        yield c


def _post_batch(
    client: TestClient, device: SimulatedDevice, body: bytes, n: bytes | None = None
) -> Response:
    return post_request(client, device, body, nonce_value=n, media_type=MEDIA_BATCH_REQUEST)


def _verify(key: TokenKey, token_authenticator: bytes, message: bytes) -> None:
    key.public_key.to_cryptography().verify(
        token_authenticator,
        message,
        padding.PSS(mgf=padding.MGF1(hashes.SHA384()), salt_length=48),
        hashes.SHA384(),
    )


def test_wire_format_is_the_drafts() -> None:
    blinded = [secrets.token_bytes(256), secrets.token_bytes(256)]
    batch = BatchTokenRequest(tuple(TokenRequest(7, b) for b in blinded))
    item = [b"\x00\x02" + b"\x00\x02" + b"\x07" + b for b in blinded]
    content = b"".join(item)
    # 522 bytes: a two-byte QUIC varint, 0b01 in its top bits.
    assert batch.encode() == (0x4000 | len(content)).to_bytes(2, "big") + content
    assert BatchTokenRequest.decode(batch.encode()) == batch

    sig = secrets.token_bytes(256)
    response = BatchTokenResponse((TokenResponse(sig), None))
    content = b"\x01\x00\x02" + sig + b"\x00"
    assert response.encode() == (0x4000 | len(content)).to_bytes(2, "big") + content
    assert BatchTokenResponse.decode(response.encode()) == response

    # A varint not in its shortest form, and an empty batch, are refused.
    with pytest.raises(DecodeError):
        BatchTokenRequest.decode(b"\x40\x00")
    with pytest.raises(DecodeError):
        BatchTokenRequest.decode(b"\x00")


def test_a_batch_issues_every_token_under_one_nonce(
    client: TestClient, clock: TestClock, manufacturer: ManufacturerCA
) -> None:
    device = SimulatedDevice.manufacture(manufacturer)
    assert enroll(client, device).status_code == 201
    key = current_key(client, clock.now())
    pairs = [create_token_request(_challenge(i), key) for i in range(2)]
    body = BatchTokenRequest(tuple(r for r, _ in pairs)).encode()
    n = nonce(client, device)
    r = _post_batch(client, device, body, n)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == MEDIA_BATCH_RESPONSE
    answers = BatchTokenResponse.decode(r.content).responses
    assert len(answers) == 2 and None not in answers
    for (_, state), answer in zip(pairs, answers, strict=True):
        assert answer is not None
        token = finalize_token(state, answer)
        _verify(key, token.authenticator, token.authenticator_input())
    # The nonce was used up by the batch.
    assert _post_batch(client, device, body, n).status_code == 401


def test_a_batch_over_the_quota_charges_nothing(
    client: TestClient, clock: TestClock, manufacturer: ManufacturerCA
) -> None:
    device = SimulatedDevice.manufacture(manufacturer)
    enroll(client, device)
    key = current_key(client, clock.now())
    assert obtain_token(client, device, key, _challenge(0))[0].status_code == 200
    assert obtain_token(client, device, key, _challenge(1))[0].status_code == 200
    # One unit left: a batch of two is refused whole...
    body = BatchTokenRequest(
        tuple(create_token_request(_challenge(i), key)[0] for i in range(2))
    ).encode()
    assert _post_batch(client, device, body).status_code == 429
    # ...and the last unit is still there.
    assert obtain_token(client, device, key, _challenge(2))[0].status_code == 200
    assert obtain_token(client, device, key, _challenge(3))[0].status_code == 429


def test_requests_the_issuer_refuses_are_absent_and_given_back(
    client: TestClient, clock: TestClock, manufacturer: ManufacturerCA
) -> None:
    device = SimulatedDevice.manufacture(manufacturer)
    enroll(client, device)
    key = current_key(client, clock.now())
    good, state = create_token_request(_challenge(0), key)
    unknown = TokenRequest((good.truncated_token_key_id + 1) % 256, good.blinded_msg)
    r = _post_batch(client, device, BatchTokenRequest((good, unknown)).encode())
    assert r.status_code == 206, r.text
    first, second = BatchTokenResponse.decode(r.content).responses
    assert first is not None and second is None
    token = finalize_token(state, first)
    _verify(key, token.authenticator, token.authenticator_input())
    # One unit charged: two more single tokens fit in the quota of three.
    for i in (1, 2):
        assert obtain_token(client, device, key, _challenge(i))[0].status_code == 200
    # A batch of only refused requests: 400, and nothing charged.
    enroll(client, other := SimulatedDevice.manufacture(manufacturer))
    r = _post_batch(client, other, BatchTokenRequest((unknown,)).encode())
    assert r.status_code == 400
