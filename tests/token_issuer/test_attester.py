"""The attester: enrollment, device authentication, replay protection, quotas, relaying."""

from __future__ import annotations

import datetime as dt
import json
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

import pytest
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ed25519, padding
from cryptography.hazmat.primitives.serialization import Encoding
from fastapi.testclient import TestClient

from client_sdk.manufacturer import ManufacturerCA, SimulatedDevice
from services.common.clock import Clock, TestClock
from services.common.db import Database
from services.common.problems import InternalError
from services.token_issuer.app import create_app
from services.token_issuer.attester import (
    MAX_OUTSTANDING_NONCES,
    AttesterService,
    DeviceAuthError,
    HttpIssuerChannel,
    QuotaExceededError,
)
from services.token_issuer.keys import KeySchedule, KeyStore
from services.token_issuer.settings import TokenIssuerSettings
from shared.privacypass.attestation import DEVICE_ID_HEADER
from shared.privacypass.client import create_token_request, select_challenge
from shared.privacypass.directory import ISSUER_DIRECTORY_PATH, IssuerDirectory
from shared.privacypass.headers import (
    PrivateTokenChallenge,
    b64url_decode,
    format_authorization,
    format_www_authenticate,
)
from shared.privacypass.issuance import IssuanceError
from shared.privacypass.keys import TokenKey
from shared.privacypass.messages import MEDIA_TOKEN_REQUEST, MEDIA_TOKEN_RESPONSE, TokenChallenge
from shared.privacypass.verify import InvalidTokenError, verify_authorization, verify_token
from tests.token_issuer.conftest import DbFactory
from tests.token_issuer.helpers import current_key, enroll, nonce, obtain_token, post_request

CHALLENGE = TokenChallenge(2, b"issuer.sagg.test", bytes(range(32)), b"leader.test,helper.test")
QUOTA = 3
WINDOW = 3600
SECRET = "attester-issuer-secret-0123456789"

StoreFactory = Callable[[Database, KeySchedule, Clock], KeyStore]


def _joint(tmp_path: Path, **overrides: object) -> TokenIssuerSettings:
    values: dict[str, object] = {
        "role": "joint",
        "issuer_database_url": f"sqlite:///{tmp_path / 'issuer.db'}",
        "attester_database_url": f"sqlite:///{tmp_path / 'attester.db'}",
        "quota_tokens": QUOTA,
        "quota_window_seconds": WINDOW,
        "nonce_ttl_seconds": 30,
    }
    values.update(overrides)
    return TokenIssuerSettings(**values)  # type: ignore[arg-type]


@pytest.fixture
def client(
    tmp_path: Path, clock: TestClock, manufacturer: ManufacturerCA, store_factory: StoreFactory
) -> Iterator[TestClient]:
    app = create_app(
        _joint(tmp_path),
        clock=clock,
        trust_anchors=[manufacturer.certificate],
        key_store_factory=store_factory,
    )
    with TestClient(app) as c:
        yield c


@pytest.fixture
def device(manufacturer: ManufacturerCA) -> SimulatedDevice:
    return SimulatedDevice.manufacture(manufacturer)


@pytest.mark.parametrize("kind", ["ed25519", "ecdsa-p256", "ecdsa-p384"])
def test_joint_model_end_to_end(
    client: TestClient, clock: TestClock, manufacturer: ManufacturerCA, kind: str
) -> None:
    device = SimulatedDevice.manufacture(manufacturer, kind)  # type: ignore[arg-type]
    r = enroll(client, device)
    assert r.status_code == 201
    assert r.json()["device_id"]
    assert enroll(client, device).status_code == 200  # idempotent
    key = current_key(client, clock.now())
    r, token = obtain_token(client, device, key, CHALLENGE)
    assert r.status_code == 200
    assert r.headers["content-type"] == MEDIA_TOKEN_RESPONSE
    assert token is not None
    verify_token(token.encode(), [key], CHALLENGE.digest())
    key.public_key.to_cryptography().verify(
        token.authenticator,
        token.authenticator_input(),
        padding.PSS(mgf=padding.MGF1(hashes.SHA384()), salt_length=48),
        hashes.SHA384(),
    )


