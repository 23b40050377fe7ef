"""The collector's datastore: every SQL statement the collector runs lives in this module.

It runs on `services.common.db.Database`: SQLite (`sqlite:///path`, the default for a local
deployment) or PostgreSQL (`postgresql://...`, for several collector processes sharing state),
serializable transactions retried on conflicts, and numbered migrations recorded in
`schema_migrations`, so a newer collector can open an older database.

What is stored (DAP-09 §4.2: the collector alone holds the HPKE secret key of a task):
- `tasks`: the `CollectorTask` JSON, the collector's `HpkeConfig` and its private key. The
  private key is read only by `load_task` for decryption; nothing here logs it.
- `collection_jobs`: one row per collection job (DAP-09 §4.6.1) with its query, its progress
  (`new` -> `polling` -> `complete` | `failed`), the scheduling fields the poller uses
  (`next_attempt_ms`, `attempts`) and a lease (`lease_owner`, `lease_expiry_ms`) that keeps two
  collector processes from driving the same job at once; a failed job's `problem` is a short
  name of why (migration 2), which the metrics count by.

Times are integer milliseconds from the injected clock, so backoff below one second works.
"""

from __future__ import annotations

import json
import logging
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import TypeVar

import psycopg

from services.common.crypter import Crypter
from services.common.db import Database, Migration, Row, TransientDbError, Tx
from services.common.problems import ServiceError

__all__ = [
    "JobCount",
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
T = TypeVar("T")


class StoreError(ServiceError):
    """The database could not be opened or used (bad URL, unreachable server...): 503. The
    message, for the log, may quote statement parameters; the answer never carries it."""

    status = 503

    def __init__(self, message: str) -> None:
        super().__init__("the collector's database is unavailable")
        self.args = (message,)


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
    #: A DAP-19 job's URL at the leader (its Location), once the leader named it.
    location: str | None = None


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
    #: A failed job's problem: a DAP problem type name or the collector's own short reason.
    problem: str | None = None
    #: A DAP-19 job's Location at the leader (kept across releases once known).
    location: str | None = None


@dataclass(frozen=True, slots=True)
class JobCount:
    """Collection jobs of one task in one state (and, failed, with one problem)."""

    task_id: str
    state: JobState
    problem: str | None
    count: int


_JOB_COLUMNS = (
    "job_id, task_id, query, state, error, attempts, failures, next_attempt_ms, lease_owner, "
    "lease_expiry_ms, report_count, interval_start, interval_duration, batch_id, result, "
    "created_at_ms, updated_at_ms, location"
)
_TASK_COLUMNS = "task_id, definition, hpke_config, hpke_private_key, created_at_ms"

# Append only; never edit a migration that has shipped.
MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        1,
        "initial collector schema",
        (
            """CREATE TABLE tasks (
                task_id {text} PRIMARY KEY,
                definition {text} NOT NULL,
                hpke_config {text} NOT NULL,
                hpke_private_key {text} NOT NULL,
                created_at_ms {bigint} NOT NULL
            )""",
            """CREATE TABLE collection_jobs (
                job_id {text} PRIMARY KEY,
                task_id {text} NOT NULL REFERENCES tasks (task_id),
                query {text} NOT NULL,
                state {text} NOT NULL,
                error {text},
                attempts {bigint} NOT NULL DEFAULT 0,
                failures {bigint} NOT NULL DEFAULT 0,
                next_attempt_ms {bigint} NOT NULL,
                lease_owner {text},
                lease_expiry_ms {bigint},
                report_count {bigint},
                interval_start {bigint},
                interval_duration {bigint},
                batch_id {text},
                result {text},
                created_at_ms {bigint} NOT NULL,
                updated_at_ms {bigint} NOT NULL
            )""",
            "CREATE INDEX collection_jobs_runnable ON collection_jobs (state, next_attempt_ms)",
        ),
    ),
    Migration(
        2,
        "problem name of failed collection jobs",
        ("ALTER TABLE collection_jobs ADD COLUMN problem {text}",),
    ),
    Migration(
        3,
        "the leader's Location of a DAP-19 collection job",
        ("ALTER TABLE collection_jobs ADD COLUMN location {text}",),
    ),
)


def _opt_int(value: object) -> int | None:
    return None if value is None else int(value)  # type: ignore[call-overload]


def _job(row: Row) -> JobRow:
    return JobRow(
        job_id=row["job_id"],
        task_id=row["task_id"],
        query=row["query"],
        state=JobState(row["state"]),
        error=row["error"],
        attempts=int(row["attempts"]),
        failures=int(row["failures"]),
        next_attempt_ms=int(row["next_attempt_ms"]),
        lease_owner=row["lease_owner"],
        lease_expiry_ms=_opt_int(row["lease_expiry_ms"]),
        report_count=_opt_int(row["report_count"]),
        interval_start=_opt_int(row["interval_start"]),
        interval_duration=_opt_int(row["interval_duration"]),
        batch_id=row["batch_id"],
        result=row["result"],
        created_at_ms=int(row["created_at_ms"]),
        updated_at_ms=int(row["updated_at_ms"]),
        location=row["location"],
    )


