"""The collector's datastore: every SQL statement the collector runs lives in this module.

Two backends share one schema and one interface: SQLite (`sqlite:///path`, the default for a
local deployment) and PostgreSQL (`postgresql://...`, for several collector processes sharing
state). The schema is created and upgraded by numbered migrations recorded in
`schema_migrations`, so a newer collector can open an older database.

What is stored (DAP-09 §4.2: the collector alone holds the HPKE secret key of a task):
- `tasks`: the `CollectorTask` JSON, the collector's `HpkeConfig` and its private key. The
  private key is read only by `load_task` for decryption; nothing here logs it.
- `collection_jobs`: one row per collection job (DAP-09 §4.6.1) with its query, its progress
  (`new` -> `polling` -> `complete` | `failed`), the scheduling fields the poller uses
  (`next_attempt_ms`, `attempts`) and a lease (`lease_owner`, `lease_expiry_ms`) that keeps two
  collector processes from driving the same job at once.

Times are integer milliseconds from the injected clock, so backoff below one second works.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any, Protocol

import psycopg

__all__ = [
    "JobRow",
    "JobState",
    "JobUpdate",
    "PutTaskOutcome",
    "Store",
    "StoreError",
    "StoredTask",
    "open_store",
]

log = logging.getLogger(__name__)


class StoreError(Exception):
    """The database could not be opened or used (bad URL, unreachable server...)."""


class JobState(StrEnum):
    """Progress of a collection job inside the collector."""

    NEW = "new"  # accepted by the collector, not yet created at the leader
    POLLING = "polling"  # created at the leader (PUT answered 201); polling for the result
    COMPLETE = "complete"  # result decrypted, unsharded and stored
    FAILED = "failed"  # permanent error; `error` says why

    @property
    def public(self) -> str:
        """The state the collector API reports: `new` and `polling` are both `pending`."""
        return "pending" if self in (JobState.NEW, JobState.POLLING) else self.value


class PutTaskOutcome(StrEnum):
    CREATED = "created"
    IDENTICAL = "identical"
    CONFLICT = "conflict"


@dataclass(frozen=True, slots=True)
class StoredTask:
    task_id: str
    definition: str  # CollectorTask JSON
    hpke_config: str  # b64url of the encoded HpkeConfig
    hpke_private_key: str  # b64url; secret
    created_at_ms: int

    def __repr__(self) -> str:
        # Keep the private key out of reprs, tracebacks and log lines.
        return f"StoredTask(task_id={self.task_id!r}, hpke_config={self.hpke_config!r})"


@dataclass(frozen=True, slots=True)
class JobRow:
    job_id: str
    task_id: str
    query: str  # JSON of the collector API query
    state: JobState
    error: str | None
    attempts: int  # polls so far without a result; drives the backoff
    failures: int  # consecutive transient failures; too many fail the job
    next_attempt_ms: int
    lease_owner: str | None
    lease_expiry_ms: int | None
    report_count: int | None
    interval_start: int | None
    interval_duration: int | None
    batch_id: str | None
    result: str | None  # JSON of the unsharded aggregate
    created_at_ms: int
    updated_at_ms: int


@dataclass(frozen=True, slots=True)
class JobUpdate:
    """What the poller writes back when it releases a job's lease."""

    state: JobState
    attempts: int
    failures: int
    next_attempt_ms: int
    error: str | None = None
    report_count: int | None = None
    interval_start: int | None = None
    interval_duration: int | None = None
    batch_id: str | None = None
    result: str | None = None


_JOB_COLUMNS = (
    "job_id, task_id, query, state, error, attempts, failures, next_attempt_ms, lease_owner, "
    "lease_expiry_ms, report_count, interval_start, interval_duration, batch_id, result, "
    "created_at_ms, updated_at_ms"
)

