"""The Attester role (RFC 9576 §3.5.1): who may get tokens, and how many.

It knows devices and nothing about tokens:

- **Enrollment**: a device presents the certificate its manufacturer CA issued for its key;
  the attester checks it against the CAs it trusts and records the key under
  ``device_id = SHA-256(SPKI)`` (`shared.privacypass.attestation.device_id_of`).
- **Authentication**: for each token request the device gets a single-use nonce and signs
  nonce, device id and the request body; the nonce is consumed with the request, so a
  captured request cannot be replayed.
- **Quota**: at most N tokens per device per time window. The check-and-increment is one
  serializable transaction (`services.common.db`), so threads or processes racing for one
  device cannot together exceed N. A request the issuer refuses gives its unit back.
- **Relay**: the TokenRequest body goes to the issuer unread; the attester never sees a
  TokenChallenge, a nonce of the client, or a token (RFC 9576 §4.4: the attester sees who,
  the issuer sees what, neither sees both).

The issuer is reached through an `IssuerChannel`: in process (joint model, RFC 9576 §4.2) or
over HTTP with a bearer secret (split model, §4.4).
"""

from __future__ import annotations

import secrets
import threading
from dataclasses import dataclass
from typing import Protocol

import httpx
from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from services.common.clock import Clock
from services.common.db import Database, Migration, Tx
from services.common.problems import HttpProblemError, InternalError
from services.token_issuer.devices import (
    NONCE_SIZE,
    DeviceAuthError,
    auth_message,
    load_device_public_key,
    validate_device_certificate,
    verify_device_signature,
)
from services.token_issuer.issuer import IssuerService
from shared.codec import DecodeError
from shared.privacypass.attestation import device_id_of
from shared.privacypass.batch import BatchTokenRequest, BatchTokenResponse
from shared.privacypass.issuance import IssuanceError
from shared.privacypass.messages import MEDIA_TOKEN_REQUEST, MEDIA_TOKEN_RESPONSE, TokenResponse

__all__ = [
    "MIGRATIONS",
    "AttesterCounts",
    "AttesterService",
    "DeviceAuthError",
    "HttpIssuerChannel",
    "IssuerChannel",
    "IssuerUnavailableError",
    "LocalIssuerChannel",
    "MAX_OUTSTANDING_NONCES",
    "QuotaExceededError",
]

MIGRATIONS = [
    Migration(
        2001,
        "attester devices, nonces, quotas",
        [
            "CREATE TABLE IF NOT EXISTS pp_attester_devices ("
            " device_id {blob} PRIMARY KEY,"
            " public_key {blob} NOT NULL,"
            " certificate {blob} NOT NULL,"
            " enrolled_at {bigint} NOT NULL)",
            "CREATE TABLE IF NOT EXISTS pp_attester_nonces ("
            " nonce {blob} PRIMARY KEY,"
            " device_id {blob} NOT NULL,"
            " expires {bigint} NOT NULL)",
            "CREATE INDEX IF NOT EXISTS pp_attester_nonces_expires ON pp_attester_nonces (expires)",
            "CREATE TABLE IF NOT EXISTS pp_attester_quota ("
            " device_id {blob} NOT NULL,"
            " period {bigint} NOT NULL,"
            " issued {bigint} NOT NULL,"
            " PRIMARY KEY (device_id, period))",
            "CREATE INDEX IF NOT EXISTS pp_attester_quota_period ON pp_attester_quota (period)",
        ],
    ),
    Migration(
        2002,
        "attester nonces by device",
        [
            "CREATE INDEX IF NOT EXISTS pp_attester_nonces_device"
            " ON pp_attester_nonces (device_id, expires)",
        ],
    ),
]


#: Outstanding (issued, unused, unexpired) nonces kept per device.
MAX_OUTSTANDING_NONCES = 16
_SWEEP_INTERVAL = 60


class QuotaExceededError(HttpProblemError):
    """The device has used its N tokens of this window: 429 with `Retry-After` (the request's
    doing, so a refusal, not an `InternalError`)."""

    def __init__(self, retry_after: int) -> None:
        super().__init__(429, "Token quota exceeded", retry_after=retry_after)
        self.retry_after = retry_after


class IssuerUnavailableError(InternalError):
    """The issuer could not be reached or answered unexpectedly (HTTP 502)."""


class IssuerChannel(Protocol):
    def issue(self, body: bytes) -> bytes:
        """The encoded TokenResponse for an encoded TokenRequest; `IssuanceError` when the
        issuer refuses it (422), `IssuerUnavailableError` on any other failure."""
        ...


