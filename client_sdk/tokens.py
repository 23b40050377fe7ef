"""Privacy Pass tokens for reports (RFC 9576-9578; 001 §4.1; `shared.dap.extensions`).

The device enrolls once with the attester, presenting its manufacturer certificate (``POST
/attester/enroll``). For each (task, window) it will report in, it obtains a token ahead of
need, at a random time (`DonationSchedule.token_fetch_time`), one token per aggregator role
(`shared.dap.extensions`: each input share carries a token only its aggregator can redeem),
each by its own blinding: ``POST /attester/challenge`` for a single-use nonce (the enrollment
answer carries one for the device's first request, kept in memory only), then the blinded
TokenRequest for `token_challenge(task, time, policy, role)` signed with the device key
(`shared.privacypass.attestation`), or both roles' TokenRequests in one batched request under
one nonce (`request_batch`, `shared.privacypass.batch`). The attester learns that this device
asked for a token, never for which task, report or role (the request is blinded and names the
key by its truncated id only), and the two tokens of a report are two independent blindings, so
neither the issuer nor the attester can link either to its redemption; a batch tells the
attester only what it knew (one device asks for two tokens), and it relays the requests to the
issuer one by one, though back to back. Every token obtained is recorded in the state database
per (task, window, role) and used once: a batch fetched for one report is recorded used in the
transaction that attaches it to that report's pending row (`client_sdk.device.Device.prefetch`);
a cached one is marked used by `take` in the caller's transaction, the one that attaches it.
"""

from __future__ import annotations

import sqlite3
from typing import Any, Protocol

import httpx

from client_sdk.errors import ClientError
from client_sdk.http import HttpClient, HttpResponse
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
from shared.privacypass.batch import MEDIA_BATCH_REQUEST, BatchTokenRequest, BatchTokenResponse
from shared.privacypass.client import create_token_request, finalize_token
from shared.privacypass.directory import ISSUER_DIRECTORY_PATH, DirectoryError, IssuerDirectory
from shared.privacypass.headers import b64url_decode, b64url_encode
from shared.privacypass.keys import TokenKey
from shared.privacypass.messages import MEDIA_TOKEN_REQUEST, Token

__all__ = ["DeviceIdentity", "TokenError", "TokenWallet"]


class DeviceIdentity(Protocol):
    """The factory key pair and certificate (as `client_sdk.manufacturer.SimulatedDevice`)."""

    @property
    def device_id(self) -> bytes: ...

    def certificate_pem(self) -> str: ...

    def sign(self, nonce: bytes, body: bytes) -> bytes: ...


class TokenError(ClientError):
    """No token could be obtained (the message names the step, never the token)."""