class Store:
    """The collector's tables behind named transactions (see the module docstring)."""

    def __init__(self, db: Database, crypter: Crypter | None = None) -> None:
        self._db = db
        #: Seals the task's HPKE private key and the collector's bearer token at rest.
        self._crypter = crypter or Crypter()

    @staticmethod
    def _token_field(
        definition: str, task_id: bytes, transform: Callable[[str, str, bytes, str], str]
    ) -> str:
        """`definition` with its collector token sealed or opened by `transform`."""
        parsed = json.loads(definition)
        if not isinstance(parsed, dict) or "collector_auth_token" not in parsed:
            return definition
        token = parsed["collector_auth_token"]
        parsed["collector_auth_token"] = transform("tasks", "collector_auth_token", task_id, token)
        return json.dumps(parsed)

    def _task(self, row: Row) -> StoredTask:
        task_id = str(row["task_id"]).encode()
        return StoredTask(
            row["task_id"],
            self._token_field(row["definition"], task_id, self._crypter.open_text),
            row["hpke_config"],
            self._crypter.open_text("tasks", "hpke_private_key", task_id, row["hpke_private_key"]),
            int(row["created_at_ms"]),
        )

    def _run(self, name: str, body: Callable[[Tx], T]) -> T:
        """`Database.run`, with engine errors turned into `StoreError` for the callers."""
        try:
            return self._db.run(name, body)
        except (TransientDbError, psycopg.Error, sqlite3.Error) as exc:
            raise StoreError(f"{name}: {type(exc).__name__}: {exc}") from exc

    # --- schema -----------------------------------------------------------------------------

    def migrate(self) -> int:
        """Apply every migration not yet recorded; returns the schema version."""
        try:
            self._db.migrate(MIGRATIONS)
        except (TransientDbError, psycopg.Error, sqlite3.Error) as exc:
            raise StoreError(f"migrate: {type(exc).__name__}: {exc}") from exc
        return MIGRATIONS[-1].version

    def ping(self) -> None:
        self._run("ping", lambda tx: tx.query("SELECT 1 AS one"))

    def close(self) -> None:
        self._db.close()

    # --- tasks ------------------------------------------------------------------------------

    def put_task(
        self,
        task_id: str,
        definition: str,
        hpke_config: str,
        hpke_private_key: str,
        now_ms: int,
        same_definition: Callable[[str], bool],
    ) -> tuple[PutTaskOutcome, StoredTask]:
        """Insert a task unless one with this id exists; then compare definitions.

        `same_definition(stored_json)` decides whether an existing row is the same task (tasks
        are immutable, DAP-09 §4.2, so a different one is a conflict). The key pair passed in
        is discarded when the task already exists: clients may already encrypt to the old one.
        """

        sealed = self._token_field(definition, task_id.encode(), self._crypter.seal_text)
        sealed_key = self._crypter.seal_text(
            "tasks", "hpke_private_key", task_id.encode(), hpke_private_key
        )

        def body(tx: Tx) -> tuple[bool, StoredTask]:
            inserted = tx.execute(
                "INSERT INTO tasks (task_id, definition, hpke_config, hpke_private_key, "
                "created_at_ms) VALUES (:id, :definition, :config, :key, :now) "
                "ON CONFLICT (task_id) DO NOTHING",
                {
                    "id": task_id,
                    "definition": sealed,
                    "config": hpke_config,
                    "key": sealed_key,
                    "now": now_ms,
                },
            )
            row = tx.query_one(
                f"SELECT {_TASK_COLUMNS} FROM tasks WHERE task_id = :id", {"id": task_id}
            )
            assert row is not None
            return inserted == 1, self._task(row)

        created, stored = self._run("put_task", body)
        if created:
            return PutTaskOutcome.CREATED, stored
        if same_definition(stored.definition):
            return PutTaskOutcome.IDENTICAL, stored
        return PutTaskOutcome.CONFLICT, stored

    def load_task(self, task_id: str) -> StoredTask | None:
        row = self._run(
            "load_task",
            lambda tx: tx.query_one(
                f"SELECT {_TASK_COLUMNS} FROM tasks WHERE task_id = :id", {"id": task_id}
            ),
        )
        return None if row is None else self._task(row)

    # --- collection jobs --------------------------------------------------------------------

    def create_job(self, job_id: str, task_id: str, query: str, now_ms: int) -> bool:
        """Record a new job; False if the task does not exist.

        The existence check is part of the INSERT because SQLite does not enforce the foreign
        key unless asked per connection.
        """
        inserted = self._run(
            "create_job",
            lambda tx: tx.execute(
                "INSERT INTO collection_jobs (job_id, task_id, query, state, attempts, failures, "
                "next_attempt_ms, created_at_ms, updated_at_ms) "
                "SELECT :job, :task, :query, :state, 0, 0, :now, :now, :now "
                "WHERE EXISTS (SELECT 1 FROM tasks WHERE task_id = :task)",
                {
                    "job": job_id,
                    "task": task_id,
                    "query": query,
                    "state": JobState.NEW.value,
                    "now": now_ms,
                },
            ),
        )
        return inserted == 1

    def completed_job(self, task_id: str, query: str) -> str | None:
        """The id of the task's earliest completed job with exactly this query, if any."""
        row = self._run(
            "completed_job",
            lambda tx: tx.query_one(
                "SELECT job_id FROM collection_jobs WHERE task_id = :task AND query = :query"
                " AND state = :state ORDER BY created_at_ms LIMIT 1",
                {"task": task_id, "query": query, "state": JobState.COMPLETE.value},
            ),
        )
        return None if row is None else str(row["job_id"])

    def get_job(self, job_id: str) -> JobRow | None:
        row = self._run(
            "get_job",
            lambda tx: tx.query_one(
                f"SELECT {_JOB_COLUMNS} FROM collection_jobs WHERE job_id = :job", {"job": job_id}
            ),
        )
        return None if row is None else _job(row)

    def acquire_jobs(self, owner: str, now_ms: int, lease_ms: int, limit: int) -> list[JobRow]:
        """Lease up to `limit` runnable jobs (due, unfinished, not leased by a live owner).

        The lease is a conditional UPDATE inside a serializable transaction (and, on
        PostgreSQL, rows are claimed with SKIP LOCKED), so two processes racing for one job
        cannot both win it.
        """

        def body(tx: Tx) -> list[JobRow]:
            candidates = tx.query(
                "SELECT job_id FROM collection_jobs WHERE state IN (:new, :polling) "
                "AND next_attempt_ms <= :now "
                "AND (lease_expiry_ms IS NULL OR lease_expiry_ms <= :now) "
                f"ORDER BY next_attempt_ms LIMIT :limit {tx.dialect.skip_locked}",
                {
                    "new": JobState.NEW.value,
                    "polling": JobState.POLLING.value,
                    "now": now_ms,
                    "limit": limit,
                },
            )
            leased: list[JobRow] = []
            for candidate in candidates:
                params = {
                    "owner": owner,
                    "expiry": now_ms + lease_ms,
                    "job": candidate["job_id"],
                    "now": now_ms,
                }
                won = tx.execute(
                    "UPDATE collection_jobs SET lease_owner = :owner, lease_expiry_ms = :expiry "
                    "WHERE job_id = :job "
                    "AND (lease_expiry_ms IS NULL OR lease_expiry_ms <= :now)",
                    params,
                )
                if won == 1:
                    row = tx.query_one(
                        f"SELECT {_JOB_COLUMNS} FROM collection_jobs WHERE job_id = :job",
                        {"job": candidate["job_id"]},
                    )
                    assert row is not None
                    leased.append(_job(row))
            return leased

        return self._run("acquire_jobs", body)

    def release_job(self, job_id: str, owner: str, update: JobUpdate, now_ms: int) -> bool:
        """Write the outcome of one step and drop the lease, only if `owner` still holds it.

        False means the lease expired and another process took the job over; this process's
        result is then discarded (the other one redoes the idempotent step).
        """
        params = {
            "state": update.state.value,
            "error": update.error,
            "attempts": update.attempts,
            "failures": update.failures,
            "next": update.next_attempt_ms,
            "count": update.report_count,
            "start": update.interval_start,
            "duration": update.interval_duration,
            "batch": update.batch_id,
            "result": update.result,
            "problem": update.problem,
            "location": update.location,
            "now": now_ms,
            "job": job_id,
            "owner": owner,
        }
        changed = self._run(
            "release_job",
            lambda tx: tx.execute(
                "UPDATE collection_jobs SET state = :state, error = :error, "
                "attempts = :attempts, failures = :failures, next_attempt_ms = :next, "
                "report_count = :count, interval_start = :start, "
                "interval_duration = :duration, batch_id = :batch, result = :result, "
                "problem = :problem, location = COALESCE(:location, location), "
                "updated_at_ms = :now, "
                "lease_owner = NULL, lease_expiry_ms = NULL "
                "WHERE job_id = :job AND lease_owner = :owner",
                params,
            ),
        )
        return changed == 1

    # --- metrics ----------------------------------------------------------------------------

    def job_counts(self) -> list[JobCount]:
        """Collection jobs by task, state and problem, for the metrics."""
        rows = self._run(
            "job_counts",
            lambda tx: tx.query(
                "SELECT task_id, state, problem, COUNT(*) AS n FROM collection_jobs"
                " GROUP BY task_id, state, problem ORDER BY task_id, state, problem"
            ),
        )
        return [
            JobCount(r["task_id"], JobState(r["state"]), r["problem"], int(r["n"])) for r in rows
        ]

    def task_count(self) -> int:
        row = self._run("task_count", lambda tx: tx.query_one("SELECT COUNT(*) AS n FROM tasks"))
        return int(row["n"]) if row else 0


def open_store(url: str, crypter: Crypter | None = None) -> Store:
    """Open (creating if needed) and migrate the store at `url`."""
    try:
        db = Database.open(url, pool_size=4)
    except ValueError as exc:
        raise StoreError(str(exc)) from None
    store = Store(db, crypter)
    try:
        store.migrate()
    except StoreError:
        db.close()
        raise
    return store
