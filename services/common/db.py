"""One database interface over SQLite and PostgreSQL, with named, retried transactions.

- `Database.open(url)`: ``sqlite:///path/to.db`` or ``postgresql://...``.
- SQL is written once with ``:name`` parameters and a few ``{blob}``-style type placeholders in
  DDL; `Dialect` holds every difference between the engines (placeholder syntax, column types,
  row locking clauses, how a transaction begins, which errors are worth a retry).
- Transactions are SERIALIZABLE on both engines (SQLite is by construction, with one writer;
  PostgreSQL runs SSI). The callers' invariants (a report's output share is added in the same
  transaction that finishes its report aggregation; a collected batch takes no more shares) then
  hold without hand-placed locks, at the price of retrying on serialization failures, which
  `Database.run` does.
- Migrations are ordered steps recorded in ``schema_migrations`` and applied once, at start.
- Every named transaction is counted by outcome, with its retries and its duration
  (`services.common.tx_metrics`, after Janus's ``run_tx`` metrics).
- PostgreSQL connections come from a `psycopg_pool.ConnectionPool`.
"""

from __future__ import annotations

import functools
import logging
import random
import re
import sqlite3
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import psycopg
import psycopg.errors
from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool

from services.common import tx_metrics
from services.common.problems import InternalError
from shared.files import create_private, private_dir

log = logging.getLogger(__name__)

Row = dict[str, Any]
Params = dict[str, Any]
T = TypeVar("T")

_PARAM = re.compile(r"(?<!:):([A-Za-z_][A-Za-z0-9_]*)")


class TransientDbError(InternalError):
    """A transaction failed for a reason a retry may fix (busy, serialization, lost connection)."""


@dataclass(frozen=True)
class Dialect:
    name: str
    types: dict[str, str]
    #: Appended to SELECTs that claim rows for a lease; empty where the engine has one writer.
    skip_locked: str
    #: What a statement that breaks a unique key raises (on SQLite, any broken constraint:
    #: `Tx.unless_conflict`'s careful path then meets a NOT NULL failure again, and raises it).
    unique_violation: type[Exception]

    def ddl(self, sql: str) -> str:
        return sql.format(**self.types)

    def translate(self, sql: str) -> str:
        if self.name == "sqlite":
            return sql
        return _to_pyformat(sql)


@functools.lru_cache(maxsize=512)
def _to_pyformat(sql: str) -> str:
    """``:name`` to psycopg's ``%(name)s``; statements are few and reused, so memoized."""
    return _PARAM.sub(r"%(\1)s", sql.replace("%", "%%"))


SQLITE = Dialect(
    "sqlite",
    {"blob": "BLOB", "bigint": "INTEGER", "text": "TEXT", "serial": "INTEGER"},
    "",
    sqlite3.IntegrityError,
)
POSTGRES = Dialect(
    "postgresql",
    {"blob": "BYTEA", "bigint": "BIGINT", "text": "TEXT", "serial": "BIGSERIAL"},
    "FOR UPDATE SKIP LOCKED",
    psycopg.errors.UniqueViolation,
)


#: Values of one `Tx._where_in` statement on SQLite, well below its limit of 32,766 variables.
_SQLITE_IN_CHUNK = 500

#: Columns of `Tx.insert_rows`: (name, DDL type placeholder: "blob", "bigint" or "text").
Columns = tuple[tuple[str, str], ...]
#: Writes rows (tuples in column order) into a table, the engine's fastest way.
InsertRows = Callable[[str, Columns, Sequence[Sequence[Any]]], None]


