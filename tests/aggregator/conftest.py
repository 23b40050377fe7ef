"""Fixtures for the aggregator tests: every store-backed test runs on SQLite and PostgreSQL.

Each PostgreSQL test gets a database of its own, created for it and dropped afterwards.
"""

from __future__ import annotations

import itertools
import secrets
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest

from services.common.clock import TestClock
from shared.privacypass.issuance import IssuerKey
from tests.aggregator.issuer import Issuer, make_issuer

PG_ADMIN_URL = "postgresql://postgres@127.0.0.1:5432/postgres"

DbFactory = Callable[[], str]


def _pg_available() -> bool:
    try:
        with psycopg.connect(PG_ADMIN_URL, connect_timeout=3):
            return True
    except psycopg.Error:
        return False


@pytest.fixture(params=["sqlite", "postgresql"])
def db_factory(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[DbFactory]:
    """Makes fresh, empty database URLs of the parametrized engine."""
    created: list[str] = []
    if request.param == "postgresql" and not _pg_available():
        pytest.fail("PostgreSQL is not reachable on 127.0.0.1:5432")

    def make() -> str:
        if request.param == "sqlite":
            return f"sqlite:///{tmp_path / f'{secrets.token_hex(4)}.db'}"
        name = f"sagg_test_{secrets.token_hex(6)}"
        with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        created.append(name)
        return f"postgresql://postgres@127.0.0.1:5432/{name}"

    yield make
    for name in created:
        with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@pytest.fixture
def db_url(db_factory: DbFactory) -> str:
    return db_factory()


@pytest.fixture
def clock() -> TestClock:
    # A multiple of every time precision the tests use, so bucket arithmetic is easy to follow.
    return TestClock(1_700_006_400)


@pytest.fixture(scope="session")
def issuer_keys() -> Callable[[], IssuerKey]:
    """Issuer keys drawn from a small pool made once (RSA generation is slow)."""
    pool = [IssuerKey.generate() for _ in range(3)]
    return itertools.cycle(pool).__next__


@pytest.fixture
def issuer(
    tmp_path: Path, clock: TestClock, issuer_keys: Callable[[], IssuerKey]
) -> Iterator[Issuer]:
    """An in-process token issuer on the test clock (its own SQLite store)."""
    yield from make_issuer(f"sqlite:///{tmp_path / 'issuer.db'}", clock, issuer_keys)
