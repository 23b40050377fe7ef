"""The adversary tests' deployments run on SQLite and on PostgreSQL (each aggregator on a
database of its own, dropped afterwards); PostgreSQL runs are skipped when it is unreachable,
and fail under CI=true (`tests/pg.py`)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import pg

#: role ("leader" / "helper") -> a fresh database URL.
DbFactory = pg.UrlFactory


@pytest.fixture(params=["sqlite", "postgresql"])
def databases(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[DbFactory]:
    with pg.engine_urls(request.param, tmp_path, "sagg_adv") as make:
        yield make
