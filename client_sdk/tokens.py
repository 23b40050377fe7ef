"""Privacy Pass tokens for reports (RFC 9576-9578; 001 §4.1; `shared.dap.extensions`).

The device enrolls once with the attester, presenting its manufacturer certificate
(``POST /attester/enroll``). For each (task, window) it will report in, it obtains a token ahead
of need, at a random time (`DonationSchedule.token_fetch_time`), one token per aggregator role
(`shared.dap.extensions`: each input share carries a token only its aggregator can redeem),
each by its own issuance: ``POST /attester/challenge`` for a single-use nonce, then the
blinded TokenRequest for `token_challenge(task, time, policy, role)` signed with the device
key (`shared.privacypass.attestation`). The attester learns that this device asked for a
token, never for which task, report or role (the request is blinded and names the key by its
truncated id only), and the two issuances of a report are two independent blindings, so
neither the issuer nor the attester can link one to the other or either to its redemption.
Tokens are cached per (task, window, role) in the state database and each is used once:
`take` marks it used in the caller's transaction, the one that stores the sealed report
carrying it.
"""

from __future__ import annotations

import sqlite3
from typing import Protocol

import httpx

from client_sdk.storage import StateDb
from shared import b64url
from shared.dap.extensions import token_challenge, token_window_start
from shared.dap.ids import TaskId
from shared.dap.messages import Role
from shared.dap.task import TokenPolicy
from shared.privacypass.attestation import (
    ATTESTER_CHALLENGE_PATH,
    ATTESTER_ENROLL_PATH,
    ATTESTER_TOKEN_REQUEST_PATH,
    DEVICE_ID_HEADER,
    NONCE_HEADER,
    SIGNATURE_HEADER,
)
from shared.privacypass.client import create_token_request, finalize_token
from shared.privacypass.directory import ISSUER_DIRECTORY_PATH, DirectoryError, IssuerDirectory
from shared.privacypass.headers import b64url_decode, b64url_encode
from shared.privacypass.messages import MEDIA_TOKEN_REQUEST, Token

__all__ = ["DeviceIdentity", "TokenError", "TokenWallet"]


class DeviceIdentity(Protocol):
    """The factory key pair and certificate (as `client_sdk.manufacturer.SimulatedDevice`)."""

    @property
    def device_id(self) -> bytes: ...

    def certificate_pem(self) -> str: ...

    def sign(self, nonce: bytes, body: bytes) -> bytes: ...


class TokenError(Exception):
    """No token could be obtained (the message names the step, never the token)."""


