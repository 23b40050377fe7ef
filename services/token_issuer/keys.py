"""The issuer's token keys: one per epoch, published ahead, verifying until they expire.

Key schedule (RFC 9578 §4 `not-before`, RFC 9576 §3.5.2 rotation), with ``L`` the epoch length:

- the key of epoch ``e`` has ``not-before = e·L``; it is *published* (listed in the directory,
  accepted for issuance) from ``e·L - publish_ahead``, so clients and origins learn it before
  anyone uses it;
- it signs token requests until ``(e+1)·L + publish_ahead`` (clients holding a directory
  fetched just before rotation still get tokens);
- it stays in the directory, so origins keep accepting its tokens, until it *expires* at
  ``(e+1)·L + grace``.

Keys are generated lazily by whichever process first needs them and stored through
`services.common.db`, so several issuer processes share one schedule: the epoch is the primary
key, a concurrent second insert loses and re-reads the winner's key. A new key is redrawn
while its truncated key id (the byte a TokenRequest names it by, RFC 9578 §6.1) collides with
that of another unexpired key, as RFC 9578 §6.5 recommends.

Private keys are stored as PKCS#8 DER without encryption: the database is the issuer's secret
store in this simulation.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from services.common.clock import Clock
from services.common.crypter import Crypter
from services.common.db import Database, Migration, Tx
from shared.privacypass import rsabssa
from shared.privacypass.directory import DirectoryKey, IssuerDirectory
from shared.privacypass.issuance import IssuerKey
from shared.privacypass.messages import TOKEN_TYPE_BLIND_RSA

__all__ = ["MIGRATIONS", "KeySchedule", "KeyRing", "KeyStore", "ScheduledKey"]

log = logging.getLogger(__name__)

# Version numbers in the 1000s: the issuer may share a database with other components, and
# `schema_migrations` is one table for all of them.
MIGRATIONS = [
    Migration(
        1001,
        "issuer keys",
        [
            "CREATE TABLE IF NOT EXISTS pp_issuer_keys ("
            " epoch {bigint} PRIMARY KEY,"
            " token_key_id {blob} NOT NULL UNIQUE,"
            " truncated_id {bigint} NOT NULL,"
            " not_before {bigint} NOT NULL,"
            " publish_at {bigint} NOT NULL,"
            " issue_until {bigint} NOT NULL,"
            " expires {bigint} NOT NULL,"
            " private_key {blob} NOT NULL)",
        ],
    )
]


@dataclass(frozen=True, slots=True)
class KeySchedule:
    """Epoch arithmetic; all times in seconds since the UNIX epoch."""

    epoch_seconds: int
    publish_ahead: int
    grace: int

    def __post_init__(self) -> None:
        if self.epoch_seconds <= 0 or self.publish_ahead < 0 or self.grace < 0:
            raise ValueError("epoch length must be positive, publish-ahead and grace >= 0")
        if self.publish_ahead >= self.epoch_seconds:
            raise ValueError("keys cannot be published more than one epoch ahead")
        if self.grace < self.publish_ahead:
            raise ValueError("keys must verify at least as long as they issue")

    def epoch_at(self, now: int) -> int:
        return now // self.epoch_seconds

    def not_before(self, epoch: int) -> int:
        return epoch * self.epoch_seconds

    def publish_at(self, epoch: int) -> int:
        return self.not_before(epoch) - self.publish_ahead

    def issue_until(self, epoch: int) -> int:
        return self.not_before(epoch + 1) + self.publish_ahead

    def expires(self, epoch: int) -> int:
        return self.not_before(epoch + 1) + self.grace

    def epochs_needed(self, now: int) -> list[int]:
        """The epochs whose key must exist at `now`: the current one, and the next once it is
        due for publication."""
        current = self.epoch_at(now)
        return [current, current + 1] if now >= self.publish_at(current + 1) else [current]


@dataclass(frozen=True, slots=True)
class ScheduledKey:
    epoch: int
    key: IssuerKey
    not_before: int
    publish_at: int
    issue_until: int
    expires: int

    def published(self, now: int) -> bool:
        return self.publish_at <= now < self.expires

    def issuing(self, now: int) -> bool:
        return self.publish_at <= now < self.issue_until


@dataclass(frozen=True, slots=True)
class KeyRing:
    """The keys in force at one moment, and until when that stays true."""

    keys: Sequence[ScheduledKey]  # published keys, in directory preference order
    valid_until: int

    def for_issuance(self, truncated_id: int, now: int) -> ScheduledKey | None:
        """The key a TokenRequest naming `truncated_id` is signed with at `now`, if any."""
        for k in self.keys:
            if k.issuing(now) and k.key.token_key.truncated_token_key_id == truncated_id:
                return k
        return None

    def directory(self, request_uri: str) -> IssuerDirectory:
        return IssuerDirectory(
            request_uri,
            tuple(
                DirectoryKey(TOKEN_TYPE_BLIND_RSA, k.key.token_key.spki, k.not_before)
                for k in self.keys
            ),
        )


def _order(keys: list[ScheduledKey], now: int) -> list[ScheduledKey]:
    """Directory order (RFC 9578 §4: clients take the first key already in force): the newest
    key in force, then keys not yet in force, then older keys kept for verification."""
    in_force = sorted((k for k in keys if k.not_before <= now), key=lambda k: -k.epoch)
    upcoming = sorted((k for k in keys if k.not_before > now), key=lambda k: k.epoch)
    return in_force[:1] + upcoming + in_force[1:]


def _serialize(key: IssuerKey) -> bytes:
    return key.private_key.to_cryptography().private_bytes(
        serialization.Encoding.DER,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _row(epoch: object) -> bytes:
    """The associated-data row key of an issuer key: its epoch."""
    return int(str(epoch)).to_bytes(8, "big", signed=True)


def _deserialize(der: bytes) -> IssuerKey:
    sk = serialization.load_der_private_key(der, None)
    if not isinstance(sk, rsa.RSAPrivateKey):
        raise ValueError("stored issuer key is not RSA")
    return IssuerKey(rsabssa.RsaPrivateKey.from_cryptography(sk))


class KeyStore:
    """Creates, stores and serves the issuer's keys; thread-safe."""

    def __init__(
        self,
        db: Database,
        schedule: KeySchedule,
        clock: Clock,
        *,
        generate: Callable[[], IssuerKey] = IssuerKey.generate,
        crypter: Crypter | None = None,
    ) -> None:
        self._db = db
        #: Seals the private keys at rest, each bound to its epoch.
        self._crypter = crypter or Crypter()
        self._schedule = schedule
        self._clock = clock
        self._generate = generate
        self._lock = threading.Lock()
        self._ring: KeyRing | None = None
        # Parsing a stored key re-checks its primes: do it once per key, not per refresh.
        self._parsed: dict[bytes, IssuerKey] = {}

    def migrate(self) -> None:
        self._db.migrate(MIGRATIONS)

    def ring(self) -> KeyRing:
        """The current key ring, refreshed (and keys created) when the schedule moves on."""
        now = self._clock.now()
        ring = self._ring
        if ring is not None and now < ring.valid_until:
            return ring
        with self._lock:
            ring = self._ring
            if ring is None or now >= ring.valid_until:
                ring = self._refresh(now)
                self._ring = ring
            return ring

    def _refresh(self, now: int) -> KeyRing:
        for epoch in self._schedule.epochs_needed(now):
            self._ensure(epoch, now)
        rows = self._db.run(
            "issuer.load_keys",
            lambda tx: tx.query(
                "SELECT epoch, token_key_id, not_before, publish_at, issue_until, expires,"
                " private_key FROM pp_issuer_keys WHERE publish_at <= :now AND expires > :now",
                {"now": now},
            ),
        )
        keys = []
        for row in rows:
            key_id = bytes(row["token_key_id"])
            parsed = self._parsed.get(key_id)
            if parsed is None:
                sealed = bytes(row["private_key"])
                where = ("pp_issuer_keys", "private_key", _row(row["epoch"]))
                parsed = _deserialize(self._crypter.open(*where, sealed))
                self._parsed[key_id] = parsed
            keys.append(
                ScheduledKey(
                    int(row["epoch"]),
                    parsed,
                    int(row["not_before"]),
                    int(row["publish_at"]),
                    int(row["issue_until"]),
                    int(row["expires"]),
                )
            )
        # The ring stays valid until the next moment any key's status changes.
        s = self._schedule
        changes = [s.publish_at(s.epoch_at(now) + 1), s.not_before(s.epoch_at(now) + 1)]
        for k in keys:
            changes += [k.not_before, k.issue_until, k.expires]
        valid_until = min(t for t in changes if t > now)
        return KeyRing(_order(keys, now), valid_until)

    def _ensure(self, epoch: int, now: int) -> None:
        exists = self._db.run(
            "issuer.key_exists",
            lambda tx: tx.query_one(
                "SELECT epoch FROM pp_issuer_keys WHERE epoch = :e", {"e": epoch}
            ),
        )
        if exists:
            return
        s = self._schedule
        while True:
            # RSA key generation takes ~0.1 s: outside any transaction.
            key = self._generate()

            def insert(tx: Tx, key: IssuerKey = key) -> str:
                if tx.query_one("SELECT epoch FROM pp_issuer_keys WHERE epoch = :e", {"e": epoch}):
                    return "exists"
                clash = tx.query_one(
                    "SELECT epoch FROM pp_issuer_keys WHERE truncated_id = :t AND expires > :now",
                    {"t": key.token_key.truncated_token_key_id, "now": now},
                )
                if clash:
                    return "clash"
                tx.execute(
                    "INSERT INTO pp_issuer_keys (epoch, token_key_id, truncated_id, not_before,"
                    " publish_at, issue_until, expires, private_key) VALUES (:e, :id, :t, :nb,"
                    " :pub, :iu, :exp, :sk)",
                    {
                        "e": epoch,
                        "id": key.token_key_id,
                        "t": key.token_key.truncated_token_key_id,
                        "nb": s.not_before(epoch),
                        "pub": s.publish_at(epoch),
                        "iu": s.issue_until(epoch),
                        "exp": s.expires(epoch),
                        "sk": self._crypter.seal(
                            "pp_issuer_keys", "private_key", _row(epoch), _serialize(key)
                        ),
                    },
                )
                return "inserted"

            outcome = self._db.run("issuer.insert_key", insert)
            if outcome != "clash":
                if outcome == "inserted":
                    log.info("issuer key for epoch %d: %s", epoch, key.token_key_id.hex())
                return