# Migrations: (version, statements). Append only; never edit one that has shipped.
_MIGRATIONS: list[tuple[int, list[str]]] = [
    (
        1,
        [
            """CREATE TABLE tasks (
                task_id TEXT PRIMARY KEY,
                definition TEXT NOT NULL,
                hpke_config TEXT NOT NULL,
                hpke_private_key TEXT NOT NULL,
                created_at_ms BIGINT NOT NULL
            )""",
            """CREATE TABLE collection_jobs (
                job_id TEXT PRIMARY KEY,
                task_id TEXT NOT NULL REFERENCES tasks (task_id),
                query TEXT NOT NULL,
                state TEXT NOT NULL,
                error TEXT,
                attempts INTEGER NOT NULL DEFAULT 0,
                failures INTEGER NOT NULL DEFAULT 0,
                next_attempt_ms BIGINT NOT NULL,
                lease_owner TEXT,
                lease_expiry_ms BIGINT,
                report_count BIGINT,
                interval_start BIGINT,
                interval_duration BIGINT,
                batch_id TEXT,
                result TEXT,
                created_at_ms BIGINT NOT NULL,
                updated_at_ms BIGINT NOT NULL
            )""",
            "CREATE INDEX collection_jobs_runnable ON collection_jobs (state, next_attempt_ms)",
        ],
    ),
]


class _Tx(Protocol):
    def execute(self, sql: str, params: Sequence[Any] = ()) -> int: ...
    def query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]: ...


class _Backend(Protocol):
    def transaction(self, name: str) -> Any: ...


class _SqliteTx:
    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    def execute(self, sql: str, params: Sequence[Any] = ()) -> int:
        return self._conn.execute(sql, tuple(params)).rowcount

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        return list(self._conn.execute(sql, tuple(params)).fetchall())


class _SqliteBackend:
    """One short-lived connection per transaction: safe across threads and processes."""

    def __init__(self, path: Path) -> None:
        self._path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        with self._connect() as conn:
            # WAL lets readers proceed while the poller writes; it persists in the file.
            conn.execute("PRAGMA journal_mode=WAL")

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self._path, timeout=30.0, isolation_level=None)
        conn.execute("PRAGMA foreign_keys=ON")
        conn.execute("PRAGMA busy_timeout=30000")
        return conn

    @contextmanager
    def transaction(self, name: str) -> Iterator[_Tx]:
        conn = self._connect()
        try:
            # IMMEDIATE takes the write lock up front, so a read-then-update (lease
            # acquisition) cannot interleave with another process's.
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield _SqliteTx(conn)
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            raise StoreError(f"{name}: {exc}") from exc
        finally:
            conn.close()


class _PostgresTx:
    def __init__(self, conn: psycopg.Connection[tuple[Any, ...]]) -> None:
        self._conn = conn

    @staticmethod
    def _sql(sql: str) -> str:
        # The module writes qmark placeholders; psycopg wants %s. No statement here contains
        # a literal '?' or '%'.
        return sql.replace("?", "%s")

    def execute(self, sql: str, params: Sequence[Any] = ()) -> int:
        cur = self._conn.execute(self._sql(sql), tuple(params))
        return cur.rowcount

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        cur = self._conn.execute(self._sql(sql), tuple(params))
        return list(cur.fetchall())


class _PostgresBackend:
    def __init__(self, url: str) -> None:
        self._url = url

    @contextmanager
    def transaction(self, name: str) -> Iterator[_Tx]:
        try:
            conn = psycopg.connect(self._url, connect_timeout=10)
        except psycopg.Error as exc:
            raise StoreError(f"{name}: cannot connect to PostgreSQL: {exc}") from exc
        try:
            with conn.transaction():
                yield _PostgresTx(conn)
        except psycopg.Error as exc:
            raise StoreError(f"{name}: {exc}") from exc
        finally:
            conn.close()


def _backend_for(url: str) -> _Backend:
    if url.startswith("sqlite:///"):
        return _SqliteBackend(Path(url.removeprefix("sqlite:///")))
    if url.startswith(("postgresql://", "postgres://")):
        return _PostgresBackend(url)
    raise StoreError("database URL must start with sqlite:/// or postgresql://")


