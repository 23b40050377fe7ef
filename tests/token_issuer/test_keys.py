"""The issuer key store on SQLite and PostgreSQL: shared schedule, collision avoidance."""

from __future__ import annotations

import copy
from collections.abc import Callable

from services.common.clock import TestClock
from services.common.db import Database
from services.token_issuer.keys import KeySchedule, KeyStore
from shared.privacypass.issuance import IssuerKey
from tests.token_issuer.conftest import DbFactory

SCHEDULE = KeySchedule(1000, 100, 300)


def test_processes_share_one_schedule(
    db_factory: DbFactory, clock: TestClock, key_pool: list[IssuerKey]
) -> None:
    """Two issuer processes on one database end up with the same keys, whichever generates."""
    url = db_factory()
    db_a, db_b = Database.open(url), Database.open(url)
    try:
        a = KeyStore(db_a, SCHEDULE, clock, generate=iter(key_pool[:4]).__next__)
        b = KeyStore(db_b, SCHEDULE, clock, generate=iter(key_pool[4:]).__next__)
        a.migrate()
        b.migrate()
        ring_a = a.ring()
        ring_b = b.ring()
        assert [k.key.token_key_id for k in ring_a.keys] == [key_pool[0].token_key_id]
        assert [k.key.token_key_id for k in ring_b.keys] == [key_pool[0].token_key_id]
        # The next epoch's key is created by b this time; a picks it up from the store.
        clock.advance(SCHEDULE.publish_at(SCHEDULE.epoch_at(clock.now()) + 1) - clock.now())
        ring_b = b.ring()
        ring_a = a.ring()
        assert [k.key.token_key_id for k in ring_b.keys] == [
            key_pool[0].token_key_id,
            key_pool[4].token_key_id,
        ]
        assert [k.key.token_key_id for k in ring_a.keys] == [
            k.key.token_key_id for k in ring_b.keys
        ]
    finally:
        db_a.close()
        db_b.close()


def test_truncated_key_id_collisions_are_redrawn(
    db_factory: DbFactory, clock: TestClock, key_pool: list[IssuerKey]
) -> None:
    """A new key whose last key-id byte equals a live key's is discarded (RFC 9578 §6.5)."""
    first = key_pool[0]

    # A distinct RSA key whose token_key_id is faked to end in `first`'s last byte.
    token_key = copy.copy(key_pool[1].token_key)
    fake_id = key_pool[1].token_key_id[:-1] + first.token_key_id[-1:]
    object.__setattr__(token_key, "token_key_id", fake_id)
    clash = IssuerKey(key_pool[1].private_key)
    clash.token_key = token_key
    draws: list[IssuerKey] = [first, clash, key_pool[2]]
    calls: list[IssuerKey] = []

    def generate() -> IssuerKey:
        calls.append(draws[len(calls)])
        return calls[-1]

    db = Database.open(db_factory())
    try:
        store = KeyStore(db, SCHEDULE, clock, generate=generate)
        store.migrate()
        store.ring()
        clock.advance(SCHEDULE.publish_at(SCHEDULE.epoch_at(clock.now()) + 1) - clock.now())
        ring = store.ring()
        assert len(calls) == 3
        ids = [k.key.token_key.truncated_token_key_id for k in ring.keys]
        assert len(set(ids)) == 2
        assert ring.keys[1].key.token_key_id == key_pool[2].token_key_id
    finally:
        db.close()


def test_ring_is_cached_until_the_schedule_moves(
    sqlite_url: str, clock: TestClock, pooled_keys: Callable[[], IssuerKey]
) -> None:
    db = Database.open(sqlite_url)
    try:
        store = KeyStore(db, SCHEDULE, clock, generate=pooled_keys)
        store.migrate()
        ring = store.ring()
        assert store.ring() is ring
        clock.advance(ring.valid_until - clock.now() - 1)
        assert store.ring() is ring
        clock.advance(1)
        assert store.ring() is not ring
    finally:
        db.close()