def test_enrollment_refusals(client: TestClient, clock: TestClock) -> None:
    other_ca = ManufacturerCA.generate("rogue", now=clock.now())
    rogue = SimulatedDevice.manufacture(other_ca)
    assert enroll(client, rogue).status_code == 403
    assert client.post("/attester/enroll", json={"certificate": "nope"}).status_code == 403
    assert client.post("/attester/enroll", json={"cert": "x"}).status_code == 400
    assert client.post("/attester/enroll", content=b"[").status_code == 400


def test_expired_and_ca_certificates_refused(
    client: TestClient, clock: TestClock, manufacturer: ManufacturerCA
) -> None:
    key = ed25519.Ed25519PrivateKey.generate()
    start = dt.datetime.fromtimestamp(clock.now(), dt.UTC) - dt.timedelta(days=30)
    expired = manufacturer.certify(key.public_key(), "old", not_before=start, days=10)
    r = client.post(
        "/attester/enroll",
        json={"certificate": expired.public_bytes(Encoding.PEM).decode()},
    )
    assert r.status_code == 403
    r = client.post("/attester/enroll", json={"certificate": manufacturer.certificate_pem()})
    assert r.status_code == 403


def test_authentication_failures(
    client: TestClient, clock: TestClock, device: SimulatedDevice, manufacturer: ManufacturerCA
) -> None:
    other = SimulatedDevice.manufacture(manufacturer)
    stranger = SimulatedDevice.manufacture(manufacturer)  # never enrolled
    assert enroll(client, device).status_code == 201
    assert enroll(client, other).status_code == 201
    key = current_key(client, clock.now())
    body = create_token_request(CHALLENGE, key)[0].encode()

    # Unknown device: no nonce, no request.
    r = client.post("/attester/challenge", json={"device_id": "AAAA"})
    assert r.status_code == 401
    n = nonce(client, device)
    assert post_request(client, stranger, body, nonce_value=n).status_code == 401

    # A signature over another body, by another key, or on another device's nonce.
    assert (
        post_request(client, device, body, nonce_value=n, signature=device.sign(n, body + b"x"))
    ).status_code == 401
    assert (
        post_request(client, device, body, nonce_value=n, signature=other.sign(n, body))
    ).status_code == 401
    n_other = nonce(client, other)
    assert post_request(client, device, body, nonce_value=n_other).status_code == 401

    # The nonce is still good after the failed attempts; used once, it cannot be replayed.
    ok = post_request(client, device, body, nonce_value=n)
    assert ok.status_code == 200
    assert post_request(client, device, body, nonce_value=n).status_code == 401

    # Expired nonce.
    n2 = nonce(client, device)
    clock.advance(31)
    assert post_request(client, device, body, nonce_value=n2).status_code == 401

    # Missing or malformed authentication headers; wrong media type.
    r = client.post(
        "/attester/token-request", content=body, headers={"Content-Type": MEDIA_TOKEN_REQUEST}
    )
    assert r.status_code == 401
    r = client.post(
        "/attester/token-request",
        content=body,
        headers={"Content-Type": MEDIA_TOKEN_REQUEST, DEVICE_ID_HEADER: "!!"},
    )
    assert r.status_code == 401
    r = client.post(
        "/attester/token-request",
        content=body,
        headers={"Content-Type": "application/private-token-request; x=1"},
    )
    assert r.status_code == 415