class Tx:
    """One open transaction; only valid inside `Database.transaction` / `Database.run`."""

    def __init__(
        self,
        name: str,
        dialect: Dialect,
        execute: Callable[[str, Params | Sequence[Any]], Any],
        execute_many: Callable[[str, Sequence[Params]], Any],
        insert_rows: InsertRows,
    ) -> None:
        self.name = name
        self.dialect = dialect
        self._execute = execute
        self._execute_many = execute_many
        self._insert_rows = insert_rows

    def execute(self, sql: str, params: Params | None = None) -> int:
        """Run a statement; the number of rows it changed."""
        cur = self._execute(self.dialect.translate(sql), params or {})
        return int(cur.rowcount)

    def execute_many(self, sql: str, params: Sequence[Params]) -> None:
        """One statement over many parameter sets (pipelined on PostgreSQL): per-report rows
        of a job cost one round trip, not hundreds."""
        if params:
            self._execute_many(self.dialect.translate(sql), params)

    def insert_rows(self, table: str, columns: Columns, rows: Sequence[Sequence[Any]]) -> None:
        """Plain INSERTs of many rows, each a tuple in `columns` order: multi-row INSERTs on
        SQLite (`_sqlite_insert_rows`), a binary COPY on PostgreSQL, whose client side costs a
        quarter of a pipelined executemany per row. As an INSERT without ON CONFLICT, a
        duplicate key fails the statement (the unique index checks COPY's rows the same way)."""
        if rows:
            self._insert_rows(table, columns, rows)

    def unless_conflict(self, hopeful: Callable[[], T], careful: Callable[[], T]) -> T:
        """`hopeful()`, or `careful()` where it broke a unique key: an anti-replay record
        inserted without looking first, as replays are rare. `hopeful` runs under a savepoint,
        and a unique-key conflict takes back all it did. A conflict in `careful`, which looks
        before it inserts, is with a key committed after this transaction's snapshot
        (PostgreSQL): the transaction is retried, and the next attempt sees it."""
        self._execute("SAVEPOINT unless_conflict", ())
        try:
            result = hopeful()
        except self.dialect.unique_violation:
            # All of it, not only the failed statement: `_sqlite_insert_rows` may have stored
            # chunks before it, which `careful` would take for replays; and on PostgreSQL the
            # failed statement fails every later one until rolled back.
            self._execute("ROLLBACK TO SAVEPOINT unless_conflict", ())
            self._execute("RELEASE SAVEPOINT unless_conflict", ())
            try:
                return careful()
            except psycopg.errors.UniqueViolation as exc:
                # Not on SQLite, whose one writer's lookup sees every committed key.
                raise TransientDbError("a unique key was committed concurrently") from exc
        self._execute("RELEASE SAVEPOINT unless_conflict", ())
        return result

    def insert_unseen(
        self,
        table: str,
        columns: Columns,
        rows: Sequence[Sequence[Any]],
        match: tuple[str, Any],
        column: str,
    ) -> set[Any]:
        """Insert the rows whose `column` value no row of `table` with the `match` value holds
        yet, and return the values one already held: an anti-replay lookup and record in one
        (`present`, then `insert_rows` of the rest, the lookup only after a conflict,
        `unless_conflict`). The rows must not repeat a value."""
        at = [name for name, _ in columns].index(column)

        def careful() -> set[Any]:
            present = self.present(table, match, column, [row[at] for row in rows])
            self.insert_rows(table, columns, [row for row in rows if row[at] not in present])
            return present

        def hopeful() -> set[Any]:
            self.insert_rows(table, columns, rows)
            return set()

        return self.unless_conflict(hopeful, careful) if rows else set()

    def rows_in(
        self,
        table: str,
        columns: Sequence[str],
        match: tuple[str, Any],
        column: str,
        values: Sequence[Any],
    ) -> list[Row]:
        """`columns` of the rows of `table` whose `match` column equals its value and whose
        `column` is one of `values`, in no particular order (`_where_in`)."""
        rows: list[Row] = []
        select = f"SELECT {', '.join(columns)} FROM {table}"
        for cur in self._where_in(select, match, column, values):
            rows += map(dict, cur.fetchall())
        return rows

    def update_in(
        self,
        table: str,
        assignments: str,
        match: tuple[str, Any],
        column: str,
        values: Sequence[Any],
    ) -> int:
        """`UPDATE table SET assignments` (constants, no parameters) of the rows whose `match`
        column equals its value and whose `column` is one of `values` (`_where_in`); the
        number of rows it changed. One statement per few hundred rows, where executemany's
        statement per row releases the GIL once per row (`_sqlite_insert_rows` says why that
        costs)."""
        update = f"UPDATE {table} SET {assignments}"
        return sum(int(cur.rowcount) for cur in self._where_in(update, match, column, values))

    def _where_in(
        self, head: str, match: tuple[str, Any], column: str, values: Sequence[Any]
    ) -> Iterator[Any]:
        """Run `head WHERE match = value AND column IN values`, yielding each cursor: with
        positional parameters on SQLite, where binding hundreds of named ones costs twice as
        much, in chunks below its variable limit; one array parameter on PostgreSQL."""
        where = f"{head} WHERE {match[0]} = "
        if self.dialect.name == "sqlite":
            for start in range(0, len(values), _SQLITE_IN_CHUNK):
                chunk = values[start : start + _SQLITE_IN_CHUNK]
                marks = ", ".join("?" * len(chunk))
                yield self._execute(f"{where}? AND {column} IN ({marks})", [match[1], *chunk])
        elif values:
            yield self._execute(f"{where}%s AND {column} = ANY(%s)", [match[1], list(values)])

    def present(
        self, table: str, match: tuple[str, Any], column: str, values: Sequence[Any]
    ) -> set[Any]:
        """Which of `values` a row of `table` whose `match` column equals its value holds in
        `column` (an anti-replay lookup, `rows_in`)."""
        return {r[column] for r in self.rows_in(table, (column,), match, column, values)}

    def query(self, sql: str, params: Params | None = None) -> list[Row]:
        cur = self._execute(self.dialect.translate(sql), params or {})
        return [dict(r) for r in cur.fetchall()]

    def query_one(self, sql: str, params: Params | None = None) -> Row | None:
        rows = self.query(sql, params)
        return rows[0] if rows else None


