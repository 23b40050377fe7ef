"""The device's durable state: one SQLite database per device, or one per simulator worker
holding many devices' state, every row keyed by its device (`StateDb.scoped`).

Every piece of state whose consistency matters for privacy (budgets, pending uploads, the audit
log, the last accepted log head, cached tokens) lives in the same database, so that one SQLite
transaction can change several of them atomically (000 §4.3: budget is consumed *before* the
query runs; here, together with the record of the report that will leave the device).

Transactions are ``BEGIN IMMEDIATE``: the write lock is taken up front, so two connections to
the same file (two threads, or a restarted process racing an old one) serialize their
check-then-consume sequences instead of both reading the same "remaining budget".

A population simulator (`client_sdk.population`) keeps one store per worker process instead
of a file or an in-memory database per device: every table has a ``device`` column, and a
device's `StateDb` is a view (`scoped`) of the worker's connection that reads and writes its
own rows only. The verified recipe cache is the exception: it holds public, content-addressed
bytes (the canonical recipe under its id and version), the same for every device that
verified them. A worker store trades power-loss durability for throughput (`durable=False`:
WAL and no sync at all; a commit still survives the process crashing, but a machine crash may
lose the store).
"""

from __future__ import annotations

import copy
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["StateDb"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS kv (
    device INTEGER NOT NULL DEFAULT 0, key TEXT NOT NULL, value TEXT NOT NULL,
    PRIMARY KEY (device, key));
CREATE TABLE IF NOT EXISTS analysis_budget (
    device INTEGER NOT NULL DEFAULT 0, analysis_id TEXT NOT NULL, eps_used REAL NOT NULL,
    reports_used INTEGER NOT NULL, PRIMARY KEY (device, analysis_id));
CREATE TABLE IF NOT EXISTS field_budget (
    device INTEGER NOT NULL DEFAULT 0, field TEXT NOT NULL, eps_used REAL NOT NULL,
    reports_used INTEGER NOT NULL, PRIMARY KEY (device, field));
CREATE TABLE IF NOT EXISTS pending_upload (
    id INTEGER PRIMARY KEY AUTOINCREMENT, device INTEGER NOT NULL DEFAULT 0,
    recipe_id TEXT NOT NULL, version INTEGER NOT NULL, task_id TEXT NOT NULL,
    measurement TEXT NOT NULL, donation_time INTEGER NOT NULL, token_fetch_at INTEGER NOT NULL,
    report_id TEXT, report BLOB, token BLOB, attempts INTEGER NOT NULL DEFAULT 0,
    state TEXT NOT NULL DEFAULT 'pending', helper_token BLOB);
CREATE TABLE IF NOT EXISTS recipe_cache (
    recipe_id TEXT NOT NULL, version INTEGER NOT NULL, canonical BLOB NOT NULL,
    PRIMARY KEY (recipe_id, version));
CREATE TABLE IF NOT EXISTS token (
    id INTEGER PRIMARY KEY AUTOINCREMENT, device INTEGER NOT NULL DEFAULT 0,
    task_id TEXT NOT NULL, window_start INTEGER NOT NULL,
    token BLOB NOT NULL, used INTEGER NOT NULL DEFAULT 0, role INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS audit (
    id INTEGER PRIMARY KEY AUTOINCREMENT, device INTEGER NOT NULL DEFAULT 0,
    time INTEGER NOT NULL, kind TEXT NOT NULL,
    recipe_id TEXT, version INTEGER, task_id TEXT, report_id TEXT, detail TEXT NOT NULL);
"""

#: After `_upgrade`: the upsert targets and lookups by device (a store written before
#: devices shared one has the older primary keys, which these indexes extend).
_INDEXES = """
CREATE UNIQUE INDEX IF NOT EXISTS kv_by_device ON kv (device, key);
CREATE UNIQUE INDEX IF NOT EXISTS analysis_budget_by_device
    ON analysis_budget (device, analysis_id);
CREATE UNIQUE INDEX IF NOT EXISTS field_budget_by_device ON field_budget (device, field);
CREATE INDEX IF NOT EXISTS pending_due_by_device
    ON pending_upload (device, state, donation_time);
CREATE INDEX IF NOT EXISTS token_free_by_device
    ON token (device, task_id, window_start, role, used);
CREATE INDEX IF NOT EXISTS audit_by_device ON audit (device, id);
"""

#: Tables that are one device's rows (recipe_cache is shared: see the module docstring).
_DEVICE_TABLES = ("kv", "analysis_budget", "field_budget", "pending_upload", "token", "audit")


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
    # A store of one device, written before stores held several: its rows are device 0's.
    for table in _DEVICE_TABLES:
        columns = _columns(conn, table)
        if columns and "device" not in columns:
            conn.execute(f"ALTER TABLE {table} ADD COLUMN device INTEGER NOT NULL DEFAULT 0")


class StateDb:
    """A SQLite connection shared by the device's components, with a re-entrant lock so that a
    `Device` may be used from several threads (SQLite connections are not thread-safe), and
    the device whose rows this handle reads and writes (`device`)."""

    def __init__(self, path: Path | str | None, *, durable: bool = True) -> None:
        """`durable=False`: commits survive a crash of the process but not of the machine
        (a simulator's worker store: a sync per commit would bound it to the disk's rate, and
        even NORMAL's syncs at each WAL checkpoint cost a device's transactions a third more
        CPU)."""
        target = ":memory:" if path is None else str(path)
        self.path = target
        self.device = 0
        self._owner = True
        self.conn = sqlite3.connect(
            target, isolation_level=None, check_same_thread=False, timeout=30.0
        )
        self.lock = threading.RLock()
        if target != ":memory:":
            # WAL keeps readers off the writer's lock; FULL sync makes a commit survive a crash.
            self.conn.execute("PRAGMA journal_mode=WAL")
            self.conn.execute(f"PRAGMA synchronous={'FULL' if durable else 'OFF'}")
            if not durable:
                # A worker's store has one connection: holding the file lock for good spares
                # two lock round trips per transaction.
                self.conn.execute("PRAGMA locking_mode=EXCLUSIVE")
        with self.lock:
            _upgrade(self.conn)
            self.conn.executescript(_SCHEMA)
            self.conn.executescript(_INDEXES)

    def scoped(self, device: int) -> StateDb:
        """The same store seen as `device`'s: its rows only, this connection and lock
        (closing the view leaves the store open)."""
        view = copy.copy(self)
        view.device = device
        view._owner = False
        return view

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """BEGIN IMMEDIATE ... COMMIT, ROLLBACK on any exception. A nested call is a savepoint
        of the outer transaction: its exception undoes its own writes only, and nothing of it
        is committed before the outer transaction is (a simulator commits a chunk of devices'
        writes together: `client_sdk.simulator.together`)."""
        with self.lock:
            if self.conn.in_transaction:
                self.conn.execute("SAVEPOINT nested")
                try:
                    yield self.conn
                except BaseException:
                    self.conn.execute("ROLLBACK TO nested")
                    self.conn.execute("RELEASE nested")
                    raise
                self.conn.execute("RELEASE nested")
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
            row = self.conn.execute(
                "SELECT value FROM kv WHERE device = ? AND key = ?", (self.device, key)
            ).fetchone()
        return None if row is None else str(row[0])

    def put(self, key: str, value: str) -> None:
        with self.transaction() as conn:
            conn.execute(
                "INSERT INTO kv (device, key, value) VALUES (?, ?, ?) "
                "ON CONFLICT (device, key) DO UPDATE SET value = excluded.value",
                (self.device, key, value),
            )

    def close(self) -> None:
        if self._owner:
            with self.lock:
                self.conn.close()
