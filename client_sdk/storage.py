"""The device's durable state: one SQLite database per device (or in memory for simulations).

Every piece of state whose consistency matters for privacy (budgets, pending uploads, the audit
log, the last accepted log head, cached tokens) lives in the same database, so that one SQLite
transaction can change several of them atomically (000 §4.3: budget is consumed *before* the
query runs; here, together with the record of the report that will leave the device).

Transactions are ``BEGIN IMMEDIATE``: the write lock is taken up front, so two connections to
the same file (two threads, or a restarted process racing an old one) serialize their
check-then-consume sequences instead of both reading the same "remaining budget".
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["StateDb"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS kv (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS analysis_budget (
    analysis_id TEXT PRIMARY KEY, eps_used REAL NOT NULL, reports_used INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS field_budget (
    field TEXT PRIMARY KEY, eps_used REAL NOT NULL, reports_used INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS pending_upload (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    recipe_id TEXT NOT NULL, version INTEGER NOT NULL, task_id TEXT NOT NULL,
    measurement TEXT NOT NULL, donation_time INTEGER NOT NULL, token_fetch_at INTEGER NOT NULL,
    report_id TEXT, report BLOB, token BLOB, attempts INTEGER NOT NULL DEFAULT 0,
    state TEXT NOT NULL DEFAULT 'pending', helper_token BLOB);
CREATE INDEX IF NOT EXISTS pending_due ON pending_upload (state, donation_time);
CREATE TABLE IF NOT EXISTS recipe_cache (
    recipe_id TEXT NOT NULL, version INTEGER NOT NULL, canonical BLOB NOT NULL,
    PRIMARY KEY (recipe_id, version));
CREATE TABLE IF NOT EXISTS token (
    id INTEGER PRIMARY KEY AUTOINCREMENT, task_id TEXT NOT NULL, window_start INTEGER NOT NULL,
    token BLOB NOT NULL, used INTEGER NOT NULL DEFAULT 0, role INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS token_free_by_role ON token (task_id, window_start, role, used);
CREATE TABLE IF NOT EXISTS audit (
    id INTEGER PRIMARY KEY AUTOINCREMENT, time INTEGER NOT NULL, kind TEXT NOT NULL,
    recipe_id TEXT, version INTEGER, task_id TEXT, report_id TEXT, detail TEXT NOT NULL);
"""


def _columns(conn: sqlite3.Connection, table: str) -> set[str]:
    return {str(row[1]) for row in conn.execute(f"PRAGMA table_info({table})")}


def _upgrade(conn: sqlite3.Connection) -> None:
    """State written before tokens were per aggregator role (`shared.dap.extensions`): its
    cached tokens answer a challenge no aggregator accepts now, so they go; pending uploads
    get a column for the helper's token (``token`` holds the leader's)."""
    token = _columns(conn, "token")
    if token and "role" not in token:
        conn.execute("DROP TABLE token")
    pending = _columns(conn, "pending_upload")
    if pending and "helper_token" not in pending:
        conn.execute("ALTER TABLE pending_upload ADD COLUMN helper_token BLOB")


class StateDb:
    """A SQLite connection shared by the device's components, with a re-entrant lock so that a
    `Device` may be used from several threads (SQLite connections are not thread-safe)."""

    def __init__(self, path: Path | str | None) -> None:
        target = ":memory:" if path is None else str(path)
        self.path = target
        self.conn = sqlite3.connect(
            target, isolation_level=None, check_same_thread=False, timeout=30.0
        )
        self.lock = threading.RLock()
        if target != ":memory:":
            # WAL keeps readers off the writer's lock; FULL sync makes a commit survive a crash.
            self.conn.execute("PRAGMA journal_mode=WAL")
            self.conn.execute("PRAGMA synchronous=FULL")
        with self.lock:
            _upgrade(self.conn)
            self.conn.executescript(_SCHEMA)

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """BEGIN IMMEDIATE ... COMMIT, ROLLBACK on any exception (nested calls join the outer)."""
        with self.lock:
            if self.conn.in_transaction:
                yield self.conn
                return
            self.conn.execute("BEGIN IMMEDIATE")
            try:
                yield self.conn
            except BaseException:
                self.conn.execute("ROLLBACK")
                raise
            self.conn.execute("COMMIT")

    def get(self, key: str) -> str | None:
        with self.lock:
            row = self.conn.execute("SELECT value FROM kv WHERE key = ?", (key,)).fetchone()
        return None if row is None else str(row[0])

    def put(self, key: str, value: str) -> None:
        with self.transaction() as conn:
            conn.execute(
                "INSERT INTO kv (key, value) VALUES (?, ?) "
                "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                (key, value),
            )

    def close(self) -> None:
        with self.lock:
            self.conn.close()
