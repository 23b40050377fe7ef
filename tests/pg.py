"""Throwaway PostgreSQL databases for the store tests (the server on 127.0.0.1:5432, trust
auth; CI starts it). Each test gets databases of its own, dropped when it ends."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg

SERVER = "postgresql://postgres@127.0.0.1:5432"
ADMIN_URL = f"{SERVER}/postgres"
UNREACHABLE = "PostgreSQL is not reachable on 127.0.0.1:5432"


def available() -> bool:
    try:
        with psycopg.connect(ADMIN_URL, connect_timeout=3):
            return True
    except psycopg.Error:
        return False


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