class TokenWallet:
    def __init__(
        self,
        db: StateDb,
        http: HttpClient,
        identity: DeviceIdentity | None,
        directories: dict[str, IssuerDirectory] | None = None,
    ) -> None:
        """`directories`: a cache of issuer directories, shared by the devices of a simulator
        (fetched once, not once per device)."""
        self._db = db
        self._http = http
        self._identity = identity
        self._directories: dict[str, IssuerDirectory] = {} if directories is None else directories
        #: Attester URL -> (nonce, expiry) from the enrollment answer, unused yet.
        self._first_nonce: dict[str, tuple[bytes, int]] = {}

    def _post(
        self,
        url: str,
        *,
        content: bytes | None = None,
        json: Any = None,
        headers: dict[str, str] | None = None,
    ) -> HttpResponse:
        try:
            return self._http.post(url, content=content, json=json, headers=headers)
        except httpx.HTTPError as exc:
            raise TokenError(f"attester unreachable: {type(exc).__name__}") from None

    def enroll(self, attester_url: str, *, record: bool = True) -> bool:
        """Present the device's certificate to the attester unless the state records it
        enrolled there; whether it enrolled now. `record=False` leaves recording it to the
        caller (`record_enrolment`, in a transaction of its choosing: a simulator's chunk);
        enrolling again after a crash in between is harmless (the attester knows the device
        by its key)."""
        if self._identity is None:
            raise TokenError("this device has no identity to enroll")
        if self._db.get(_enrolled_key(attester_url)):
            return False
        url = attester_url.rstrip("/") + ATTESTER_ENROLL_PATH
        response = self._post(url, json={"certificate": self._identity.certificate_pem()})
        if response.status_code not in (200, 201):
            raise TokenError(f"enrollment refused: {response.status_code}")
        if record:
            self.record_enrolment(attester_url)
        answer = response.json()
        if "nonce" in answer:
            nonce = b64url_decode(answer["nonce"])
            self._first_nonce[attester_url.rstrip("/")] = (nonce, int(answer["expires"]))
        return True

    def record_enrolment(self, attester_url: str) -> None:
        self._db.put(_enrolled_key(attester_url), "1")

    def _directory(self, issuer_url: str) -> IssuerDirectory:
        found = self._directories.get(issuer_url)
        if found is None:
            try:
                response = self._http.get(issuer_url.rstrip("/") + ISSUER_DIRECTORY_PATH)
            except httpx.HTTPError as exc:
                raise TokenError(f"issuer directory unavailable: {type(exc).__name__}") from None
            if response.status_code != 200:
                raise TokenError(f"issuer directory unavailable: {response.status_code}")
            try:
                found = IssuerDirectory.decode(response.content)
            except DirectoryError as exc:
                raise TokenError(f"issuer directory unavailable: {type(exc).__name__}") from None
            self._directories[issuer_url] = found
        return found

    def available(self, task_id: TaskId, report_time: int, policy: TokenPolicy, role: Role) -> int:
        start = token_window_start(report_time, policy.window_seconds)
        with self._db.lock:
            row = self._db.conn.execute(
                "SELECT COUNT(*) FROM token WHERE device = ? "
                "AND task_id = ? AND window_start = ? AND role = ? AND used = 0",
                (self._db.device, task_id.to_b64url(), start, int(role)),
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
        key = self._pinned_key(policy, now, key_ids)
        challenge = token_challenge(task_id, report_time, policy, role)
        request, state = create_token_request(challenge, key)
        body = request.encode()
        response = self._signed_post(attester_url, body, MEDIA_TOKEN_REQUEST, now)
        if response.status_code != 200:
            raise TokenError(f"token request refused: {response.status_code}")
        try:
            token = finalize_token(state, response.content)
        except ValueError as exc:
            raise TokenError(f"invalid token response: {type(exc).__name__}") from None
        with self._db.transaction() as conn:
            self.store(conn, task_id, report_time, policy, [(role, token)])

    def request_batch(
        self,
        task_id: TaskId,
        report_time: int,
        policy: TokenPolicy,
        roles: tuple[Role, ...],
        attester_url: str,
        now: int,
        key_ids: tuple[str, ...] = (),
    ) -> list[tuple[Role, Token]]:
        """A token for each of `roles` that the issuer granted, in one round trip: one batched
        request (`shared.privacypass.batch`) of independently blinded TokenRequests, one nonce
        and one signature. Nothing is stored: the caller stores them (`store`)."""
        key = self._pinned_key(policy, now, key_ids)
        pairs = [
            create_token_request(token_challenge(task_id, report_time, policy, role), key)
            for role in roles
        ]
        body = BatchTokenRequest(tuple(request for request, _ in pairs)).encode()
        response = self._signed_post(attester_url, body, MEDIA_BATCH_REQUEST, now)
        if response.status_code not in (200, 206):
            raise TokenError(f"batch token request refused: {response.status_code}")
        try:
            answers = BatchTokenResponse.decode(response.content).responses
            if len(answers) != len(pairs):
                raise ValueError("one response per request")
            return [
                (role, finalize_token(state, answer))
                for role, (_, state), answer in zip(roles, pairs, answers, strict=True)
                if answer is not None
            ]
        except ValueError as exc:
            raise TokenError(f"invalid batch token response: {type(exc).__name__}") from None

    def _pinned_key(self, policy: TokenPolicy, now: int, key_ids: tuple[str, ...]) -> TokenKey:
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
        return keys[0].token_key_object()

    def _signed_post(self, attester_url: str, body: bytes, media: str, now: int) -> HttpResponse:
        """`body` to the attester under a fresh nonce, signed with the device key: the
        enrollment's nonce if still unused and unexpired, else one from a challenge (and again
        from a challenge if the attester refused the enrollment's, e.g. after a restart)."""
        assert self._identity is not None  # _pinned_key
        base = attester_url.rstrip("/")
        device_id = b64url_encode(self._identity.device_id)
        first = self._first_nonce.pop(base, None)
        if first is not None and first[1] > now:
            response = self._post_signed(base, device_id, first[0], body, media)
            if response.status_code != 401:
                return response
        answer = self._post(base + ATTESTER_CHALLENGE_PATH, json={"device_id": device_id})
        if answer.status_code != 200:
            raise TokenError(f"attester challenge refused: {answer.status_code}")
        nonce = b64url_decode(answer.json()["nonce"])
        return self._post_signed(base, device_id, nonce, body, media)

    def _post_signed(
        self, base: str, device_id: str, nonce: bytes, body: bytes, media: str
    ) -> HttpResponse:
        assert self._identity is not None  # _signed_post
        return self._post(
            base + ATTESTER_TOKEN_REQUEST_PATH,
            content=body,
            headers={
                "Content-Type": media,
                DEVICE_ID_HEADER: device_id,
                NONCE_HEADER: b64url_encode(nonce),
                SIGNATURE_HEADER: b64url_encode(self._identity.sign(nonce, body)),
            },
        )

    def store(
        self,
        conn: sqlite3.Connection,
        task_id: TaskId,
        report_time: int,
        policy: TokenPolicy,
        tokens: list[tuple[Role, Token]],
        *,
        used: bool = False,
    ) -> None:
        """Record obtained tokens on `conn` (the caller's transaction): cached for a later
        `take`, or `used` when the caller attaches them to a report in the same transaction
        (every token the device holds stays on record either way)."""
        start = token_window_start(report_time, policy.window_seconds)
        conn.executemany(
            "INSERT INTO token (device, task_id, window_start, role, token, used) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            [
                (self._db.device, task_id.to_b64url(), start, int(role), token.encode(), int(used))
                for role, token in tokens
            ],
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
            "SELECT id, token FROM token WHERE device = ? "
            "AND task_id = ? AND window_start = ? AND role = ? AND used = 0 "
            "ORDER BY id LIMIT 1",
            (self._db.device, task_id.to_b64url(), start, int(role)),
        ).fetchone()
        if row is None:
            return None
        conn.execute("UPDATE token SET used = 1 WHERE id = ?", (row[0],))
        return Token.decode(row[1])


def _enrolled_key(attester_url: str) -> str:
    return f"enrolled:{attester_url}"
