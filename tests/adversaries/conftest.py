"""The adversary tests' deployments run on SQLite and on PostgreSQL (each aggregator on a
database of its own, dropped afterwards); PostgreSQL runs are skipped when it is unreachable."""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest

PG_ADMIN_URL = "postgresql://postgres@127.0.0.1:5432/postgres"

#: role ("leader" / "helper") -> a fresh database URL.
DbFactory = Callable[[str], str]


@pytest.fixture(params=["sqlite", "postgresql"])
def databases(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[DbFactory]:
    created: list[str] = []
    if request.param == "postgresql":
        try:
            psycopg.connect(PG_ADMIN_URL, connect_timeout=3).close()
        except psycopg.Error:
            pytest.skip("PostgreSQL is not reachable on 127.0.0.1:5432")

    def make(role: str) -> str:
        if request.param == "sqlite":
            return f"sqlite:///{tmp_path / f'{role}-{secrets.token_hex(4)}.db'}"
        name = f"sagg_adv_{role}_{secrets.token_hex(6)}"
        with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        created.append(name)
        return f"postgresql://postgres@127.0.0.1:5432/{name}"

    yield make
    for name in created:
        with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