def _job(row: tuple[Any, ...]) -> JobRow:
    (
        job_id,
        task_id,
        query,
        state,
        error,
        attempts,
        failures,
        next_attempt_ms,
        lease_owner,
        lease_expiry_ms,
        report_count,
        interval_start,
        interval_duration,
        batch_id,
        result,
        created_at_ms,
        updated_at_ms,
    ) = row
    return JobRow(
        job_id=job_id,
        task_id=task_id,
        query=query,
        state=JobState(state),
        error=error,
        attempts=int(attempts),
        failures=int(failures),
        next_attempt_ms=int(next_attempt_ms),
        lease_owner=lease_owner,
        lease_expiry_ms=None if lease_expiry_ms is None else int(lease_expiry_ms),
        report_count=None if report_count is None else int(report_count),
        interval_start=None if interval_start is None else int(interval_start),
        interval_duration=None if interval_duration is None else int(interval_duration),
        batch_id=batch_id,
        result=result,
        created_at_ms=int(created_at_ms),
        updated_at_ms=int(updated_at_ms),
    )


class Store:
    """The collector's tables behind named transactions (see the module docstring)."""

    def __init__(self, backend: _Backend) -> None:
        self._backend = backend
        self._migrate_lock = threading.Lock()

    # --- schema -----------------------------------------------------------------------------

    def migrate(self, now_ms: int) -> int:
        """Apply every migration not yet recorded; returns the schema version."""
        with self._migrate_lock, self._backend.transaction("migrate") as tx:
            tx.execute(
                "CREATE TABLE IF NOT EXISTS schema_migrations "
                "(version INTEGER PRIMARY KEY, applied_at_ms BIGINT NOT NULL)"
            )
            done = {int(v) for (v,) in tx.query("SELECT version FROM schema_migrations")}
            for version, statements in _MIGRATIONS:
                if version in done:
                    continue
                for statement in statements:
                    tx.execute(statement)
                tx.execute(
                    "INSERT INTO schema_migrations (version, applied_at_ms) VALUES (?, ?)",
                    (version, now_ms),
                )
                log.info("collector store: applied migration %d", version)
            return max(v for v, _ in _MIGRATIONS)

    def ping(self) -> None:
        with self._backend.transaction("ping") as tx:
            tx.query("SELECT 1")

    # --- tasks ------------------------------------------------------------------------------

    def put_task(
        self,
        task_id: str,
        definition: str,
        hpke_config: str,
        hpke_private_key: str,
        now_ms: int,
        same_definition: Any,
    ) -> tuple[PutTaskOutcome, StoredTask]:
        """Insert a task unless one with this id exists; then compare definitions.

        `same_definition(stored_json) -> bool` decides whether an existing row is the same
        task (tasks are immutable, DAP-09 §4.2, so a different one is a conflict). The key
        pair passed in is discarded when the task already exists.
        """
        with self._backend.transaction("put_task") as tx:
            inserted = tx.execute(
                "INSERT INTO tasks (task_id, definition, hpke_config, hpke_private_key, "
                "created_at_ms) VALUES (?, ?, ?, ?, ?) ON CONFLICT (task_id) DO NOTHING",
                (task_id, definition, hpke_config, hpke_private_key, now_ms),
            )
            row = tx.query(
                "SELECT task_id, definition, hpke_config, hpke_private_key, created_at_ms "
                "FROM tasks WHERE task_id = ?",
                (task_id,),
            )[0]
        stored = StoredTask(row[0], row[1], row[2], row[3], int(row[4]))
        if inserted == 1:
            return PutTaskOutcome.CREATED, stored
        if same_definition(stored.definition):
            return PutTaskOutcome.IDENTICAL, stored
        return PutTaskOutcome.CONFLICT, stored

    def load_task(self, task_id: str) -> StoredTask | None:
        with self._backend.transaction("load_task") as tx:
            rows = tx.query(
                "SELECT task_id, definition, hpke_config, hpke_private_key, created_at_ms "
                "FROM tasks WHERE task_id = ?",
                (task_id,),
            )
        if not rows:
            return None
        row = rows[0]
        return StoredTask(row[0], row[1], row[2], row[3], int(row[4]))

    # --- collection jobs --------------------------------------------------------------------

    def create_job(self, job_id: str, task_id: str, query: str, now_ms: int) -> None:
        with self._backend.transaction("create_job") as tx:
            tx.execute(
                "INSERT INTO collection_jobs (job_id, task_id, query, state, attempts, "
                "next_attempt_ms, created_at_ms, updated_at_ms) VALUES (?, ?, ?, ?, 0, ?, ?, ?)",
                (job_id, task_id, query, JobState.NEW.value, now_ms, now_ms, now_ms),
            )

    def get_job(self, job_id: str) -> JobRow | None:
        with self._backend.transaction("get_job") as tx:
            rows = tx.query(
                f"SELECT {_JOB_COLUMNS} FROM collection_jobs WHERE job_id = ?", (job_id,)
            )
        return _job(rows[0]) if rows else None

    def acquire_jobs(self, owner: str, now_ms: int, lease_ms: int, limit: int) -> list[JobRow]:
        """Lease up to `limit` runnable jobs (due, unfinished, not leased by a live owner).

        Each lease is taken with a conditional UPDATE, which is atomic per row on both
        backends, so two processes racing for one job cannot both win it.
        """
        with self._backend.transaction("acquire_jobs") as tx:
            candidates = tx.query(
                "SELECT job_id FROM collection_jobs WHERE state IN (?, ?) "
                "AND next_attempt_ms <= ? AND (lease_expiry_ms IS NULL OR lease_expiry_ms <= ?) "
                "ORDER BY next_attempt_ms LIMIT ?",
                (JobState.NEW.value, JobState.POLLING.value, now_ms, now_ms, limit),
            )
            leased: list[JobRow] = []
            for (job_id,) in candidates:
                won = tx.execute(
                    "UPDATE collection_jobs SET lease_owner = ?, lease_expiry_ms = ? "
                    "WHERE job_id = ? AND (lease_expiry_ms IS NULL OR lease_expiry_ms <= ?)",
                    (owner, now_ms + lease_ms, job_id, now_ms),
                )
                if won == 1:
                    rows = tx.query(
                        f"SELECT {_JOB_COLUMNS} FROM collection_jobs WHERE job_id = ?", (job_id,)
                    )
                    leased.append(_job(rows[0]))
            return leased

    def release_job(self, job_id: str, owner: str, update: JobUpdate, now_ms: int) -> bool:
        """Write the outcome of one step and drop the lease, only if `owner` still holds it.

        False means the lease expired and another process took the job over; this process's
        result is then discarded (the other one redoes the idempotent step).
        """
        with self._backend.transaction("release_job") as tx:
            changed = tx.execute(
                "UPDATE collection_jobs SET state = ?, error = ?, attempts = ?, failures = ?, "
                "next_attempt_ms = ?, report_count = ?, interval_start = ?, "
                "interval_duration = ?, batch_id = ?, result = ?, updated_at_ms = ?, "
                "lease_owner = NULL, lease_expiry_ms = NULL "
                "WHERE job_id = ? AND lease_owner = ?",
                (
                    update.state.value,
                    update.error,
                    update.attempts,
                    update.failures,
                    update.next_attempt_ms,
                    update.report_count,
                    update.interval_start,
                    update.interval_duration,
                    update.batch_id,
                    update.result,
                    now_ms,
                    job_id,
                    owner,
                ),
            )
        return bool(changed == 1)


def open_store(url: str, now_ms: int) -> Store:
    """Open (creating if needed) and migrate the store at `url`."""
    store = Store(_backend_for(url))
    store.migrate(now_ms)
    return store