class TokenWallet:
    def __init__(self, db: StateDb, http: httpx.Client, identity: DeviceIdentity | None) -> None:
        self._db = db
        self._http = http
        self._identity = identity
        self._directories: dict[str, IssuerDirectory] = {}

    def _post(self, url: str, **kwargs: object) -> httpx.Response:
        try:
            return self._http.post(url, **kwargs)  # type: ignore[arg-type]
        except httpx.HTTPError as exc:
            raise TokenError(f"attester unreachable: {type(exc).__name__}") from None

    def enroll(self, attester_url: str) -> None:
        if self._identity is None:
            raise TokenError("this device has no identity to enroll")
        done_key = f"enrolled:{attester_url}"
        if self._db.get(done_key):
            return
        url = attester_url.rstrip("/") + ATTESTER_ENROLL_PATH
        response = self._post(url, json={"certificate": self._identity.certificate_pem()})
        if response.status_code not in (200, 201):
            raise TokenError(f"enrollment refused: {response.status_code}")
        self._db.put(done_key, "1")

    def _directory(self, issuer_url: str) -> IssuerDirectory:
        found = self._directories.get(issuer_url)
        if found is None:
            try:
                response = self._http.get(issuer_url.rstrip("/") + ISSUER_DIRECTORY_PATH)
                response.raise_for_status()
                found = IssuerDirectory.decode(response.content)
            except (httpx.HTTPError, DirectoryError) as exc:
                raise TokenError(f"issuer directory unavailable: {type(exc).__name__}") from None
            self._directories[issuer_url] = found
        return found

    def available(self, task_id: TaskId, report_time: int, policy: TokenPolicy, role: Role) -> int:
        start = token_window_start(report_time, policy.window_seconds)
        with self._db.lock:
            row = self._db.conn.execute(
                "SELECT COUNT(*) FROM token "
                "WHERE task_id = ? AND window_start = ? AND role = ? AND used = 0",
                (task_id.to_b64url(), start, int(role)),
            ).fetchone()
        return int(row[0])

    def fetch(
        self,
        task_id: TaskId,
        report_time: int,
        policy: TokenPolicy,
        role: Role,
        attester_url: str,
        now: int,
        key_ids: tuple[str, ...] = (),
    ) -> None:
        """Obtain one token for `role`'s share of a report in the window of `report_time` (a
        fresh attester nonce and blinding each time) and cache it, under one of the recipe's
        pinned `key_ids` only (a key the issuer shows this device alone could tag its reports;
        the aggregators refuse tokens under any other key)."""
        if self._identity is None:
            raise TokenError("this device has no identity for the attester")
        if not key_ids:
            raise TokenError("the recipe pins no issuer key")
        directory = self._directory(policy.issuer_url)
        keys = [
            k
            for k in directory.keys_of_type()
            if (k.not_before is None or k.not_before <= now)
            # Recipes spell key ids unpadded, Privacy Pass headers padded.
            and b64url.b64url_encode(k.token_key_object().token_key_id) in key_ids
        ]
        if not keys:
            raise TokenError("the issuer has no usable pinned key")
        challenge = token_challenge(task_id, report_time, policy, role)
        request, state = create_token_request(challenge, keys[0].token_key_object())
        body = request.encode()
        base = attester_url.rstrip("/")
        device_id = b64url_encode(self._identity.device_id)
        answer = self._post(base + ATTESTER_CHALLENGE_PATH, json={"device_id": device_id})
        if answer.status_code != 200:
            raise TokenError(f"attester challenge refused: {answer.status_code}")
        nonce = b64url_decode(answer.json()["nonce"])
        response = self._post(
            base + ATTESTER_TOKEN_REQUEST_PATH,
            content=body,
            headers={
                "Content-Type": MEDIA_TOKEN_REQUEST,
                DEVICE_ID_HEADER: device_id,
                NONCE_HEADER: b64url_encode(nonce),
                SIGNATURE_HEADER: b64url_encode(self._identity.sign(nonce, body)),
            },
        )
        if response.status_code != 200:
            raise TokenError(f"token request refused: {response.status_code}")
        try:
            token = finalize_token(state, response.content)
        except ValueError as exc:
            raise TokenError(f"invalid token response: {type(exc).__name__}") from None
        start = token_window_start(report_time, policy.window_seconds)
        with self._db.transaction() as conn:
            conn.execute(
                "INSERT INTO token (task_id, window_start, role, token) VALUES (?, ?, ?, ?)",
                (task_id.to_b64url(), start, int(role), token.encode()),
            )

    def take(
        self,
        conn: sqlite3.Connection,
        task_id: TaskId,
        report_time: int,
        policy: TokenPolicy,
        role: Role,
    ) -> Token | None:
        """Mark one cached token of the window and role used, on `conn` (the caller's
        transaction)."""
        start = token_window_start(report_time, policy.window_seconds)
        row = conn.execute(
            "SELECT id, token FROM token "
            "WHERE task_id = ? AND window_start = ? AND role = ? AND used = 0 "
            "ORDER BY id LIMIT 1",
            (task_id.to_b64url(), start, int(role)),
        ).fetchone()
        if row is None:
            return None
        conn.execute("UPDATE token SET used = 1 WHERE id = ?", (row[0],))
        return Token.decode(row[1])
