"""Throwaway PostgreSQL databases for the store tests (the server on 127.0.0.1:5432, trust
auth; CI starts it; `SAGG_TEST_POSTGRES_SERVER` names another). Each test gets databases of
its own, dropped when it ends.

A test that needs PostgreSQL calls `require()`: without a server it is skipped on a laptop,
but fails under `CI=true`, where a missing server is a broken build, not a reason to pass."""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Protocol

import psycopg
import pytest

#: The server, without a database (`{SERVER}/{name}` is a database URL).
SERVER = os.environ.get("SAGG_TEST_POSTGRES_SERVER", "postgresql://postgres@127.0.0.1:5432")
ADMIN_URL = f"{SERVER}/postgres"
UNREACHABLE = f"PostgreSQL is not reachable at {SERVER}"


def available() -> bool:
    try:
        with psycopg.connect(ADMIN_URL, connect_timeout=3):
            return True
    except psycopg.Error:
        return False


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("true", "1", "yes")


def missing(reason: str, *, strict: bool = False) -> None:
    """What a test does when something it needs is missing: skip on a laptop, fail under
    `CI=true` (or always, if `strict`)."""
    if strict or in_ci():
        pytest.fail(f"{reason} (CI=true: tests that need it fail instead of skipping)")
    pytest.skip(reason)


def require(*, strict: bool = False) -> None:
    """Skips (fails under CI=true, or if `strict`) when the server does not answer."""
    if not available():
        missing(UNREACHABLE, strict=strict)


class Databases:
    """Makes fresh, empty databases; `drop_all` removes every one it made."""

    def __init__(self, prefix: str = "sagg_test") -> None:
        self._prefix = prefix
        self._created: list[str] = []

    def create(self, label: str = "") -> str:
        """A new database's URL (`label` only makes its name easier to read)."""
        name = f"{self._prefix}_{label + '_' if label else ''}{secrets.token_hex(6)}"
        with psycopg.connect(ADMIN_URL, autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        self._created.append(name)
        return f"{SERVER}/{name}"

    def drop_all(self) -> None:
        for name in self._created:
            with psycopg.connect(ADMIN_URL, autocommit=True) as conn:
                conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        self._created.clear()


@contextmanager
def throwaway(prefix: str = "sagg_test") -> Iterator[Databases]:
    databases = Databases(prefix)
    try:
        yield databases
    finally:
        databases.drop_all()


class UrlFactory(Protocol):
    def __call__(self, label: str = "") -> str: ...


@contextmanager
def engine_urls(
    engine: str, tmp_path: Path, prefix: str = "sagg_test", *, strict: bool = False
) -> Iterator[UrlFactory]:
    """Fresh, empty database URLs of `engine` ("sqlite", or "postgres"/"postgresql" on the test
    server, `require`d first, dropped afterwards)."""
    if engine != "sqlite":
        require(strict=strict)
    with throwaway(prefix) as made:

        def make(label: str = "") -> str:
            if engine == "sqlite":
                return f"sqlite:///{tmp_path / f'{label}{secrets.token_hex(4)}.db'}"
            return made.create(label)

        yield make
