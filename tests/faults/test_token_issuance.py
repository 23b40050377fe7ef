"""Faults during token issuance: the token issuer is killed with SIGKILL while devices fetch.

Devices run the SDK's `TokenWallet` against a real `python -m services.token_issuer` process
(joint attester and issuer, SQLite stores) while a seeded schedule kills it at random moments
and starts it again. Whatever a kill interrupts (a challenge, the quota charge, the blind
signature, the answer on the wire), afterwards:

- every token a device holds verifies under the issuer's key, which survived the restarts
  (tokens issued before a kill stay redeemable);
- no device holds more tokens than its quota, and the attester's persisted charge for each
  device is at least what the device holds (a kill may cost a device a unit, never give one);
- the quota is still enforced after the restarts: a device whose charge reached the quota is
  refused (429) and gets nothing;
- a spent attester nonce stays spent across a restart.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from client_sdk.manufacturer import ManufacturerCA, SimulatedDevice
from client_sdk.storage import StateDb
from client_sdk.tokens import TokenError, TokenWallet
from deploy.launcher import free_port
from shared import b64url
from shared.dap.extensions import token_challenge
from shared.dap.ids import TaskId
from shared.dap.messages import Role
from shared.dap.task import TokenPolicy
from shared.privacypass.attestation import (
    ATTESTER_CHALLENGE_PATH,
    ATTESTER_TOKEN_REQUEST_PATH,
    DEVICE_ID_HEADER,
    NONCE_HEADER,
    SIGNATURE_HEADER,
)
from shared.privacypass.client import create_token_request
from shared.privacypass.directory import ISSUER_DIRECTORY_PATH, IssuerDirectory
from shared.privacypass.headers import b64url_decode, b64url_encode
from shared.privacypass.messages import MEDIA_TOKEN_REQUEST, Token
from shared.privacypass.verify import verify_token
from tests.faults.harness import Service, seeded

QUOTA = 3
DEVICES = 8
#: Attempts per device: more than the quota, so that every device runs into it.
ATTEMPTS = QUOTA + 2
KILLS = 4
#: Pause between a device's fetches (the kills come every 0.05-0.6 s).
PACE_S = 0.4
TASK = TaskId(bytes(range(32)))
#: The issuer never learns which aggregator a token is for: one role stands for both here.
ROLE = Role.LEADER


class Fleet:
    """Devices with their wallets, each fetching tokens for one task and window."""

    def __init__(self, tmp: Path, ca: ManufacturerCA, issuer_url: str) -> None:
        self.issuer_url = issuer_url
        self.policy = TokenPolicy(issuer_url=issuer_url, issuer_name="faults-issuer")
        # The recipe's pinned keys: the issuer's, as its directory lists them at the start.
        self.key_ids = tuple(
            b64url.b64url_encode(k.token_key_object().token_key_id)  # unpadded, as recipes
            for k in _directory(issuer_url).token_keys
        )
        self.report_time = int(time.time())
        self.devices = [SimulatedDevice.manufacture(ca) for _ in range(DEVICES)]
        self.http = httpx.Client(timeout=5.0)
        self.stores = [StateDb(tmp / f"device-{i}.sqlite3") for i in range(DEVICES)]
        self.wallets = [
            TokenWallet(store, self.http, device)
            for store, device in zip(self.stores, self.devices, strict=True)
        ]
        self.refusals = [0] * DEVICES
        self.unreachable = 0

    def fetch_until_refused(self, i: int, deadline: float) -> None:
        """Fetch up to ATTEMPTS tokens, retrying through outages; stop at the first refusal."""
        wallet = self.wallets[i]
        done = 0
        while done < ATTEMPTS and time.monotonic() < deadline:
            try:
                wallet.enroll(self.issuer_url)
                wallet.fetch(
                    TASK,
                    self.report_time,
                    self.policy,
                    ROLE,
                    self.issuer_url,
                    int(time.time()),
                    self.key_ids,
                )
                done += 1
                # Paced, so that fetching spans the whole kill schedule.
                time.sleep(PACE_S)
            except TokenError as exc:
                if "429" in str(exc):
                    self.refusals[i] += 1
                    return
                # The issuer is down or was killed mid-request: the device tries again later.
                self.unreachable += 1
                time.sleep(0.05)

    def held(self, i: int) -> list[Token]:
        db = self.stores[i]
        with db.lock:
            rows = db.conn.execute("SELECT token FROM token").fetchall()
        return [Token.decode(row[0]) for row in rows]

    def close(self) -> None:
        self.http.close()


@pytest.fixture
def issuer(tmp_path: Path) -> Iterator[tuple[Service, ManufacturerCA]]:
    ca = ManufacturerCA.generate()
    ca_file = tmp_path / "manufacturer-ca.pem"
    ca_file.write_text(ca.certificate_pem())
    port = free_port()
    prefix = "SAGG_TOKEN_ISSUER_"
    settings = {
        "PORT": str(port),
        "ROLE": "joint",
        "ISSUER_DATABASE_URL": f"sqlite:///{tmp_path / 'issuer.sqlite3'}",
        "ATTESTER_DATABASE_URL": f"sqlite:///{tmp_path / 'attester.sqlite3'}",
        "MANUFACTURER_CA_FILES": json.dumps([str(ca_file)]),
        "QUOTA_TOKENS": str(QUOTA),
        "LOG_LEVEL": "warning",
    }
    env = {**os.environ, **{prefix + k: v for k, v in settings.items()}}
    service = Service("token-issuer", "services.token_issuer", env, port, tmp_path / "issuer.log")
    service.start()
    try:
        yield service, ca
    finally:
        service.kill9()


def _charges(attester_db: Path) -> dict[bytes, int]:
    with sqlite3.connect(attester_db) as conn:
        rows = conn.execute("SELECT device_id, SUM(issued) FROM pp_attester_quota GROUP BY 1")
        return {bytes(device): int(issued) for device, issued in rows}


def _directory(url: str) -> IssuerDirectory:
    return IssuerDirectory.decode(httpx.get(url + ISSUER_DIRECTORY_PATH, timeout=5).content)


def test_issuer_killed_during_issuance(
    tmp_path: Path, issuer: tuple[Service, ManufacturerCA], seed: int
) -> None:
    service, ca = issuer
    keys_before = {k.token_key for k in _directory(service.url).token_keys}
    fleet = Fleet(tmp_path, ca, service.url)
    try:
        deadline = time.monotonic() + 90
        workers = [
            threading.Thread(target=fleet.fetch_until_refused, args=(i, deadline))
            for i in range(DEVICES)
        ]
        for worker in workers:
            worker.start()
        with seeded(seed) as rng:
            for _ in range(KILLS):
                time.sleep(rng.uniform(0.05, 0.6))
                service.restart()
        for worker in workers:
            worker.join(timeout=max(0.0, deadline - time.monotonic()) + 5)
        assert not any(w.is_alive() for w in workers), "devices still fetching at the deadline"
        assert service.starts == KILLS + 1

        # The keys survived the kills, so every token held verifies.
        directory = _directory(service.url)
        assert {k.token_key for k in directory.token_keys} == keys_before
        token_keys = [k.token_key_object() for k in directory.token_keys]
        digest = token_challenge(TASK, fleet.report_time, fleet.policy, ROLE).digest()
        held = [fleet.held(i) for i in range(DEVICES)]
        for tokens in held:
            for token in tokens:
                verify_token(token, token_keys, digest)
        nonces = [t.nonce for tokens in held for t in tokens]
        assert len(set(nonces)) == len(nonces)

        # A kill may cost a device a unit of quota, never give it one.
        charges = _charges(tmp_path / "attester.sqlite3")
        for device, tokens in zip(fleet.devices, held, strict=True):
            assert len(tokens) <= QUOTA
            assert len(tokens) <= charges.get(device.device_id, 0) <= QUOTA
        # Each device stopped at a refusal (the quota held across restarts), not at the deadline.
        assert fleet.refusals == [1] * DEVICES
        # The run did get tokens through: the faults did not reduce it to refusals only.
        assert sum(map(len, held)) >= DEVICES * QUOTA // 2
        # And the kills did interrupt fetches.
        assert fleet.unreachable > 0
        print(f"{sum(map(len, held))} tokens held, {fleet.unreachable} interrupted fetches")
    finally:
        fleet.close()


def test_a_spent_nonce_stays_spent_across_a_restart(
    tmp_path: Path, issuer: tuple[Service, ManufacturerCA]
) -> None:
    """A token request replayed byte for byte after a kill is refused and charges nothing."""
    service, ca = issuer
    fleet = Fleet(tmp_path, ca, service.url)
    try:
        device = fleet.devices[0]
        fleet.wallets[0].enroll(service.url)
        device_id = b64url_encode(device.device_id)
        key = _directory(service.url).token_keys[0].token_key_object()
        request, _ = create_token_request(
            token_challenge(TASK, fleet.report_time, fleet.policy, ROLE), key
        )
        body = request.encode()
        answer = httpx.post(
            service.url + ATTESTER_CHALLENGE_PATH, json={"device_id": device_id}, timeout=5
        )
        nonce = b64url_decode(answer.json()["nonce"])
        headers = {
            "Content-Type": MEDIA_TOKEN_REQUEST,
            DEVICE_ID_HEADER: device_id,
            NONCE_HEADER: b64url_encode(nonce),
            SIGNATURE_HEADER: b64url_encode(device.sign(nonce, body)),
        }
        url = service.url + ATTESTER_TOKEN_REQUEST_PATH
        assert httpx.post(url, content=body, headers=headers, timeout=5).status_code == 200
        service.restart()
        replay = httpx.post(url, content=body, headers=headers, timeout=5)
        assert replay.status_code == 401
        assert _charges(tmp_path / "attester.sqlite3") == {device.device_id: 1}
    finally:
        fleet.close()