# --- engines -------------------------------------------------------------------------------------


class _Engine(ABC):
    dialect: Dialect

    @abstractmethod
    def begin(self, name: str) -> AbstractContextManager[Tx]:
        """A transaction named `name` (for retries and logs), committed when the block exits."""

    @abstractmethod
    def read(self, sql: str, params: Params) -> list[Row]:
        """One SELECT (already translated) outside any explicit transaction."""

    @abstractmethod
    def close(self) -> None: ...


def _create_store_file(path: Path) -> None:
    """Create the store 0600 (in a new 0700 directory) before SQLite opens it: SQLite would
    create it with the umask's mode, and follow a symbolic link planted in its place. Its
    -wal and -shm files take the database file's mode."""
    if not path.parent.exists():
        private_dir(path.parent)
    create_private(path, b"")


#: Page size of a new SQLite store (bytes; `_SqliteEngine._conn` says why not the 4 KiB default).
SQLITE_PAGE_SIZE = 8192

#: Page cache of each SQLite connection, in KiB (SQLite's default is 2 MiB). The anti-replay
#: index (task_id, report_id) takes ids in random order: once it outgrows the cache, every
#: group commit read its leaf pages back from the operating system (#15, `bench.store`).
SQLITE_CACHE_KIB = 16 * 1024


