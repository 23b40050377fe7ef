"""Fixtures for the token issuer/attester tests.

Store-backed tests run on SQLite and PostgreSQL; each PostgreSQL test gets a database of its
own. Issuer keys come from a pool generated once per session (RSA generation dominates
otherwise); the pool is large enough for every rotation test.
"""

from __future__ import annotations

import itertools
import secrets
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from client_sdk.manufacturer import ManufacturerCA
from services.common.clock import Clock, TestClock
from services.common.db import Database
from services.token_issuer.keys import KeySchedule, KeyStore
from shared.privacypass.issuance import IssuerKey
from tests import pg

DbFactory = pg.UrlFactory
#: 2026-01-01T00:00:00Z.
T0 = 1_767_225_600


@pytest.fixture(params=["sqlite", "postgresql"])
def db_factory(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[DbFactory]:
    with pg.engine_urls(request.param, tmp_path, "sagg_test_pp", strict=True) as make:
        yield make


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / f'{secrets.token_hex(4)}.db'}"


@pytest.fixture
def clock() -> TestClock:
    return TestClock(T0)


@pytest.fixture(scope="session")
def key_pool() -> list[IssuerKey]:
    keys: list[IssuerKey] = []
    seen: set[int] = set()
    while len(keys) < 8:
        key = IssuerKey.generate()
        # Distinct truncated ids, so the pool never forces a redraw by accident.
        if key.token_key.truncated_token_key_id not in seen:
            seen.add(key.token_key.truncated_token_key_id)
            keys.append(key)
    return keys


@pytest.fixture
def pooled_keys(key_pool: list[IssuerKey]) -> Callable[[], IssuerKey]:
    return itertools.cycle(key_pool).__next__


@pytest.fixture
def store_factory(
    pooled_keys: Callable[[], IssuerKey],
) -> Callable[[Database, KeySchedule, Clock], KeyStore]:
    def make(db: Database, schedule: KeySchedule, clock: Clock) -> KeyStore:
        return KeyStore(db, schedule, clock, generate=pooled_keys)

    return make


@pytest.fixture(scope="session")
def manufacturer() -> ManufacturerCA:
    return ManufacturerCA.generate(now=T0)
