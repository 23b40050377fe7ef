"""Fixtures for the aggregator tests: every store-backed test runs on SQLite and PostgreSQL.

Each PostgreSQL test gets a database of its own, created for it and dropped afterwards.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from services.common.clock import TestClock
from shared.privacypass.issuance import IssuerKey
from tests import pg
from tests.aggregator.issuer import Issuer, make_issuer

DbFactory = pg.UrlFactory


@pytest.fixture(params=["sqlite", "postgresql"])
def db_factory(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[DbFactory]:
    """Makes fresh, empty database URLs of the parametrized engine."""
    with pg.engine_urls(request.param, tmp_path, strict=True) as make:
        yield make


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