class _SqliteEngine(_Engine):
    """One connection per thread; WAL lets readers run beside the single writer."""

    dialect = SQLITE

    def __init__(self, path: str, busy_timeout_ms: int) -> None:
        self.file_path: Path | None = None
        if path != ":memory:" and not path.startswith("file:"):
            self.file_path = Path(path)
            _create_store_file(self.file_path)
        self._path = path
        self._busy_timeout_ms = busy_timeout_ms
        self._local = threading.local()
        self._all: list[sqlite3.Connection] = []
        self._lock = threading.Lock()

    def _conn(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = sqlite3.connect(self._path, isolation_level=None, check_same_thread=False)
            conn.row_factory = sqlite3.Row
            try:
                conn.execute(f"PRAGMA busy_timeout = {int(self._busy_timeout_ms)}")
                # Only a new, empty store takes it (WAL fixes the page size): a leader's report
                # row (its input share, ~2.7 KiB for Histogram(100)) fits once in a 4 KiB page,
                # so every insert, and the scrub after aggregation, wrote and checkpointed a
                # page per report; 8 KiB pages hold three such rows, a third less I/O per
                # report and ~15 us/report less leader CPU (#15).
                conn.execute(f"PRAGMA page_size = {SQLITE_PAGE_SIZE}")
                # Switching a new store to WAL can answer "locked" at once, without the busy
                # handler, while other processes open it too: the caller retries.
                conn.execute("PRAGMA journal_mode = WAL")
                conn.execute("PRAGMA synchronous = NORMAL")
                conn.execute(f"PRAGMA cache_size = -{SQLITE_CACHE_KIB}")
                # A multi-row INSERT inside a transaction keeps a statement journal, which
                # SQLite spills to a temporary file past 64 KiB: half of the upload writer's
                # write calls went there (#15). In memory it costs a copy, not a syscall.
                conn.execute("PRAGMA temp_store = MEMORY")
            except sqlite3.OperationalError as exc:
                conn.close()
                if _sqlite_busy(exc):
                    raise TransientDbError(str(exc)) from exc
                raise
            self._local.conn = conn
            with self._lock:
                self._all.append(conn)
        return conn

    @contextmanager
    def begin(self, name: str) -> Iterator[Tx]:
        conn = self._conn()
        try:
            # IMMEDIATE takes the write lock up front, so a read-then-write transaction never
            # fails halfway on a lock upgrade.
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            raise TransientDbError(str(exc)) from exc
        try:
            yield Tx(
                name,
                self.dialect,
                conn.execute,
                conn.executemany,
                functools.partial(_sqlite_insert_rows, conn),
            )
        except sqlite3.OperationalError as exc:
            conn.execute("ROLLBACK")
            if _sqlite_busy(exc):
                raise TransientDbError(str(exc)) from exc
            raise
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        try:
            conn.execute("COMMIT")
        except sqlite3.OperationalError as exc:
            conn.execute("ROLLBACK")
            raise TransientDbError(str(exc)) from exc

    def read(self, sql: str, params: Params) -> list[Row]:
        try:
            # Autocommit: the statement reads one snapshot without the write lock.
            return [dict(r) for r in self._conn().execute(sql, params).fetchall()]
        except sqlite3.OperationalError as exc:
            if _sqlite_busy(exc):
                raise TransientDbError(str(exc)) from exc
            raise

    def close(self) -> None:
        with self._lock:
            for conn in self._all:
                conn.close()
            self._all.clear()
        self._local = threading.local()


#: Rows of one multi-row INSERT on SQLite (x8 columns stays far below its 32,766 variables).
_SQLITE_INSERT_CHUNK = 128


@functools.lru_cache(maxsize=64)
def _sqlite_insert_sql(table: str, columns: Columns, count: int) -> str:
    names = ", ".join(name for name, _ in columns)
    row = "(" + ", ".join("?" for _ in columns) + ")"
    return f"INSERT INTO {table} ({names}) VALUES " + ", ".join([row] * count)


def _sqlite_insert_rows(
    conn: sqlite3.Connection, table: str, columns: Columns, rows: Sequence[Sequence[Any]]
) -> None:
    """Multi-row INSERTs of `_SQLITE_INSERT_CHUNK` rows, then of halving sizes for the rest,
    so a table has at most eight statement texts (the connection's statement cache keeps them
    prepared). Not executemany: the sqlite3 module releases the GIL around each row's step,
    and in a serving aggregator every release hands the GIL to a waiting thread and costs
    this one a context switch to get it back. Measured against another busy thread: 55 us a
    row with executemany, 23 with multi-row statements; the same ~15 us without one (#15)."""
    size = _SQLITE_INSERT_CHUNK
    start = 0
    while start < len(rows):
        while size > len(rows) - start:
            size //= 2
        part = rows[start : start + size]
        conn.execute(
            _sqlite_insert_sql(table, columns, size), [value for row in part for value in row]
        )
        start += size


#: PostgreSQL's name of each DDL type placeholder, for binary COPY.
_COPY_TYPES = {"blob": "bytea", "bigint": "int8", "text": "text"}


def _copy_rows(
    conn: psycopg.Connection[Any], table: str, columns: Columns, rows: Sequence[Sequence[Any]]
) -> None:
    names = ", ".join(name for name, _ in columns)
    with conn.cursor().copy(f"COPY {table} ({names}) FROM STDIN (FORMAT BINARY)") as copy:
        copy.set_types([_COPY_TYPES[kind] for _, kind in columns])
        for row in rows:
            copy.write_row(row)


#: What `tx_metrics` counts as the database failing a transaction (not its body).
_DATABASE_ERRORS = (TransientDbError, psycopg.Error, sqlite3.Error)


def _sqlite_busy(exc: sqlite3.OperationalError) -> bool:
    text = str(exc).lower()
    return "locked" in text or "busy" in text


#: How long a transaction waits for a pooled connection before it counts as a transient failure
#: (`Database.run` retries it with backoff): psycopg-pool's default of 30 s would make an
#: unreachable server cost 12 x 30 s before the error surfaces; this way it takes ~15 s, still
#: long enough to cover a server that is starting.
_POOL_WAIT_S = 1.0


class _PostgresEngine(_Engine):
    """Pooled connections in autocommit mode, with explicit BEGIN/COMMIT per transaction."""

    dialect = POSTGRES

    def __init__(self, url: str, pool_size: int) -> None:
        # Connections open on demand (min_size 0): a service starts while its database is
        # still coming up, and the first transaction's retries cover the wait.
        self._pool: ConnectionPool[psycopg.Connection[Any]] = ConnectionPool(
            url,
            min_size=0,
            max_size=pool_size,
            kwargs={"autocommit": True, "row_factory": dict_row},
            timeout=_POOL_WAIT_S,
            open=True,
            name="sagg",
        )

    @contextmanager
    def begin(self, name: str) -> Iterator[Tx]:
        try:
            # A broken connection is discarded on return; PoolTimeout is an OperationalError.
            with self._pool.connection() as conn:
                conn.execute("BEGIN ISOLATION LEVEL SERIALIZABLE")
                try:
                    yield Tx(
                        name,
                        self.dialect,
                        conn.execute,
                        conn.cursor().executemany,
                        functools.partial(_copy_rows, conn),
                    )
                except BaseException:
                    if not conn.broken:
                        conn.execute("ROLLBACK")
                    raise
                conn.execute("COMMIT")
        except (
            psycopg.errors.SerializationFailure,
            psycopg.errors.DeadlockDetected,
            psycopg.errors.LockNotAvailable,
        ) as exc:
            raise TransientDbError(f"{type(exc).__name__}") from exc
        except psycopg.OperationalError as exc:
            raise TransientDbError(f"{type(exc).__name__}") from exc

    def read(self, sql: str, params: Params) -> list[Row]:
        try:
            # The pool's connections are in autocommit mode: one statement, one snapshot.
            with self._pool.connection() as conn:
                return list(conn.execute(sql, params).fetchall())
        except psycopg.OperationalError as exc:
            raise TransientDbError(f"{type(exc).__name__}") from exc

    def close(self) -> None:
        self._pool.close()


# --- the public interface ------------------------------------------------------------------------


@dataclass(frozen=True)
class Migration:
    """One schema step: DDL statements with ``{blob}``-style type placeholders."""

    version: int
    name: str
    statements: Sequence[str]


class Database:
    """The only way services touch their store."""

    def __init__(self, engine: _Engine, *, max_attempts: int = 12) -> None:
        self._engine = engine
        self._max_attempts = max_attempts

    @classmethod
    def open(cls, url: str, *, pool_size: int = 8, busy_timeout_ms: int = 5000) -> Database:
        if url.startswith("sqlite:///"):
            return cls(_SqliteEngine(url[len("sqlite:///") :], busy_timeout_ms))
        if url.startswith(("postgresql://", "postgres://")):
            return cls(_PostgresEngine(url, pool_size))
        raise ValueError("database URL must start with sqlite:/// or postgresql://")

    @property
    def dialect(self) -> Dialect:
        return self._engine.dialect

    @property
    def file_path(self) -> Path | None:
        """The SQLite store's file; None for PostgreSQL and SQLite stores without one."""
        return self._engine.file_path if isinstance(self._engine, _SqliteEngine) else None

    def run(self, name: str, body: Callable[[Tx], T]) -> T:
        """Run `body` in a transaction, retrying it from scratch on transient failures.

        `body` must not have side effects outside the transaction: it may run several times.
        """

        def attempt() -> T:
            with self._engine.begin(name) as tx:
                return body(tx)

        return self._retried(name, attempt)

    def read(self, name: str, sql: str, params: Params | None = None) -> list[Row]:
        """One SELECT outside any explicit transaction, retried and counted as `run` is: what
        the drivers look for work with. An idle look that finds nothing then costs one round
        trip instead of a serializable transaction's three on PostgreSQL, and never waits for
        SQLite's write lock. A single statement reads one consistent snapshot; what it finds
        is only a hint, which the transaction that takes the work checks again."""
        translated = self.dialect.translate(sql)
        return self._retried(name, lambda: self._engine.read(translated, params or {}))

    def _retried(self, name: str, attempt: Callable[[], T]) -> T:
        with tx_metrics.observe(name, _DATABASE_ERRORS):
            for number in range(1, self._max_attempts + 1):
                try:
                    return attempt()
                except TransientDbError as exc:
                    if number == self._max_attempts:
                        raise
                    tx_metrics.retried(name)
                    delay = min(0.5, 0.005 * 2**number) * (0.5 + random.random())
                    log.debug("transaction %s retry %d after %s", name, number, exc)
                    time.sleep(delay)
        raise AssertionError("unreachable")

    def migrate(self, migrations: Sequence[Migration]) -> int:
        """Apply the steps not yet recorded; the number applied."""
        versions = [m.version for m in migrations]
        if versions != sorted(set(versions)):
            raise ValueError("migration versions must be unique and ascending")

        def apply(tx: Tx) -> int:
            if self.dialect is POSTGRES:
                # Several processes may start at once against one database.
                tx.query("SELECT pg_advisory_xact_lock(727174) AS locked")
            tx.execute(
                self.dialect.ddl(
                    "CREATE TABLE IF NOT EXISTS schema_migrations ("
                    " version {bigint} PRIMARY KEY, name {text} NOT NULL,"
                    " applied_at {bigint} NOT NULL)"
                )
            )
            done = {r["version"] for r in tx.query("SELECT version FROM schema_migrations")}
            applied = 0
            for m in migrations:
                if m.version in done:
                    continue
                for statement in m.statements:
                    tx.execute(self.dialect.ddl(statement))
                tx.execute(
                    "INSERT INTO schema_migrations (version, name, applied_at) VALUES (:v, :n, :t)",
                    {"v": m.version, "n": m.name, "t": int(time.time())},
                )
                applied += 1
            return applied

        try:
            return self.run("migrate", apply)
        except (
            psycopg.errors.DuplicateTable,
            psycopg.errors.DuplicateObject,
            psycopg.errors.UniqueViolation,
        ):
            # PostgreSQL took this transaction's snapshot at its first statement, before the
            # advisory lock was granted: after waiting behind another process's migration it
            # finds the new tables but not their record. A fresh attempt sees both.
            return self.run("migrate", apply)

    def schema_version(self) -> int:
        def read(tx: Tx) -> int:
            row = tx.query_one("SELECT MAX(version) AS v FROM schema_migrations")
            return int(row["v"]) if row and row["v"] is not None else 0

        return self.run("schema_version", read)

    def close(self) -> None:
        self._engine.close()