def test_quota_per_window(client: TestClient, clock: TestClock, device: SimulatedDevice) -> None:
    enroll(client, device)
    key = current_key(client, clock.now())
    for _ in range(QUOTA):
        assert obtain_token(client, device, key, CHALLENGE)[0].status_code == 200
    r, _ = obtain_token(client, device, key, CHALLENGE)
    assert r.status_code == 429
    retry_after = int(r.headers["retry-after"])
    assert 0 < retry_after <= WINDOW
    assert retry_after == (clock.now() // WINDOW + 1) * WINDOW - clock.now()
    clock.advance(retry_after)
    key = current_key(client, clock.now())
    assert obtain_token(client, device, key, CHALLENGE)[0].status_code == 200


def test_quota_is_per_device(
    client: TestClient, clock: TestClock, device: SimulatedDevice, manufacturer: ManufacturerCA
) -> None:
    other = SimulatedDevice.manufacture(manufacturer)
    enroll(client, device)
    enroll(client, other)
    key = current_key(client, clock.now())
    for _ in range(QUOTA):
        assert obtain_token(client, device, key, CHALLENGE)[0].status_code == 200
    assert obtain_token(client, device, key, CHALLENGE)[0].status_code == 429
    assert obtain_token(client, other, key, CHALLENGE)[0].status_code == 200


def test_refused_request_gives_the_unit_back(
    client: TestClient, clock: TestClock, device: SimulatedDevice
) -> None:
    enroll(client, device)
    key = current_key(client, clock.now())
    bad = bytearray(create_token_request(CHALLENGE, key)[0].encode())
    bad[2] ^= 0x55  # unknown truncated key id
    for _ in range(QUOTA + 2):
        assert post_request(client, device, bytes(bad)).status_code == 422
    for _ in range(QUOTA):
        assert obtain_token(client, device, key, CHALLENGE)[0].status_code == 200
    assert obtain_token(client, device, key, CHALLENGE)[0].status_code == 429


class _CountingChannel:
    """Stands in for the issuer: counts what reaches it."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []
        self._lock = threading.Lock()

    def issue(self, body: bytes) -> bytes:
        with self._lock:
            self.bodies.append(body)
        return bytes(256)


def test_quota_holds_under_concurrency(
    db_factory: DbFactory, clock: TestClock, manufacturer: ManufacturerCA
) -> None:
    """Threads racing for one device (each with its own nonce) get exactly N tokens."""
    n_tokens, n_threads = 5, MAX_OUTSTANDING_NONCES
    db = Database.open(db_factory())
    channel = _CountingChannel()
    attester = AttesterService(
        db,
        clock,
        [manufacturer.certificate],
        channel,
        quota_tokens=n_tokens,
        quota_window_seconds=WINDOW,
        nonce_ttl_seconds=60,
    )
    try:
        attester.migrate()
        device = SimulatedDevice.manufacture(manufacturer, "ecdsa-p256")
        attester.enroll(device.certificate_pem().encode())
        prepared = []
        for i in range(n_threads):
            body = bytes([i]) * 259
            n = attester.challenge(device.device_id).nonce
            prepared.append((n, body, device.sign(n, body)))

        def request(n: bytes, body: bytes, sig: bytes) -> str:
            try:
                attester.token_request(device.device_id, n, sig, body)
            except QuotaExceededError:
                return "429"
            return "ok"

        outcomes = _all_at_once(request, prepared)
        assert sorted(outcomes) == ["429"] * (n_threads - n_tokens) + ["ok"] * n_tokens
        assert len(channel.bodies) == n_tokens
        assert attester.issued(device.device_id) == n_tokens
    finally:
        db.close()


T = TypeVar("T")


def _all_at_once(call: Callable[..., T], calls: Sequence[tuple[Any, ...]]) -> list[T]:
    """`call(*args)` for every args of `calls`, each in its own thread, released together."""
    barrier = threading.Barrier(len(calls))
    results: list[T] = []
    lock = threading.Lock()

    def run(*args: Any) -> None:
        barrier.wait()
        result = call(*args)
        with lock:
            results.append(result)

    threads = [threading.Thread(target=run, args=args) for args in calls]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == len(calls), "a racing call raised"
    return results


def test_quota_holds_under_concurrent_http_requests(
    client: TestClient, clock: TestClock, device: SimulatedDevice
) -> None:
    enroll(client, device)
    key = current_key(client, clock.now())
    work = []
    for _ in range(12):
        body = create_token_request(CHALLENGE, key)[0].encode()
        n = nonce(client, device)
        work.append((body, n))

    def request(body: bytes, n: bytes) -> int:
        return post_request(client, device, body, nonce_value=n).status_code

    statuses = _all_at_once(request, work)
    assert sorted(statuses) == [200] * QUOTA + [429] * (len(work) - QUOTA)


def test_attester_relays_the_request_unread(
    tmp_path: Path, clock: TestClock, manufacturer: ManufacturerCA, device: SimulatedDevice
) -> None:
    """The issuer receives the device's exact bytes, and the attester's store holds nothing of
    the challenge or the token (RFC 9576 §4.4)."""
    channel = _CountingChannel()
    settings = _joint(tmp_path)
    issuer_app = create_app(settings, clock=clock, trust_anchors=[manufacturer.certificate])
    with TestClient(issuer_app) as issuer_client:
        key = current_key(issuer_client, clock.now())
    app = create_app(
        _joint(tmp_path, attester_database_url=f"sqlite:///{tmp_path / 'a2.db'}"),
        clock=clock,
        trust_anchors=[manufacturer.certificate],
        issuer_channel=channel,
    )
    request, state = create_token_request(CHALLENGE, key)
    with TestClient(app) as c:
        enroll(c, device)
        assert post_request(c, device, request.encode()).status_code == 200
    assert channel.bodies == [request.encode()]
    stored = (tmp_path / "a2.db").read_bytes()
    wal = tmp_path / "a2.db-wal"
    if wal.exists():
        stored += wal.read_bytes()
    for secret in (CHALLENGE.encode(), CHALLENGE.digest(), state.nonce, request.blinded_msg):
        assert secret not in stored


def test_split_model(
    tmp_path: Path, clock: TestClock, manufacturer: ManufacturerCA, store_factory: StoreFactory
) -> None:
    """Attester and issuer as two apps with separate stores, joined by HTTP and a secret."""
    issuer_settings = TokenIssuerSettings(
        role="issuer",
        issuer_database_url=f"sqlite:///{tmp_path / 'issuer.db'}",
        attester_secret=SECRET,  # type: ignore[arg-type]
    )
    issuer_app = create_app(issuer_settings, clock=clock, key_store_factory=store_factory)
    with TestClient(issuer_app, base_url="http://issuer.test") as issuer_http:
        for secret, expected in ((SECRET, 200), ("a-wrong-secret-0123456789", 502)):
            attester_settings = TokenIssuerSettings(
                role="attester",
                attester_database_url=f"sqlite:///{tmp_path / f'attester{expected}.db'}",
                issuer_url="http://issuer.test",
                attester_secret=secret,  # type: ignore[arg-type]
                quota_tokens=QUOTA,
            )
            channel = HttpIssuerChannel(issuer_http, "http://issuer.test", secret)
            app = create_app(
                attester_settings,
                clock=clock,
                trust_anchors=[manufacturer.certificate],
                issuer_channel=channel,
            )
            with TestClient(app) as attester_http:
                assert attester_http.get("/healthz").json()["role"] == "attester"
                # The attester serves no directory and no issuer endpoint.
                assert attester_http.get(ISSUER_DIRECTORY_PATH).status_code == 404
                device = SimulatedDevice.manufacture(manufacturer)
                enroll(attester_http, device)
                key = current_key(issuer_http, clock.now())
                r, token = obtain_token(attester_http, device, key, CHALLENGE)
                assert r.status_code == expected
                if expected == 200:
                    assert token is not None
                    verify_token(token.encode(), [key], CHALLENGE.digest())
                    bad = bytearray(r.request.content)
                    bad[2] ^= 0x55
                    assert post_request(attester_http, device, bytes(bad)).status_code == 422


def test_issuance_error_type_is_shared() -> None:
    assert issubclass(IssuanceError, ValueError)


def test_outstanding_nonces_are_bounded(
    client: TestClient, clock: TestClock, device: SimulatedDevice
) -> None:
    """A device (or anyone knowing its id) cannot pile up nonces: the oldest give way."""
    enroll(client, device)
    key = current_key(client, clock.now())
    nonces = []
    for _ in range(MAX_OUTSTANDING_NONCES + 1):
        nonces.append(nonce(client, device))
        clock.advance(1)
    body = create_token_request(CHALLENGE, key)[0].encode()
    assert post_request(client, device, body, nonce_value=nonces[0]).status_code == 401
    assert post_request(client, device, body, nonce_value=nonces[1]).status_code == 200
    assert post_request(client, device, body, nonce_value=nonces[-1]).status_code == 200


def test_housekeeping_drops_old_windows_and_nonces(
    sqlite_url: str, clock: TestClock, manufacturer: ManufacturerCA
) -> None:
    db = Database.open(sqlite_url)
    attester = AttesterService(
        db,
        clock,
        [manufacturer.certificate],
        _CountingChannel(),
        quota_tokens=2,
        quota_window_seconds=100,
        nonce_ttl_seconds=10,
    )

    def count(table: str) -> int:
        row = db.run("t", lambda tx: tx.query_one(f"SELECT COUNT(*) AS n FROM {table}"))
        assert row is not None
        return int(row["n"])

    try:
        attester.migrate()
        device = SimulatedDevice.manufacture(manufacturer)
        attester.enroll(device.certificate_pem().encode())
        n = attester.challenge(device.device_id).nonce
        attester.token_request(device.device_id, n, device.sign(n, b"x"), b"x")
        attester.challenge(device.device_id)  # left unused
        assert (count("pp_attester_quota"), count("pp_attester_nonces")) == (1, 1)
        clock.advance(200)
        attester.challenge(device.device_id)
        assert (count("pp_attester_quota"), count("pp_attester_nonces")) == (0, 1)
    finally:
        db.close()


def test_full_redemption_flow(
    client: TestClient, clock: TestClock, device: SimulatedDevice
) -> None:
    """Origin challenge -> device picks it -> token via attester/issuer -> Authorization ->
    origin verifies with the issuer directory's keys (RFC 9576 §3.1)."""
    enroll(client, device)
    directory_keys = [
        k.token_key_object()
        for k in IssuerDirectory.decode(client.get(ISSUER_DIRECTORY_PATH).content).token_keys
    ]
    origin_challenge = TokenChallenge(
        2, b"issuer.sagg.test", bytes(range(32, 64)), b"leader.test,helper.test"
    )
    www_authenticate = format_www_authenticate(
        [PrivateTokenChallenge(origin_challenge.encode(), directory_keys[0].spki, 60)]
    )

    chosen = select_challenge(www_authenticate)
    assert chosen is not None and chosen.token_key is not None
    key = TokenKey.from_spki(chosen.token_key)
    r, token = obtain_token(client, device, key, chosen.token_challenge())
    assert r.status_code == 200 and token is not None
    authorization = format_authorization(token.encode())

    verified = verify_authorization(authorization, directory_keys, origin_challenge.digest())
    assert verified.token_key_id == key.token_key_id
    with pytest.raises(InvalidTokenError):
        verify_authorization(authorization, directory_keys, CHALLENGE.digest())


def test_enrollment_answer_carries_a_single_use_nonce(
    client: TestClient, clock: TestClock, device: SimulatedDevice
) -> None:
    """The nonce in the enrollment answer authenticates the device's first token request,
    once, until it expires, as a challenge's does."""
    answer = enroll(client, device).json()
    assert answer["expires"] > clock.now()
    first = b64url_decode(answer["nonce"])
    key = current_key(client, clock.now())
    body = create_token_request(CHALLENGE, key)[0].encode()
    assert post_request(client, device, body, nonce_value=first).status_code == 200
    assert post_request(client, device, body, nonce_value=first).status_code == 401
    # Enrolling again (a known device) hands out another; expired, it is refused.
    again = b64url_decode(enroll(client, device).json()["nonce"])
    clock.advance(TokenIssuerSettings().nonce_ttl_seconds + 1)
    assert post_request(client, device, body, nonce_value=again).status_code == 401


def test_the_attesters_refusals_answer_as_refusals_wherever_they_surface() -> None:
    """A device's over-quota or unauthenticated request is its own doing: should one escape
    its route, it answers 429 with Retry-After or 401, never the bare 500 of an
    `InternalError` (which neither sends nor logs its message)."""
    quota = QuotaExceededError(retry_after=17)
    auth = DeviceAuthError("unknown device", "unknown_device")
    assert not isinstance(quota, InternalError) and not isinstance(auth, InternalError)
    answer = quota.response()
    assert (answer.status_code, answer.headers["retry-after"]) == (429, "17")
    answer = auth.response()
    assert answer.status_code == 401
    assert json.loads(bytes(answer.body))["detail"] == "unknown device"
