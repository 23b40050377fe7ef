"""The adversary tests' deployments run on SQLite and on PostgreSQL (each aggregator on a
database of its own, dropped afterwards); PostgreSQL runs are skipped when it is unreachable,
and fail under CI=true (`tests/pg.py`)."""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests import pg

#: role ("leader" / "helper") -> a fresh database URL.
DbFactory = Callable[[str], str]


@pytest.fixture(params=["sqlite", "postgresql"])
def databases(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[DbFactory]:
    if request.param == "postgresql":
        pg.require()
    with pg.throwaway("sagg_adv") as made:

        def make(role: str) -> str:
            if request.param == "sqlite":
                return f"sqlite:///{tmp_path / f'{role}-{secrets.token_hex(4)}.db'}"
            return made.create(role)

        yield make