class LocalIssuerChannel:
    """Joint model: the issuer in the same process (RFC 9576 §4.2)."""

    def __init__(self, issuer: IssuerService) -> None:
        self._issuer = issuer

    def issue(self, body: bytes) -> bytes:
        return self._issuer.issue(body)


class HttpIssuerChannel:
    """Split model: ``POST {issuer_url}/token-request`` with the shared bearer secret."""

    def __init__(self, client: httpx.Client, issuer_url: str, secret: str) -> None:
        self._client = client
        self._url = issuer_url.rstrip("/") + "/token-request"
        self._secret = secret

    def issue(self, body: bytes) -> bytes:
        try:
            response = self._client.post(
                self._url,
                content=body,
                headers={
                    "Content-Type": MEDIA_TOKEN_REQUEST,
                    "Accept": MEDIA_TOKEN_RESPONSE,
                    "Authorization": f"Bearer {self._secret}",
                },
            )
        except httpx.HTTPError as exc:
            raise IssuerUnavailableError(type(exc).__name__) from None
        if response.status_code == 422:
            raise IssuanceError("issuer refused the token request", "issuer_refused")
        if (
            response.status_code != 200
            or response.headers.get("content-type") != MEDIA_TOKEN_RESPONSE
        ):
            raise IssuerUnavailableError(f"issuer answered {response.status_code}")
        return response.content


@dataclass(frozen=True, slots=True)
class AttesterCounts:
    devices: int
    #: Tokens charged (refunds deducted) in the current quota window, over all devices.
    window_tokens: int


@dataclass(frozen=True, slots=True)
class Enrollment:
    device_id: bytes
    created: bool


@dataclass(frozen=True, slots=True)
class AttesterChallenge:
    nonce: bytes
    expires: int


