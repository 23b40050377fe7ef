"""The issuer over HTTP: directory format, token-request media types and 422s, key rotation."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator

import pytest
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding
from fastapi.testclient import TestClient

from services.common.clock import Clock, TestClock
from services.common.db import Database
from services.token_issuer.app import create_app
from services.token_issuer.keys import KeySchedule, KeyStore
from services.token_issuer.settings import TokenIssuerSettings
from shared.privacypass.client import create_token_request, finalize_token
from shared.privacypass.directory import (
    ISSUER_DIRECTORY_PATH,
    MEDIA_ISSUER_DIRECTORY,
    IssuerDirectory,
)
from shared.privacypass.keys import TokenKey
from shared.privacypass.messages import (
    MEDIA_TOKEN_REQUEST,
    MEDIA_TOKEN_RESPONSE,
    Token,
    TokenChallenge,
)
from shared.privacypass.verify import InvalidTokenError, verify_token

SECRET = "attester-issuer-secret-0123456789"
AUTH = {"Authorization": f"Bearer {SECRET}"}
CHALLENGE = TokenChallenge(2, b"issuer.sagg.test", bytes(32), b"leader.test,helper.test")
EPOCH, AHEAD, GRACE = 1000, 100, 300

StoreFactory = Callable[[Database, KeySchedule, Clock], KeyStore]


def _settings(url: str) -> TokenIssuerSettings:
    return TokenIssuerSettings(
        role="issuer",
        issuer_database_url=url,
        attester_secret=SECRET,  # type: ignore[arg-type]
        key_epoch_seconds=EPOCH,
        key_publish_ahead_seconds=AHEAD,
        key_grace_seconds=GRACE,
        issuer_request_uri="/attester/token-request",
    )


@pytest.fixture
def client(sqlite_url: str, clock: TestClock, store_factory: StoreFactory) -> Iterator[TestClient]:
    app = create_app(_settings(sqlite_url), clock=clock, key_store_factory=store_factory)
    with TestClient(app) as c:
        yield c


def _directory(client: TestClient) -> IssuerDirectory:
    r = client.get(ISSUER_DIRECTORY_PATH)
    assert r.status_code == 200
    assert r.headers["content-type"] == MEDIA_ISSUER_DIRECTORY
    return IssuerDirectory.decode(r.content)


def _keys(client: TestClient) -> list[TokenKey]:
    return [k.token_key_object() for k in _directory(client).token_keys]


def _request_token(client: TestClient, key: TokenKey) -> tuple[int, bytes, Token | None]:
    request, state = create_token_request(CHALLENGE, key)
    r = client.post(
        "/token-request",
        content=request.encode(),
        headers={"Content-Type": MEDIA_TOKEN_REQUEST, **AUTH},
    )
    if r.status_code != 200:
        return r.status_code, r.content, None
    assert r.headers["content-type"] == MEDIA_TOKEN_RESPONSE
    return 200, r.content, finalize_token(state, r.content)


def test_directory_format(client: TestClient, clock: TestClock) -> None:
    r = client.get(ISSUER_DIRECTORY_PATH)
    assert r.status_code == 200
    assert r.headers["content-type"] == MEDIA_ISSUER_DIRECTORY
    max_age = int(r.headers["cache-control"].removeprefix("max-age="))
    assert 0 < max_age <= EPOCH
    doc = json.loads(r.content)
    assert set(doc) == {"issuer-request-uri", "token-keys"}
    assert doc["issuer-request-uri"] == "/attester/token-request"
    [entry] = doc["token-keys"]
    assert set(entry) == {"token-type", "token-key", "not-before"}
    assert entry["token-type"] == 2
    assert entry["not-before"] == clock.now() // EPOCH * EPOCH
    assert entry["token-key"].startswith("MIIBUjA9BgkqhkiG9w0BAQow")  # RSASSA-PSS SPKI
    TokenKey.from_spki(IssuerDirectory.from_json(doc).token_keys[0].token_key)


def test_token_request_round_trip_and_interop(client: TestClient) -> None:
    [key] = _keys(client)
    status, _, token = _request_token(client, key)
    assert status == 200 and token is not None
    encoded = token.encode()
    verify_token(encoded, [key], CHALLENGE.digest())
    # Independent check: cryptography's RSA-PSS verify (SHA-384, MGF1-SHA-384, sLen 48).
    key.public_key.to_cryptography().verify(
        encoded[98:],
        token.authenticator_input(),
        padding.PSS(mgf=padding.MGF1(hashes.SHA384()), salt_length=48),
        hashes.SHA384(),
    )


@pytest.mark.parametrize(
    "content_type",
    [
        None,
        "application/octet-stream",
        "application/private-token-request; charset=utf-8",
        "Application/Private-Token-Request",
        "application/private-token-response",
    ],
)
def test_media_type_is_exact(client: TestClient, content_type: str | None) -> None:
    [key] = _keys(client)
    request, _ = create_token_request(CHALLENGE, key)
    headers = dict(AUTH)
    if content_type is not None:
        headers["Content-Type"] = content_type
    r = client.post("/token-request", content=request.encode(), headers=headers)
    assert r.status_code == 415
    assert r.headers["content-type"] == "application/problem+json"


def _mutations(data: bytes) -> dict[str, bytes]:
    return {
        "empty": b"",
        "truncated": data[:-1],
        "too long": data + b"\x00",
        "header only": data[:3],
        "token type 1": b"\x00\x01" + data[2:],
        "token type 3": b"\x00\x03" + data[2:],
        "unknown key id": data[:2] + bytes([data[2] ^ 0x55]) + data[3:],
        "blinded_msg >= n": data[:3] + b"\xff" * 256,
    }


@pytest.mark.parametrize(
    "case",
    [
        "empty",
        "truncated",
        "too long",
        "header only",
        "token type 1",
        "token type 3",
        "unknown key id",
        "blinded_msg >= n",
    ],
)
def test_422_cases(client: TestClient, case: str) -> None:
    [key] = _keys(client)
    request, _ = create_token_request(CHALLENGE, key)
    good = request.encode()
    ok = client.post(
        "/token-request", content=good, headers={"Content-Type": MEDIA_TOKEN_REQUEST, **AUTH}
    )
    assert ok.status_code == 200
    r = client.post(
        "/token-request",
        content=_mutations(good)[case],
        headers={"Content-Type": MEDIA_TOKEN_REQUEST, **AUTH},
    )
    assert r.status_code == 422
    assert r.headers["content-type"] == "application/problem+json"


def test_oversized_body_is_422(client: TestClient) -> None:
    r = client.post(
        "/token-request",
        content=bytes(100_000),
        headers={"Content-Type": MEDIA_TOKEN_REQUEST, **AUTH},
    )
    assert r.status_code == 422


@pytest.mark.parametrize("auth", [None, "Bearer wrong-secret-000000000000", f"Basic {SECRET}"])
def test_token_request_requires_the_attester_secret(client: TestClient, auth: str | None) -> None:
    [key] = _keys(client)
    request, _ = create_token_request(CHALLENGE, key)
    headers = {"Content-Type": MEDIA_TOKEN_REQUEST}
    if auth:
        headers["Authorization"] = auth
    r = client.post("/token-request", content=request.encode(), headers=headers)
    assert r.status_code == 401


def test_healthz(client: TestClient) -> None:
    r = client.get("/healthz")
    assert r.status_code == 200 and r.json() == {"status": "ok", "role": "issuer"}


def test_key_rotation(client: TestClient, clock: TestClock) -> None:
    """A new key is published ahead of its epoch; tokens of the old key verify until it
    expires; the old key issues only until shortly after the rotation."""
    schedule = KeySchedule(EPOCH, AHEAD, GRACE)
    e = schedule.epoch_at(clock.now())
    [k0] = _keys(client)
    _, _, t0 = _request_token(client, k0)
    assert t0 is not None

    # Just before publication of the next key: still one key.
    clock.advance(schedule.publish_at(e + 1) - 1 - clock.now())
    assert [k.token_key_id for k in _keys(client)] == [k0.token_key_id]

    # Published ahead: listed second, with a future not-before; clients keep using k0.
    clock.advance(1)
    d = _directory(client)
    assert len(d.token_keys) == 2
    assert d.token_keys[0].token_key == k0.spki
    assert d.token_keys[1].not_before == schedule.not_before(e + 1) > clock.now()
    assert d.select_key(clock.now()) == d.token_keys[0]
    k1 = d.token_keys[1].token_key_object()
    assert k1.truncated_token_key_id != k0.truncated_token_key_id
    # Already accepted for issuance, so early adopters are served.
    assert _request_token(client, k1)[0] == 200

    # Rotation: k1 first; k0 still listed (its tokens verify) and still issuing for a while.
    clock.advance(schedule.not_before(e + 1) - clock.now())
    keys = _keys(client)
    assert [k.token_key_id for k in keys] == [k1.token_key_id, k0.token_key_id]
    verify_token(t0.encode(), keys, CHALLENGE.digest())
    assert _request_token(client, k0)[0] == 200

    # After issue_until, k0 no longer issues but its tokens still verify.
    clock.advance(schedule.issue_until(e) - clock.now())
    assert _request_token(client, k0)[0] == 422
    keys = _keys(client)
    assert k0.token_key_id in {k.token_key_id for k in keys}
    verify_token(t0.encode(), keys, CHALLENGE.digest())

    # After expiry, k0 is gone and its tokens are refused.
    clock.advance(schedule.expires(e) - clock.now())
    keys = _keys(client)
    assert [k.token_key_id for k in keys] == [k1.token_key_id]
    with pytest.raises(InvalidTokenError, match="key id"):
        verify_token(t0.encode(), keys, CHALLENGE.digest())


def test_schedule_validation() -> None:
    with pytest.raises(ValueError):
        KeySchedule(100, 100, 200)
    with pytest.raises(ValueError):
        KeySchedule(100, 50, 10)
    with pytest.raises(ValueError):
        KeySchedule(0, 0, 0)
