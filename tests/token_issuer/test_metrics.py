"""The token issuer's `/metrics` after real issuance, quota refusals and enrolment refusals;
nothing secret (tokens, keys, signatures, nonces) in the metrics or in the logs of it all."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from fastapi.testclient import TestClient

from client_sdk.manufacturer import ManufacturerCA, SimulatedDevice
from services.common.clock import Clock, TestClock
from services.common.db import Database
from services.common.logs import JsonFormatter
from services.token_issuer.app import create_app
from services.token_issuer.keys import KeySchedule, KeyStore
from services.token_issuer.settings import TokenIssuerSettings
from shared.privacypass.client import create_token_request
from shared.privacypass.headers import b64url_encode
from shared.privacypass.issuance import IssuerKey
from shared.privacypass.messages import TokenChallenge
from tests.exposition import parse, value
from tests.token_issuer.helpers import current_key, enroll, obtain_token, post_request

CHALLENGE = TokenChallenge(2, b"issuer.sagg.test", bytes(range(32)), b"leader.test,helper.test")
METRICS_TOKEN = "metrics-token-0123456789abcdef"
SCRAPE = {"Authorization": f"Bearer {METRICS_TOKEN}"}
QUOTA = 3
EPOCH = 7 * 86400


def _settings(tmp_path: Path) -> TokenIssuerSettings:
    return TokenIssuerSettings(
        role="joint",
        issuer_database_url=f"sqlite:///{tmp_path / 'issuer.db'}",
        attester_database_url=f"sqlite:///{tmp_path / 'attester.db'}",
        quota_tokens=QUOTA,
        quota_window_seconds=3600,
        key_epoch_seconds=EPOCH,
        metrics_token=METRICS_TOKEN,  # type: ignore[arg-type]
    )


def _scrape(client: TestClient) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    response = client.get("/metrics", headers=SCRAPE)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    return parse(response.text)


def test_token_issuer_metrics_and_no_secrets(
    tmp_path: Path,
    clock: TestClock,
    manufacturer: ManufacturerCA,
    pooled_keys: Callable[[], IssuerKey],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    used: list[IssuerKey] = []

    def generate() -> IssuerKey:
        used.append(pooled_keys())
        return used[-1]

    def key_store(db: Database, schedule: KeySchedule, clk: Clock) -> KeyStore:
        return KeyStore(db, schedule, clk, generate=generate)

    def app() -> TestClient:
        return TestClient(
            create_app(
                _settings(tmp_path),
                clock=clock,
                trust_anchors=[manufacturer.certificate],
                key_store_factory=key_store,
            )
        )

    device = SimulatedDevice.manufacture(manufacturer)
    rogue = SimulatedDevice.manufacture(ManufacturerCA.generate("rogue", now=clock.now()))
    secrets: list[str] = [METRICS_TOKEN]
    with app() as client:
        assert client.get("/metrics").status_code == 401
        assert enroll(client, device).status_code == 201
        assert enroll(client, device).status_code == 200
        assert enroll(client, rogue).status_code == 403
        key = current_key(client, clock.now())
        # One request the issuer refuses; the attester gives its quota unit back.
        bad = bytearray(create_token_request(CHALLENGE, key)[0].encode())
        bad[2] ^= 0x55  # a truncated key id no key has
        assert post_request(client, device, bytes(bad)).status_code == 422
        for _ in range(QUOTA):
            response, token = obtain_token(client, device, key, CHALLENGE)
            assert response.status_code == 200 and token is not None
            secrets += [b64url_encode(token.encode()), token.encode().hex()]
            secrets += [b64url_encode(response.content), response.content.hex()]
        for _ in range(2):
            assert obtain_token(client, device, key, CHALLENGE)[0].status_code == 429

        samples = _scrape(client)
        epoch = str(clock.now() // EPOCH)
        assert value(samples, "sagg_token_issuer_tokens_issued_total", epoch=epoch) == QUOTA
        errors = "sagg_token_issuer_issuance_errors_total"
        assert value(samples, errors, reason="unknown_key_id") == 1
        requests = "sagg_attester_token_requests_total"
        assert value(samples, requests, outcome="issued") == QUOTA
        assert value(samples, requests, outcome="quota_exceeded") == 2
        assert value(samples, requests, outcome="issuer_refused") == 1
        assert value(samples, "sagg_attester_enrolments_total", outcome="created") == 1
        assert value(samples, "sagg_attester_enrolments_total", outcome="known") == 1
        refusals = "sagg_attester_enrolment_refusals_total"
        assert value(samples, refusals, reason="untrusted_issuer") == 1
        assert value(samples, "sagg_attester_devices") == 1
        assert value(samples, "sagg_attester_window_tokens") == QUOTA
        assert value(samples, "sagg_token_issuer_key_issuing", epoch=epoch) == 1
        text = client.get("/metrics", headers=SCRAPE).text

    for issuer_key in used:
        der = issuer_key.private_key.to_cryptography().private_bytes(
            serialization.Encoding.DER,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        secrets += [der.hex(), b64url_encode(der)]
    secrets.append(device.certificate_pem())
    records = caplog.records
    assert records, "the run logged nothing: the check below would be empty"
    formatter = JsonFormatter()
    lines = [formatter.format(r) for r in records]
    for line in lines:
        assert isinstance(json.loads(line)["msg"], str)
    logs = "\n".join(lines)
    for secret in secrets:
        assert secret not in text and secret not in logs

    # A restart keeps what the stores know and starts the event counters again.
    with app() as client:
        samples = _scrape(client)
        assert value(samples, "sagg_attester_devices") == 1
        assert value(samples, "sagg_attester_window_tokens") == QUOTA
        assert value(samples, "sagg_token_issuer_tokens_issued_total", epoch=epoch) == 0


def test_metrics_off_without_a_token_and_healthz(
    tmp_path: Path, clock: TestClock, manufacturer: ManufacturerCA
) -> None:
    settings = _settings(tmp_path).model_copy(update={"metrics_token": None})
    app = create_app(settings, clock=clock, trust_anchors=[manufacturer.certificate])
    with TestClient(app) as client:
        assert client.get("/metrics", headers=SCRAPE).status_code == 403
        assert client.get("/healthz").json() == {"status": "ok", "role": "joint"}