class AttesterService:
    def __init__(
        self,
        db: Database,
        clock: Clock,
        trust_anchors: list[x509.Certificate],
        channel: IssuerChannel,
        *,
        quota_tokens: int,
        quota_window_seconds: int,
        nonce_ttl_seconds: int,
    ) -> None:
        if quota_tokens < 1 or quota_window_seconds < 1 or nonce_ttl_seconds < 1:
            raise ValueError("quota, window and nonce lifetime must be positive")
        self._db = db
        self._clock = clock
        self._anchors = list(trust_anchors)
        self._channel = channel
        self._quota = quota_tokens
        self._window = quota_window_seconds
        self._nonce_ttl = nonce_ttl_seconds
        self._sweep_lock = threading.Lock()
        self._last_sweep = -_SWEEP_INTERVAL

    def migrate(self) -> None:
        self._db.migrate(MIGRATIONS)

    # --- enrollment -----------------------------------------------------------------------

    def enroll(self, certificate_pem: bytes) -> Enrollment:
        """Record the device certified by `certificate_pem`; `DeviceAuthError` if untrusted."""
        return self._enroll(certificate_pem, first_nonce=False)[0]

    def enroll_with_challenge(self, certificate_pem: bytes) -> tuple[Enrollment, AttesterChallenge]:
        """`enroll`, and a first nonce for the device's first token request (what the
        enrolment answer carries), in the same transaction."""
        enrollment, first = self._enroll(certificate_pem, first_nonce=True)
        assert first is not None
        return enrollment, first

    def _enroll(
        self, certificate_pem: bytes, *, first_nonce: bool
    ) -> tuple[Enrollment, AttesterChallenge | None]:
        try:
            cert = x509.load_pem_x509_certificate(certificate_pem)
        except ValueError:
            raise DeviceAuthError("not a PEM certificate", "not_pem") from None
        public_key = validate_device_certificate(cert, self._anchors, self._clock.now())
        device_id = device_id_of(public_key)
        spki = public_key.public_bytes(Encoding.DER, PublicFormat.SubjectPublicKeyInfo)
        der = cert.public_bytes(Encoding.DER)
        now = self._clock.now()

        nonce = secrets.token_bytes(NONCE_SIZE)

        def insert(tx: Tx) -> bool:
            known = tx.query_one(
                "SELECT device_id FROM pp_attester_devices WHERE device_id = :d", {"d": device_id}
            )
            if known:
                tx.execute(
                    "UPDATE pp_attester_devices SET certificate = :c WHERE device_id = :d",
                    {"c": der, "d": device_id},
                )
            else:
                tx.execute(
                    "INSERT INTO pp_attester_devices (device_id, public_key, certificate,"
                    " enrolled_at) VALUES (:d, :k, :c, :t)",
                    {"d": device_id, "k": spki, "c": der, "t": now},
                )
            if first_nonce:
                # A device enrolled by this transaction has no nonces to expire or count.
                self._add_nonce(tx, device_id, nonce, now, fresh=not known)
            return not known

        if first_nonce:
            self._housekeeping(now, now // self._window)
        # One transaction for both: a store write costs more than the rest of an enrolment.
        # Not logged: a line per device of a population cost the issuer about 0.1 ms of CPU a
        # device, and sagg_attester_enrolments_total counts enrolments.
        created = self._db.run("attester.enroll", insert)
        first = AttesterChallenge(nonce, now + self._nonce_ttl) if first_nonce else None
        return Enrollment(device_id, created), first

    # --- authentication ---------------------------------------------------------------------

    def challenge(self, device_id: bytes) -> AttesterChallenge:
        """A fresh single-use nonce for an enrolled device."""
        now = self._clock.now()
        nonce = secrets.token_bytes(NONCE_SIZE)
        expires = now + self._nonce_ttl
        period = now // self._window

        def create(tx: Tx) -> bool:
            if not tx.query_one(
                "SELECT device_id FROM pp_attester_devices WHERE device_id = :d", {"d": device_id}
            ):
                return False
            self._add_nonce(tx, device_id, nonce, now)
            return True

        self._housekeeping(now, period)
        if not self._db.run("attester.challenge", create):
            raise DeviceAuthError("unknown device", "unknown_device")
        return AttesterChallenge(nonce, expires)

    def _add_nonce(
        self, tx: Tx, device_id: bytes, nonce: bytes, now: int, *, fresh: bool = False
    ) -> None:
        """Record a fresh nonce of an enrolled device, expiring `nonce_ttl_seconds` after
        `now`, within the per-device bound (`fresh`: the device was enrolled in `tx`, so it
        has no nonce yet)."""
        if fresh:
            self._insert_nonce(tx, device_id, nonce, now)
            return
        # Only this device's rows: a global sweep here would make every pair of concurrent
        # challenges conflict under SERIALIZABLE.
        tx.execute(
            "DELETE FROM pp_attester_nonces WHERE device_id = :d AND expires <= :now",
            {"d": device_id, "now": now},
        )
        row = tx.query_one(
            "SELECT COUNT(*) AS n FROM pp_attester_nonces WHERE device_id = :d",
            {"d": device_id},
        )
        excess = (int(row["n"]) if row else 0) - (MAX_OUTSTANDING_NONCES - 1)
        if excess > 0:
            # Bounded storage per device: the oldest outstanding nonces give way.
            tx.execute(
                "DELETE FROM pp_attester_nonces WHERE nonce IN (SELECT nonce FROM"
                " pp_attester_nonces WHERE device_id = :d ORDER BY expires LIMIT :k)",
                {"d": device_id, "k": excess},
            )
        self._insert_nonce(tx, device_id, nonce, now)

    def _insert_nonce(self, tx: Tx, device_id: bytes, nonce: bytes, now: int) -> None:
        tx.execute(
            "INSERT INTO pp_attester_nonces (nonce, device_id, expires) VALUES (:n, :d, :e)",
            {"n": nonce, "d": device_id, "e": now + self._nonce_ttl},
        )

    def _housekeeping(self, now: int, period: int) -> None:
        """Drop expired nonces and finished quota windows, at most once a minute per process."""
        with self._sweep_lock:
            if now - self._last_sweep < _SWEEP_INTERVAL:
                return
            self._last_sweep = now

        def sweep(tx: Tx) -> None:
            tx.execute("DELETE FROM pp_attester_nonces WHERE expires <= :now", {"now": now})
            tx.execute("DELETE FROM pp_attester_quota WHERE period < :p", {"p": period})

        self._db.run("attester.sweep", sweep)

    # --- token requests ---------------------------------------------------------------------

    def token_request(self, device_id: bytes, nonce: bytes, signature: bytes, body: bytes) -> bytes:
        """Authenticate, charge the quota, relay `body` to the issuer; the TokenResponse.

        Raises `DeviceAuthError` (401), `QuotaExceededError` (429), `IssuanceError` (422, from
        the issuer) or `IssuerUnavailableError` (502).
        """
        period = self._authenticate_and_charge(device_id, nonce, signature, body, 1)
        try:
            return self._channel.issue(body)
        except (IssuanceError, IssuerUnavailableError):
            # No token was issued: the unit goes back to the device.
            self._refund(device_id, period, 1)
            raise

    def batch_token_request(
        self, device_id: bytes, nonce: bytes, signature: bytes, body: bytes
    ) -> BatchTokenResponse:
        """A GenericBatchTokenRequest (`shared.privacypass.batch`): one nonce and signature
        over the whole body, the quota charged for every request at once (all or none), each
        request relayed to the issuer unread as its own TokenRequest; a refused one is absent
        from the answer and its unit goes back.

        Raises `IssuanceError` for a malformed batch (before anything is charged) and as
        `token_request` otherwise; `IssuerUnavailableError` only when nothing was issued.
        """
        try:
            batch = BatchTokenRequest.decode(body)
        except DecodeError as exc:
            raise IssuanceError(str(exc), "malformed") from None
        count = len(batch.requests)
        period = self._authenticate_and_charge(device_id, nonce, signature, body, count)
        responses: list[TokenResponse | None] = []
        unavailable = False
        for request in batch.requests:
            try:
                responses.append(TokenResponse.decode(self._channel.issue(request.encode())))
            except IssuanceError:
                responses.append(None)
            except IssuerUnavailableError:
                unavailable = True
                responses.append(None)
        refused = sum(r is None for r in responses)
        if refused:
            self._refund(device_id, period, refused)
        if refused == count:
            if unavailable:
                raise IssuerUnavailableError("no token of the batch was issued")
            raise IssuanceError("issuer refused every request of the batch", "issuer_refused")
        return BatchTokenResponse(tuple(responses))

    def _authenticate_and_charge(
        self, device_id: bytes, nonce: bytes, signature: bytes, body: bytes, units: int
    ) -> int:
        """Check the device's signature over nonce and body, consume the nonce and charge
        `units` tokens of the quota, in one transaction (a refused signature changes nothing);
        the quota period charged."""
        message = auth_message(device_id, nonce, body)
        now = self._clock.now()
        period = now // self._window

        def charge(tx: Tx) -> str:
            row = tx.query_one(
                "SELECT public_key FROM pp_attester_devices WHERE device_id = :d",
                {"d": device_id},
            )
            if row is None:
                raise DeviceAuthError("unknown device", "unknown_device")
            public_key = load_device_public_key(bytes(row["public_key"]))
            verify_device_signature(public_key, message, signature)
            consumed = tx.execute(
                "DELETE FROM pp_attester_nonces WHERE nonce = :n AND device_id = :d"
                " AND expires > :now",
                {"n": nonce, "d": device_id, "now": now},
            )
            if consumed != 1:
                return "replay"
            tx.execute(
                "INSERT INTO pp_attester_quota (device_id, period, issued) VALUES (:d, :p, 0)"
                " ON CONFLICT (device_id, period) DO NOTHING",
                {"d": device_id, "p": period},
            )
            charged = tx.execute(
                "UPDATE pp_attester_quota SET issued = issued + :k"
                " WHERE device_id = :d AND period = :p AND issued + :k <= :n",
                {"d": device_id, "p": period, "n": self._quota, "k": units},
            )
            # The nonce stays consumed either way: this transaction commits in both cases.
            return "ok" if charged == 1 else "over"

        outcome = self._db.run("attester.charge", charge)
        if outcome == "replay":
            raise DeviceAuthError("unknown, expired or already used nonce", "bad_nonce")
        if outcome == "over":
            raise QuotaExceededError(retry_after=(period + 1) * self._window - now)
        return period

    def _refund(self, device_id: bytes, period: int, units: int) -> None:
        self._db.run(
            "attester.refund",
            lambda tx: tx.execute(
                "UPDATE pp_attester_quota"
                " SET issued = CASE WHEN issued > :k THEN issued - :k ELSE 0 END"
                " WHERE device_id = :d AND period = :p",
                {"d": device_id, "p": period, "k": units},
            ),
        )

    def counts(self) -> AttesterCounts:
        """Totals for the metrics (no per-device figure leaves this method)."""
        period = self._clock.now() // self._window

        def read(tx: Tx) -> AttesterCounts:
            devices = tx.query_one("SELECT COUNT(*) AS n FROM pp_attester_devices")
            tokens = tx.query_one(
                "SELECT SUM(issued) AS n FROM pp_attester_quota WHERE period = :p", {"p": period}
            )
            return AttesterCounts(
                int(devices["n"]) if devices else 0,
                int(tokens["n"] or 0) if tokens else 0,
            )

        return self._db.run("attester.counts", read)

    def issued(self, device_id: bytes) -> int:
        """Tokens charged to the device in the current window."""
        period = self._clock.now() // self._window
        row = self._db.run(
            "attester.issued",
            lambda tx: tx.query_one(
                "SELECT issued FROM pp_attester_quota WHERE device_id = :d AND period = :p",
                {"d": device_id, "p": period},
            ),
        )
        return int(row["issued"]) if row else 0
