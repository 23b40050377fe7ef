"""Store fixtures: every store test runs on SQLite and on a throwaway PostgreSQL database."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import pg


@pytest.fixture(params=["sqlite", "postgres"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'collector.sqlite3'}"
        return
    pg.require()
    with pg.throwaway("sagg_test_collector") as made:
        yield made.create()
