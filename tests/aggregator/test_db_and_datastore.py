"""The database layer and the aggregator datastore, on SQLite and PostgreSQL."""

from __future__ import annotations

import contextlib
import itertools
import os
import random
import re
import secrets
import sqlite3
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import psycopg
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import REGISTRY

from services.aggregator.aggregate import ShareAdder
from services.aggregator.batches import bucket_key, covering_interval, report_checksum
from services.aggregator.datastore import (
    MIGRATIONS,
    TASK_TABLES,
    Datastore,
    JobSizes,
    LeaseLostError,
    NewReport,
    ReportOutcome,
    TaskGoneError,
    TokenSpend,
)
from services.aggregator.datastore.batch_aggregations import mark_collected
from services.aggregator.datastore.uploads import job_cuts
from services.common.auth import hash_token, presented_token, token_matches
from services.common.clock import TestClock
from services.common.db import (
    SQLITE_CACHE_KIB,
    SQLITE_PAGE_SIZE,
    Database,
    Migration,
    TransientDbError,
    Tx,
)
from shared.dap.messages import PrepareError
from shared.vdaf.prio3 import prio3_count

TASK = b"\x01" * 32
#: A task that no fixture provisions.
NEW_TASK = b"\x0a" * 32


@pytest.fixture
def ds(db_url: str):
    db = Database.open(db_url)
    store = Datastore(db, shards=2)
    store.migrate()
    provision(store, TASK)
    yield store
    db.close()


def provision(store: Datastore, task_id: bytes, role: str = "leader") -> None:
    """A task row: what the reports of `task_id` are stored under (`task_numbers`)."""
    assert store.put_task(task_id, role, {}, b"h" * 32, None, None, 0) == "created"


def test_migrations_apply_once(db_url: str) -> None:
    db = Database.open(db_url)
    try:
        assert db.migrate(MIGRATIONS) == len(MIGRATIONS)
        assert db.migrate(MIGRATIONS) == 0
        assert db.schema_version() == MIGRATIONS[-1].version
        extra = Migration(MIGRATIONS[-1].version + 1, "probe", ("CREATE TABLE probe (x {blob})",))
        assert db.migrate((*MIGRATIONS, extra)) == 1
        assert db.schema_version() == extra.version
    finally:
        db.close()


def _old_job(
    tx: Tx, task: bytes, job: bytes, role: str, state: str, report_states: tuple[str, ...]
) -> None:
    """A job as stores before migration 9 wrote it: its row without counts or members, and a
    report aggregation per report (ids: the job id's first byte, then the report's index),
    all of client time 7200."""
    tx.execute(
        "INSERT INTO aggregation_jobs (task_id, job_id, role, agg_param, time_min,"
        " time_max, state, step, lease_expiry, lease_attempts, created_at)"
        " VALUES (:t, :j, :role, :ap, 7200, 7200, :s, 0, 0, 0, 100)",
        {"t": task, "j": job, "role": role, "ap": b"", "s": state},
    )
    tx.execute_many(
        "INSERT INTO report_aggregations (task_id, job_id, ord, report_id,"
        " client_time, state, error) VALUES (:t, :j, :o, :r, 7200, :s, NULL)",
        [
            {"t": task, "j": job, "o": i, "r": job[:1] * 15 + bytes([i]), "s": report_state}
            for i, report_state in enumerate(report_states)
        ],
    )


def test_helper_report_aggregations_become_job_counts(db_url: str) -> None:
    """Migration 9 turns a helper job's report aggregations into its counts; a leader job's
    rows stay."""
    db = Database.open(db_url)
    before = tuple(m for m in MIGRATIONS if m.version < 9)
    try:
        db.migrate(before)
        task = b"\x07" * 32

        def fill(tx: Tx) -> None:
            _old_job(tx, task, b"H" * 16, "helper", "finished", ("finished", "finished", "failed"))
            _old_job(tx, task, b"L" * 16, "leader", "finished", ("finished", "failed"))

        db.run("fill", fill)
        assert db.migrate(tuple(m for m in MIGRATIONS if m.version <= 9)) == 1
        jobs = db.run(
            "jobs",
            lambda tx: tx.query(
                "SELECT role, finished_reports, failed_reports FROM aggregation_jobs ORDER BY role"
            ),
        )
        assert [(r["role"], r["finished_reports"], r["failed_reports"]) for r in jobs] == [
            ("helper", 2, 1),
            ("leader", 0, 0),
        ]
        rows = db.run("rows", lambda tx: tx.query("SELECT job_id FROM report_aggregations"))
        assert {bytes(r["job_id"]) for r in rows} == {b"L" * 16}
    finally:
        db.close()


def test_reports_keep_their_tasks_when_keyed_by_task_number(db_url: str) -> None:
    """Migration 12 moves each report row under its task's number, payload and all: the ids
    stay replays of their own task only. New tasks get numbers above the migrated ones and a
    deleted task's number is never issued again; storing reports of a task deleted meanwhile
    fails rather than store them under no task."""
    other = b"\x0b" * 32
    db = Database.open(db_url)
    try:
        db.migrate(tuple(m for m in MIGRATIONS if m.version < 12))

        def fill(tx: Tx) -> None:
            for task in (TASK, other):
                tx.execute(
                    "INSERT INTO tasks (task_id, role, definition, aggregator_token_hash,"
                    " created_at) VALUES (:t, 'leader', '{}', :h, 0)",
                    {"t": task, "h": b"h" * 32},
                )
            tx.execute_many(
                "INSERT INTO client_reports (task_id, report_id, client_time, public_share,"
                " leader_input_share, helper_encrypted_share, aggregation_started, received_at)"
                " VALUES (:t, :r, 7200, :p, :l, :h, :s, 100)",
                [
                    {"t": TASK, "r": b"a" * 16, "p": b"P", "l": b"L", "h": b"H", "s": 0},
                    {"t": TASK, "r": b"b" * 16, "p": None, "l": None, "h": None, "s": 1},
                    {"t": other, "r": b"c" * 16, "p": None, "l": None, "h": None, "s": 1},
                ],
            )

        db.run("fill", fill)
        assert db.migrate(MIGRATIONS) == len(MIGRATIONS) - 11
        ds = Datastore(db, shards=2)
        numbers = {
            bytes(r["task_id"]): int(r["number"])
            for r in db.run("n", lambda tx: tx.query("SELECT task_id, number FROM tasks"))
        }
        assert sorted(numbers.values()) == [1, 2]
        assert ds.count_rows("client_reports", TASK) == 2
        assert ds.count_rows("client_reports", other) == 1
        assert ds.unaggregated_reports(TASK) == 1
        assert _payloads(ds)[b"a" * 16] == (0, 100, b"P", b"L", b"H")
        # The ids are replays in their own task, and only there.
        assert [_put(ds, rid, 7200) for rid in (b"a" * 16, b"b" * 16, b"c" * 16)] == [
            "replayed",
            "replayed",
            "stored",
        ]
        assert ds.count_rows("client_reports", other) == 1

        assert ds.delete_task(other)
        provision(ds, NEW_TASK)
        again = db.run(
            "n",
            lambda tx: tx.query_one("SELECT number FROM tasks WHERE task_id = :t", {"t": NEW_TASK}),
        )
        assert again is not None and int(again["number"]) == 3
        assert ds.delete_task(TASK)
        with pytest.raises(TaskGoneError):
            _put(ds, b"d" * 16, 7200)
        assert ds.count_rows("client_reports", TASK) == 0
    finally:
        db.close()


def test_leader_jobs_made_before_their_members_were_kept_finish_as_before(db_url: str) -> None:
    """Migration 11 turns a finished leader job's report aggregations into its counts; a job
    still in progress keeps its rows, is read from them (shares from its reports' rows) and
    leaves neither rows nor shares behind when it finishes."""
    db = Database.open(db_url)
    try:
        db.migrate(tuple(m for m in MIGRATIONS if m.version < 11))

        def fill(tx: Tx) -> None:
            tx.execute(
                "INSERT INTO tasks (task_id, role, definition, aggregator_token_hash, created_at)"
                " VALUES (:t, 'leader', '{}', :h, 0)",
                {"t": TASK, "h": b"h" * 32},
            )
            _old_job(tx, TASK, b"F" * 16, "leader", "finished", ("finished", "failed", "finished"))
            _old_job(tx, TASK, b"P" * 16, "leader", "in_progress", ("start", "start"))
            tx.execute_many(
                "INSERT INTO client_reports (task_id, report_id, client_time, public_share,"
                " leader_input_share, helper_encrypted_share, aggregation_started, received_at)"
                " VALUES (:t, :r, 7200, :p, :l, :h, 1, 100)",
                [
                    {"t": TASK, "r": b"P" * 15 + bytes([i]), "p": b"", "l": b"L%d" % i, "h": b"H"}
                    for i in range(2)
                ],
            )

        db.run("fill", fill)
        assert db.migrate(MIGRATIONS) == len(MIGRATIONS) - 10
        ds = Datastore(db, shards=2)
        assert ds.task_stats(TASK)["report_aggregations"] == {
            "failed": 1,
            "finished": 2,
            "start": 2,
        }
        (lease,) = ds.acquire_aggregation_jobs(now=100, lease_duration=10, limit=10)
        assert lease.job_id == b"P" * 16
        _, reports = ds.leader_job(lease)
        assert [(i, r.report_id, r.leader_input_share) for i, r in enumerate(reports)] == [
            (i, b"P" * 15 + bytes([i]), b"L%d" % i) for i in range(2)
        ]
        vdaf = prio3_count()
        key = bucket_key(7200, 3600)
        outcomes = [ReportOutcome(r.report_id, 7200, key, None, i) for i, r in enumerate(reports)]
        ones = vdaf.field.from_ints([1, 1]).reshape(2, 1, 1)
        ds.finish_leader_job(lease, outcomes, ShareAdder(vdaf, ones))
        assert ds.count_rows("report_aggregations", TASK) == 0
        assert ds.task_stats(TASK)["report_aggregations"] == {"failed": 1, "finished": 4}
        assert all(p[2:] == (None, None, None) for p in _payloads(ds).values())
    finally:
        db.close()


def test_task_tables_are_every_per_task_table() -> None:
    """The one table list (task deletion, row counts) names every table the migrations create
    with a task_id column, besides ``tasks`` itself."""
    created = {
        name
        for m in MIGRATIONS
        for statement in m.statements
        for name, columns in re.findall(r"CREATE TABLE (\w+) \((.*)\)", statement, re.S)
        if re.search(r"\btask_id\b", columns) and name != "tasks"
    }
    assert set(TASK_TABLES) == created
    assert len(TASK_TABLES) == len(created)


def test_concurrent_migrations_apply_once(db_url: str) -> None:
    """Several processes starting at once on one empty store (scale-out): one applies the
    steps, the others find them applied; none fails."""
    dbs = [Database.open(db_url) for _ in range(4)]
    barrier = threading.Barrier(len(dbs))
    applied: list[int] = []
    errors: list[BaseException] = []

    def start(db: Database) -> None:
        barrier.wait()
        try:
            applied.append(db.migrate(MIGRATIONS))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=start, args=(db,)) for db in dbs]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert not errors, errors
        assert sorted(applied) == [0] * (len(dbs) - 1) + [len(MIGRATIONS)]
        assert dbs[0].schema_version() == MIGRATIONS[-1].version
    finally:
        for db in dbs:
            db.close()


def test_transaction_rolls_back_on_error(db_url: str) -> None:
    db = Database.open(db_url)
    try:
        db.migrate((Migration(1, "t", ("CREATE TABLE t (k {bigint} PRIMARY KEY, v {blob})",)),))

        def failing(tx: Tx) -> None:
            tx.execute("INSERT INTO t (k, v) VALUES (:k, :v)", {"k": 1, "v": b"\x00\xff"})
            raise RuntimeError("boom")

        with pytest.raises(RuntimeError):
            db.run("failing", failing)
        assert db.run("count", lambda tx: tx.query("SELECT * FROM t")) == []
        db.run(
            "ok",
            lambda tx: tx.execute(
                "INSERT INTO t (k, v) VALUES (:k, :v)", {"k": 2, "v": b"\x00\xff"}
            ),
        )
        rows = db.run("read", lambda tx: tx.query("SELECT k, v FROM t"))
        assert rows == [{"k": 2, "v": b"\x00\xff"}]
    finally:
        db.close()


def test_every_sqlite_connection_has_a_large_cache_and_in_memory_temp_store(
    tmp_path: Path,
) -> None:
    """Each thread's connection, not only the first: the page cache holds the random-key
    anti-replay index, and statement journals stay out of temporary files."""
    db = Database.open(f"sqlite:///{tmp_path / 'store.sqlite3'}")
    try:

        def pragmas() -> tuple[object, object]:
            cache = db.read("cache", "PRAGMA cache_size")[0]["cache_size"]
            return cache, db.read("temp", "PRAGMA temp_store")[0]["temp_store"]

        with ThreadPoolExecutor(max_workers=1) as other:
            elsewhere = other.submit(pragmas).result()
        # cache_size < 0 is in KiB; temp_store 2 is MEMORY.
        assert pragmas() == elsewhere == (-SQLITE_CACHE_KIB, 2)
        assert SQLITE_CACHE_KIB * 1024 > 2 * 1024 * 1024
    finally:
        db.close()


def test_a_new_sqlite_store_has_large_pages(tmp_path: Path) -> None:
    """A new store takes `SQLITE_PAGE_SIZE` (not SQLite's 4 KiB), so a leader's report row of
    ~2.7 KiB does not take a page of its own; a store made before keeps its size."""
    path = tmp_path / "new.sqlite3"
    db = Database.open(f"sqlite:///{path}")
    try:
        db.migrate((Migration(1, "t", ("CREATE TABLE t (k {bigint} PRIMARY KEY)",)),))
        assert db.read("size", "PRAGMA page_size") == [{"page_size": SQLITE_PAGE_SIZE}]
        assert SQLITE_PAGE_SIZE > 4096
    finally:
        db.close()
    old = tmp_path / "old.sqlite3"
    with contextlib.closing(sqlite3.connect(old)) as conn:
        conn.execute("CREATE TABLE t (k INTEGER PRIMARY KEY)")
        conn.commit()
    db = Database.open(f"sqlite:///{old}")
    try:
        assert db.read("size", "PRAGMA page_size") == [{"page_size": 4096}]
        assert db.read("mode", "PRAGMA journal_mode") == [{"journal_mode": "wal"}]
    finally:
        db.close()


def test_read_sees_committed_rows_only_and_copy_inserts_rows(db_url: str) -> None:
    """`Database.read` outside a transaction sees what is committed, not what another
    transaction is still writing; `Tx.insert_rows` stores rows as an INSERT would."""
    db = Database.open(db_url)
    try:
        db.migrate(
            (Migration(1, "t", ("CREATE TABLE t (k {bigint} PRIMARY KEY, v {blob}, s {text})",)),)
        )
        columns = (("k", "bigint"), ("v", "blob"), ("s", "text"))
        db.run("put", lambda tx: tx.insert_rows("t", columns, [(1, b"\x00", "a"), (2, None, "b")]))
        inside, release = threading.Event(), threading.Event()

        def writing(tx: Tx) -> None:
            tx.insert_rows("t", columns, [(3, b"c", "c")])
            inside.set()
            assert release.wait(5)

        writer = threading.Thread(target=db.run, args=("writing", writing))
        writer.start()
        try:
            assert inside.wait(5)
            rows = db.read("peek", "SELECT k, v, s FROM t ORDER BY k")
            assert rows == [{"k": 1, "v": b"\x00", "s": "a"}, {"k": 2, "v": None, "s": "b"}]
        finally:
            release.set()
            writer.join()
        assert [r["k"] for r in db.read("peek", "SELECT k FROM t WHERE k > :n", {"n": 1})] == [
            2,
            3,
        ]
        with pytest.raises((sqlite3.IntegrityError, psycopg.errors.UniqueViolation)):
            db.run("again", lambda tx: tx.insert_rows("t", columns, [(1, b"", "x")]))
    finally:
        db.close()


@pytest.mark.parametrize("count", [1, 2, 127, 128, 129, 255, 300, 1000])
def test_insert_rows_stores_every_row_in_order_whatever_the_count(db_url: str, count: int) -> None:
    """SQLite's multi-row INSERTs cut a group into statements of 128 rows and halving sizes:
    every row lands once with its own values, at counts on both sides of each cut; a
    duplicate anywhere in the group fails the whole transaction, leaving nothing of it."""
    db = Database.open(db_url)
    try:
        db.migrate(
            (Migration(1, "t", ("CREATE TABLE t (k {bigint} PRIMARY KEY, v {blob}, s {text})",)),)
        )
        columns = (("k", "bigint"), ("v", "blob"), ("s", "text"))
        rows = [(k, k.to_bytes(2, "big") if k % 3 else None, f"row {k}") for k in range(count)]
        db.run("put", lambda tx: tx.insert_rows("t", columns, rows))
        stored = db.read("all", "SELECT k, v, s FROM t ORDER BY k")
        assert [(r["k"], None if r["v"] is None else bytes(r["v"]), r["s"]) for r in stored] == rows
        again = [(count + k, b"", "new") for k in range(count)] + [(count - 1, b"", "dup")]
        with pytest.raises((sqlite3.IntegrityError, psycopg.errors.UniqueViolation)):
            db.run("again", lambda tx: tx.insert_rows("t", columns, again))
        assert db.read("n", "SELECT COUNT(*) AS n FROM t") == [{"n": count}]
    finally:
        db.close()


#: The columns of `_keyed_table`'s table ``r``: a key (t, id) and a flag.
_KEYED_COLUMNS = (("t", "blob"), ("id", "blob"), ("f", "bigint"))


def _keyed_table(db_url: str) -> Database:
    """A store with one table ``r`` keyed by (t, id), as ``client_reports`` by (task, report)."""
    db = Database.open(db_url)
    db.migrate(
        (
            Migration(
                1,
                "r",
                ("CREATE TABLE r (t {blob}, id {blob}, f {bigint}, PRIMARY KEY (t, id))",),
            ),
        )
    )
    return db


@pytest.mark.parametrize("held_at", [[], [0], [299], [5, 140, 299]])
def test_insert_unseen_stores_the_new_rows_and_names_the_held_ones(
    db_url: str, held_at: list[int]
) -> None:
    """`Tx.insert_unseen` stores exactly the rows whose id the task did not hold and returns
    the ids it held, leaving those rows as they were, wherever in the group they are (SQLite
    inserts a group of 300 in three statements: a conflict in the last must not leave the
    first two stored, to be taken for replays); a row of another task with the same id does
    not count, and the transaction goes on to commit what follows."""
    db = _keyed_table(db_url)
    try:
        rng = random.Random(11)
        ids = [rng.randbytes(16) for _ in range(300)]
        columns = _KEYED_COLUMNS
        held = [ids[i] for i in held_at]
        db.run("before", lambda tx: tx.insert_rows("r", columns, [(b"A", i, 7) for i in held]))
        db.run("other", lambda tx: tx.insert_rows("r", columns, [(b"B", i, 9) for i in ids]))

        def body(tx: Tx) -> set[bytes]:
            found = tx.insert_unseen("r", columns, [(b"A", i, 1) for i in ids], ("t", b"A"), "id")
            tx.execute("INSERT INTO r (t, id, f) VALUES (:t, :i, 2)", {"t": b"A", "i": b"after"})
            return {bytes(v) for v in found}

        assert db.run("unseen", body) == set(held)
        rows = db.read("all", "SELECT id, f FROM r WHERE t = :t", {"t": b"A"})
        stored = {bytes(r["id"]): r["f"] for r in rows}
        assert stored == {
            **{i: (7 if i in held else 1) for i in ids},
            b"after": 2,
        }
        assert db.run("none", lambda tx: tx.insert_unseen("r", columns, [], ("t", b"A"), "id")) == (
            set()
        )
    finally:
        db.close()


def test_insert_unseen_of_an_id_committed_after_the_snapshot_retries_and_finds_it(
    db_url: str,
) -> None:
    """An id that another transaction commits while this one runs is not stored twice nor
    missed: on PostgreSQL, whose snapshot cannot see it, the insert fails the attempt and the
    retry names it held; SQLite's writer lock orders the two."""
    db = _keyed_table(db_url)
    other = Database.open(db_url)
    try:
        ids = [bytes([i]) * 16 for i in range(50)]
        attempts = 0

        def body(tx: Tx) -> set[bytes]:
            nonlocal attempts
            attempts += 1
            # The snapshot (PostgreSQL) or the write lock (SQLite) is taken here.
            tx.execute(
                "INSERT INTO r (t, id, f) VALUES (:t, :i, 3)", {"t": b"C", "i": b"%d" % attempts}
            )
            if attempts == 1 and db_url.startswith("postgres"):
                other.run(
                    "other", lambda o: o.insert_rows("r", _KEYED_COLUMNS, [(b"A", ids[7], 9)])
                )
            found = tx.insert_unseen(
                "r", _KEYED_COLUMNS, [(b"A", i, 1) for i in ids], ("t", b"A"), "id"
            )
            return {bytes(v) for v in found}

        if db_url.startswith("postgres"):
            assert db.run("unseen", body) == {ids[7]}
            assert attempts == 2
        else:
            other.run("other", lambda o: o.insert_rows("r", _KEYED_COLUMNS, [(b"A", ids[7], 9)]))
            assert db.run("unseen", body) == {ids[7]}
        rows = db.read("all", "SELECT id, f FROM r WHERE t = :t", {"t": b"A"})
        assert {bytes(r["id"]): r["f"] for r in rows} == {i: 9 if i == ids[7] else 1 for i in ids}
    finally:
        other.close()
        db.close()


def _racing_helper_jobs(ds: Datastore, ids: list[bytes], key: bytes) -> list[list[ReportOutcome]]:
    """Two helper jobs of the same reports, recorded from two threads at once; each job's
    outcomes as committed."""
    vdaf = prio3_count()
    start = threading.Barrier(2)
    answered: dict[int, list[ReportOutcome]] = {}

    def job(n: int) -> str:
        outcomes = [ReportOutcome(rid, 7200, key, None, k) for k, rid in enumerate(ids)]
        ones = vdaf.field.from_ints([1] * len(ids)).reshape(len(ids), 1, 1)

        def respond(final: list[ReportOutcome]) -> bytes:
            answered[n] = final  # the last attempt's is the committed one
            return b"answer"

        start.wait(10)
        result, _ = ds.helper_init_job(
            TASK,
            ids[0][:8] + bytes([n]) * 8,
            b"job %d" % n,
            None,
            outcomes,
            ShareAdder(vdaf, ones),
            None,
            respond,
            now=100,
        )
        return result

    with ThreadPoolExecutor(2) as pool:
        assert list(pool.map(job, (1, 2))) == ["created", "created"]
    return [answered[1], answered[2]]


def test_two_helper_jobs_racing_with_the_same_reports_count_each_once(db_url: str) -> None:
    """A leader that sends the same reports in two jobs at once: both jobs are recorded, each
    report is aggregated by one of them and answered report_replayed by the other, and the
    batch counts it once; on PostgreSQL the two transactions run side by side."""
    db = Database.open(db_url)
    ds = Datastore(db, shards=2)
    ds.migrate()
    provision(ds, TASK, "helper")
    key = bucket_key(7200, 3600)
    try:
        for race in range(5):
            ids = [bytes([race, i]) * 8 for i in range(60)]
            first, second = _racing_helper_jobs(ds, ids, key)
            for one, other in zip(first, second, strict=True):
                assert {one.error, other.error} == {None, PrepareError.REPORT_REPLAYED}
            totals = ds.batch_totals(TASK, key, key + b"\xff")
            assert totals.report_count == len(ids) * (race + 1)
    finally:
        db.close()


def test_present_and_update_in_touch_exactly_the_matching_rows(db_url: str) -> None:
    """`Tx.present` and `Tx.update_in` answer and change what the plain statements would:
    across SQLite's chunks of values (1,201 asked), only rows whose match column agrees,
    nothing for an empty question."""
    db = _keyed_table(db_url)
    try:
        rng = random.Random(7)
        stored = [rng.randbytes(16) for _ in range(700)]
        other = [rng.randbytes(16) for _ in range(50)]
        columns = _KEYED_COLUMNS
        db.run("put", lambda tx: tx.insert_rows("r", columns, [(b"A", i, 0) for i in stored]))
        db.run("put", lambda tx: tx.insert_rows("r", columns, [(b"B", i, 0) for i in other]))
        asked = stored[::2] + other + [rng.randbytes(16) for _ in range(801)]
        rng.shuffle(asked)
        expected = {
            bytes(r["id"]) for r in db.read("all", "SELECT id FROM r WHERE t = :t", {"t": b"A"})
        }
        assert len(asked) == 1201
        found = db.run("ask", lambda tx: tx.present("r", ("t", b"A"), "id", asked))
        assert {bytes(v) for v in found} == expected & set(asked) == set(stored[::2])
        assert db.run("none", lambda tx: tx.present("r", ("t", b"A"), "id", [])) == set()

        changed = db.run("flag", lambda tx: tx.update_in("r", "f = 1", ("t", b"A"), "id", asked))
        assert changed == 350
        flagged = db.read("f", "SELECT t, id FROM r WHERE f = 1")
        assert {(bytes(r["t"]), bytes(r["id"])) for r in flagged} == {
            (b"A", i) for i in stored[::2]
        }
        assert db.run("none", lambda tx: tx.update_in("r", "f = 2", ("t", b"A"), "id", [])) == 0
    finally:
        db.close()


def test_concurrent_increments_are_not_lost(db_url: str) -> None:
    """Serializable transactions plus retries: N threads x M read-modify-writes = N*M."""
    db = Database.open(db_url, pool_size=4)
    try:
        db.migrate((Migration(1, "c", ("CREATE TABLE c (k {bigint} PRIMARY KEY, n {bigint})",)),))
        db.run("init", lambda tx: tx.execute("INSERT INTO c (k, n) VALUES (1, 0)"))

        def bump(tx: Tx) -> None:
            row = tx.query_one("SELECT n FROM c WHERE k = 1")
            assert row is not None
            tx.execute("UPDATE c SET n = :n WHERE k = 1", {"n": int(row["n"]) + 1})

        def worker() -> None:
            for _ in range(10):
                db.run("bump", bump)

        threads = [threading.Thread(target=worker) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        row = db.run("read", lambda tx: tx.query_one("SELECT n FROM c WHERE k = 1"))
        assert row == {"n": 40}
    finally:
        db.close()


def test_transaction_metrics_count_outcomes_and_retries(db_url: str) -> None:
    """Each named run is counted once by outcome, its retries apart, its duration timed."""
    db = Database.open(db_url)
    name = f"probe_{secrets.token_hex(4)}"
    attempts: list[int] = []

    def flaky(tx: Tx) -> int:
        attempts.append(1)
        if len(attempts) < 3:
            raise TransientDbError("forced")
        return int(tx.query("SELECT 7 AS n")[0]["n"])

    def failing(tx: Tx) -> None:
        raise LookupError("the body gives up")

    def sample(metric: str, **labels: str) -> float | None:
        return REGISTRY.get_sample_value(metric, {"tx": name, **labels})

    try:
        assert db.run(name, flaky) == 7
        with pytest.raises(LookupError):
            db.run(name, failing)
        with pytest.raises((sqlite3.Error, psycopg.Error)):
            db.run(name, lambda tx: tx.query("SELECT * FROM no_such_table"))
    finally:
        db.close()
    assert sample("sagg_db_transactions_total", outcome="committed") == 1
    assert sample("sagg_db_transactions_total", outcome="rolled_back") == 1
    assert sample("sagg_db_transactions_total", outcome="error") == 1
    assert sample("sagg_db_transaction_retries_total") == 2
    assert sample("sagg_db_transaction_duration_seconds_count") == 3


def test_transaction_cpu_is_the_running_threads_cpu(db_url: str) -> None:
    """`sagg_db_transaction_cpu_seconds_total` adds the CPU a run took in its thread: a body
    that burns 0.2 s counts that much, one that sleeps 0.2 s next to nothing (wall time is
    the duration histogram's)."""
    db = Database.open(db_url)
    busy, idle = f"burn_{secrets.token_hex(4)}", f"sleep_{secrets.token_hex(4)}"

    def burn(tx: Tx) -> None:
        end = time.thread_time() + 0.2
        while time.thread_time() < end:
            pass

    def cpu(name: str) -> float:
        return (
            REGISTRY.get_sample_value("sagg_db_transaction_cpu_seconds_total", {"tx": name}) or 0.0
        )

    try:
        before = time.thread_time()
        db.run(busy, burn)
        around = time.thread_time() - before
        db.run(idle, lambda tx: time.sleep(0.2))
    finally:
        db.close()
    assert 0.2 <= cpu(busy) <= around
    assert cpu(idle) < 0.05


def test_database_url_is_checked() -> None:
    with pytest.raises(ValueError):
        Database.open("mysql://nope")


def test_tokens() -> None:
    stored = hash_token("secret-token")
    assert stored != b"secret-token"
    assert token_matches(stored, presented_token({"DAP-Auth-Token": "secret-token"}))
    assert token_matches(stored, presented_token({"Authorization": "Bearer secret-token"}))
    assert not token_matches(stored, presented_token({"Authorization": "Basic secret-token"}))
    assert not token_matches(stored, presented_token({"DAP-Auth-Token": "other"}))
    assert not token_matches(stored, None)
    assert not token_matches(None, "secret-token")


def test_task_put_is_idempotent_and_conflicts(ds: Datastore) -> None:
    d = {"a": 1}
    assert ds.put_task(NEW_TASK, "helper", d, b"h" * 32, None, None, 0) == "created"
    assert ds.put_task(NEW_TASK, "helper", d, b"h" * 32, None, None, 0) == "exists"
    assert ds.put_task(NEW_TASK, "helper", {"a": 2}, b"h" * 32, None, None, 0) == "conflict"
    assert ds.put_task(NEW_TASK, "helper", d, b"x" * 32, None, None, 0) == "conflict"
    # A member added later (null when unset) does not make an old task differ from itself.
    later: dict[str, Any] = {**d, "rate_validation": None}
    assert ds.put_task(NEW_TASK, "helper", later, b"h" * 32, None, None, 0) == "exists"
    later["rate_validation"] = {"expected_reports_per_bucket": 4}
    assert ds.put_task(NEW_TASK, "helper", later, b"h" * 32, None, None, 0) == "conflict"
    record = ds.get_task(NEW_TASK)
    assert record is not None and record.definition == d
    assert "helper_token" not in repr(record) or "None" in repr(record)
    assert ds.delete_task(NEW_TASK)
    assert ds.get_task(NEW_TASK) is None
    assert not ds.delete_task(NEW_TASK)


def test_hpke_keys_newest_first(ds: Datastore) -> None:
    first = ds.add_hpke_key(0, only_if_none=True)
    assert first is not None
    assert ds.add_hpke_key(0, only_if_none=True) is None
    second = ds.add_hpke_key(1)
    assert second is not None and second.config_id != first.config_id
    keys = ds.hpke_keys()
    assert [k.keypair.config_id for k in keys] == [second.config_id, first.config_id]
    assert keys[1].keypair.private_key_bytes() == first.private_key_bytes()
    assert ds.expire_hpke_key(first.config_id)
    assert [k.state for k in ds.hpke_keys()] == ["active", "expired"]


def _put(ds: Datastore, rid: bytes, time: int, key: bytes | None = None) -> str:
    return ds.put_reports([_new(rid, time, key)])[0]


def _new(
    rid: bytes, time: int, key: bytes | None = None, spend: TokenSpend | None = None
) -> NewReport:
    return NewReport(TASK, rid, time, b"", b"leader", b"helper", key, 100, spend)


def test_group_of_uploads_in_one_transaction(ds: Datastore) -> None:
    """Every report of a group gets its own answer, as if stored one by one in order; the
    refusals (also those found before the store) are counted in the same transaction."""
    key, old = bucket_key(7200, 3600), bucket_key(3600, 3600)
    assert _put(ds, b"a" * 16, 7200, key) == "stored"
    ds.db.run("mark", lambda tx: mark_collected(tx, TASK, old, old + b"\x00", 0))
    spend = TokenSpend(b"k" * 32, b"c" * 32, b"n" * 32)
    group = [
        _new(b"b" * 16, 7200, key),
        _new(b"a" * 16, 7200, key),  # stored before
        _new(b"b" * 16, 7300, key),  # earlier in this group
        _new(b"c" * 16, 3700, old),  # into a collected bucket
        _new(b"d" * 16, 7200, key, spend),
        _new(b"e" * 16, 7200, key, spend),  # the same token, earlier in this group
        _new(b"e" * 16, 7200, key),  # its id stayed unused
    ]
    refused = [(TASK, "hpke_decrypt_error")]
    assert ds.put_reports(group, refused) == [
        "stored",
        "replayed",
        "replayed",
        "collected",
        "stored",
        "token_spent",
        "stored",
    ]
    assert ds.count_rows("client_reports", TASK) == 4
    assert ds.rejection_counts(TASK)["upload"] == {
        "batch_collected": 1,
        "hpke_decrypt_error": 1,
        "report_replayed": 2,
        "token_spent": 1,
    }
    assert ds.put_reports([]) == []


def test_a_replay_is_refused_as_replayed_before_its_token_is_looked_at(ds: Datastore) -> None:
    """A report stored with its token and uploaded again is a replay (DAP's check comes
    first), not a spent token, alone or in a group of other new reports; its token is
    spent once."""
    key = bucket_key(7200, 3600)
    spend = TokenSpend(b"k" * 32, b"c" * 32, b"n" * 32)
    assert ds.put_reports([_new(b"a" * 16, 7200, key, spend)]) == ["stored"]
    assert ds.put_reports([_new(b"a" * 16, 7200, key, spend)]) == ["replayed"]
    group = [_new(b"b" * 16, 7200, key), _new(b"a" * 16, 7200, key, spend)]
    assert ds.put_reports(group) == ["stored", "replayed"]
    assert ds.rejection_counts(TASK)["upload"] == {"report_replayed": 2}
    spent = ds.db.run("spent", lambda tx: tx.query("SELECT report_id FROM spent_tokens"))
    assert [bytes(r["report_id"]) for r in spent] == [b"a" * 16]


def test_report_replay_and_collected_bucket(ds: Datastore) -> None:
    key = bucket_key(7200, 3600)
    assert _put(ds, b"r" * 16, 7200, key) == "stored"
    assert _put(ds, b"r" * 16, 7200, key) == "replayed"
    ds.db.run("mark", lambda tx: mark_collected(tx, TASK, key, key + b"\x00", 0))
    assert _put(ds, b"s" * 16, 7300, key) == "collected"
    assert _put(ds, b"t" * 16, 3600, bucket_key(3600, 3600)) == "stored"


def test_a_large_upload_group_makes_its_jobs(ds: Datastore) -> None:
    """A group holding `from_group` of a time_interval task's reports makes their jobs in its
    transaction, as even as the maximum allows; the rest is left to the creator, and every
    stored report ends up in exactly one job."""
    key = bucket_key(7200, 3600)
    jobs = JobSizes(minimum=2, maximum=3, from_group=4)

    def ids(first: int, n: int) -> list[bytes]:
        return [bytes([i]) * 16 for i in range(first, first + n)]

    small = [_new(rid, 7200, key) for rid in ids(0, 3)]
    assert ds.put_reports(small, (), jobs) == ["stored"] * 3
    assert ds.unaggregated_reports(TASK) == 3
    assert ds.acquire_aggregation_jobs(now=100, lease_duration=10, limit=10) == []

    large = [_new(rid, 7200 + i, key) for i, rid in enumerate(ids(10, 7))]
    replay = _new(bytes([0]) * 16, 7200, key)
    # Seven new reports make three jobs, as even as a job's maximum of three allows.
    assert ds.put_reports([*large, replay], (), jobs) == ["stored"] * 7 + ["replayed"]
    assert ds.unaggregated_reports(TASK) == 3
    # Nor does a fixed_size task's group (its jobs fill batches in order).
    fixed = [_new(rid, 7200, None) for rid in ids(20, 4)]
    assert ds.put_reports(fixed, (), jobs) == ["stored"] * 4
    assert ds.unaggregated_reports(TASK) == 7

    leases = ds.acquire_aggregation_jobs(now=100, lease_duration=10, limit=10)
    members = sorted([r.report_id for r in ds.leader_job(lease)[1]] for lease in leases)
    assert members == [ids(10, 3), ids(13, 2), ids(15, 2)]
    assert (
        ds.create_aggregation_jobs(
            TASK, fixed_size_target=None, min_job_size=1, max_job_size=10, flush_before=0, now=100
        )
        == 1
    )
    assert ds.unaggregated_reports(TASK) == 0
    rows = ds.db.run("members", lambda tx: tx.query("SELECT members FROM aggregation_jobs"))
    # Each job's members: 16-byte report ids, each followed by its time as 8 bytes.
    in_jobs = [
        bytes(r["members"])[i : i + 16] for r in rows for i in range(0, len(r["members"]), 24)
    ]
    assert sorted(in_jobs) == sorted(ids(0, 3) + ids(10, 7) + ids(20, 4))


@settings(max_examples=400, deadline=None)
@given(
    count=st.integers(0, 3000),
    minimum=st.integers(1, 600),
    spread=st.integers(0, 600),
)
def test_job_cuts_are_as_few_and_as_even_as_the_sizes_allow(
    count: int, minimum: int, spread: int
) -> None:
    """An upload group's jobs: ceil(count / maximum) of them whenever that many can each hold
    at least `minimum` (then sizes differ by one at most and every report is in one), else
    jobs of `maximum` in order and no job below `minimum`."""
    maximum = minimum + spread
    cuts = job_cuts(count, minimum, maximum)
    sizes = [end - start for start, end in cuts]
    assert all(minimum <= size <= maximum for size in sizes)
    assert all(a[1] <= b[0] for a, b in itertools.pairwise(cuts))
    fewest = -(-count // maximum)
    if fewest * minimum <= count:
        assert len(cuts) == fewest
        assert sum(sizes) == count and (not cuts or cuts[0][0] == 0)
        assert max(sizes, default=0) - min(sizes, default=0) <= 1
    else:
        assert cuts == [(i * maximum, (i + 1) * maximum) for i in range(count // maximum)]


def _job_shares(*leader_shares: bytes) -> bytes:
    """A `leader_job_shares` value written by hand from its documented layout: per report, a
    u32 length and the bytes of the public share (empty, as `_new` makes it), the leader's
    share and the helper's (b"helper")."""
    return b"".join(
        b"\x00\x00\x00\x00" + len(share).to_bytes(4, "big") + share + b"\x00\x00\x00\x06helper"
        for share in leader_shares
    )


def test_the_driver_takes_a_just_committed_job_once_then_reads_the_store(db_url: str) -> None:
    """A job the upload group made in this process comes to its first lease here as committed,
    without reading the shares back; a later lease (a retry) reads the store, as does every
    job of a store that keeps none (`fresh_job_bytes` 0) and one dropped past the bound. A
    body retried after a transient failure keeps only the committed attempt's jobs."""
    db = Database.open(db_url)
    # 24 bytes a report as `job_shares` encodes `_new`'s (12 of shares, 12 of lengths): room
    # for two jobs of two.
    ds = Datastore(db, shards=2, fresh_job_bytes=4 * 24)
    ds.migrate()
    provision(ds, TASK)
    try:
        key = bucket_key(7200, 3600)
        jobs = JobSizes(minimum=2, maximum=2, from_group=2)
        rids = [bytes([i]) * 16 for i in range(6)]
        # The first attempt fails after its jobs were made (and rolls back; `Database.run`
        # tries again): its job ids must not be kept.
        real_run = db.run

        def flaky_run(name: str, body: Any) -> Any:
            attempts: list[int] = []

            def flaky(tx: Tx) -> Any:
                result = body(tx)
                attempts.append(1)
                if len(attempts) == 1:
                    raise TransientDbError("busy")
                return result

            return real_run(name, flaky)

        db.run = flaky_run  # type: ignore[method-assign]
        assert ds.put_reports([_new(r, 7200, key) for r in rids[:2]], (), jobs) == ["stored"] * 2
        db.run = real_run  # type: ignore[method-assign]
        assert ds.put_reports([_new(r, 7200, key) for r in rids[2:]], (), jobs) == ["stored"] * 4
        # Stored shares that differ from the committed ones show which were read (nothing
        # changes them in a real store before the job finishes).
        ds.db.run(
            "tamper",
            lambda tx: tx.execute(
                "UPDATE leader_job_shares SET shares = :x", {"x": _job_shares(b"db", b"db")}
            ),
        )
        leases = ds.acquire_aggregation_jobs(now=100, lease_duration=10, limit=10)
        assert len(leases) == 3
        shares = {}
        for lease in leases:
            _, reports = ds.leader_job(lease)
            shares[reports[0].report_id] = [r.leader_input_share for r in reports]
            # In job order: a group's reports as they came.
            assert [r.report_id for r in reports] in [rids[0:2], rids[2:4], rids[4:6]]
            assert all(
                r.public_share == b"" and r.helper_encrypted_share == b"helper" for r in reports
            )
        # The first group's job (the bound holds the last two jobs) was dropped: read back.
        assert shares == {rids[0]: [b"db"] * 2, rids[2]: [b"leader"] * 2, rids[4]: [b"leader"] * 2}
        ds.release_aggregation_job(leases[1], 0)
        again = ds.acquire_aggregation_jobs(now=100, lease_duration=10, limit=10)
        assert [r.leader_input_share for r in ds.leader_job(again[0])[1]] == [b"db"] * 2
    finally:
        db.close()
    # The same store, opened by a process that runs no driver.
    plain = Database.open(db_url)
    keeps_none = Datastore(plain, shards=2)
    try:
        stored = [_new(bytes([9]) * 16, 7200, key), _new(bytes([10]) * 16, 7200, key)]
        assert keeps_none.put_reports(stored, (), JobSizes(2, 2, 2)) == ["stored"] * 2
        plain.run(
            "tamper",
            lambda tx: tx.execute(
                "UPDATE leader_job_shares SET shares = :x", {"x": _job_shares(b"db", b"leader")}
            ),
        )
        (lease,) = keeps_none.acquire_aggregation_jobs(now=100, lease_duration=10, limit=10)
        assert [r.leader_input_share for r in keeps_none.leader_job(lease)[1]] == [b"db", b"leader"]
    finally:
        plain.close()


def test_job_share_files_of_transactions_that_never_committed_are_swept(tmp_path: Path) -> None:
    """A SQLite leader writes a job's share file before the transaction that makes the job
    commits. One that then fails leaves a file no row names: the sweep takes it once it is
    older than any transaction can last, never a younger one (a transaction still under way)
    and never one a job names; deleting the task takes its files."""
    db = Database.open(f"sqlite:///{tmp_path / 'leader.db'}")
    ds = Datastore(db, shards=2)
    ds.migrate()
    provision(ds, TASK)
    real_run = db.run
    failed_once: list[bool] = []

    def fails_once_after_its_body(name: str, body: Any) -> Any:
        def attempt(tx: Tx) -> Any:
            result = body(tx)
            if name == "put_reports" and not failed_once:
                failed_once.append(True)
                raise TransientDbError("busy")
            return result

        return real_run(name, attempt)

    try:
        key = bucket_key(7200, 3600)
        reports = [_new(bytes([i]) * 16, 7200, key) for i in range(2)]
        db.run = fails_once_after_its_body  # type: ignore[method-assign]
        assert ds.put_reports(reports, (), JobSizes(2, 2, 2)) == ["stored"] * 2
        db.run = real_run  # type: ignore[method-assign]
        (lease,) = ds.acquire_aggregation_jobs(now=100, lease_duration=10, limit=10)
        named = f"{TASK.hex()}.{lease.job_id.hex()}"
        # The failed attempt's file and the committed job's.
        assert len(_share_files(db)) == 2 and named in _share_files(db)
        assert ds.sweep_job_share_files() == 0
        folder = tmp_path / "leader.db.job-shares"
        hour_ago = time.time() - 3600
        for path in folder.iterdir():
            os.utime(path, (hour_ago, hour_ago))
        assert ds.sweep_job_share_files() == 1
        assert list(_share_files(db)) == [named]
        assert [r.leader_input_share for r in ds.leader_job(lease)[1]] == [b"leader"] * 2
        assert ds.delete_task(TASK)
        assert _share_files(db) == {}
    finally:
        db.close()


def _payloads(ds: Datastore) -> dict[bytes, tuple[Any, ...]]:
    """Each stored report's (started, received_at, public, leader, helper shares)."""
    rows = ds.db.run(
        "peek",
        lambda tx: tx.query(
            "SELECT report_id, aggregation_started, received_at, public_share,"
            " leader_input_share, helper_encrypted_share FROM client_reports"
        ),
    )
    return {
        bytes(r["report_id"]): (
            r["aggregation_started"],
            r["received_at"],
            *(
                None if r[c] is None else bytes(r[c])
                for c in ("public_share", "leader_input_share", "helper_encrypted_share")
            ),
        )
        for r in rows
    }


def _share_files(db: Database) -> dict[str, bytes]:
    """The job share files of a SQLite store by name (`job_share_files`); none in PostgreSQL."""
    store = db.file_path
    if store is None:
        return {}
    folder = store.with_name(f"{store.name}.job-shares")
    return {path.name: path.read_bytes() for path in folder.iterdir()}


def _row_values(db: Database) -> list[bytes]:
    rows = db.run("peek", lambda tx: tx.query("SELECT shares FROM leader_job_shares"))
    return [bytes(r["shares"]) for r in rows]


def test_a_job_made_at_upload_keeps_its_shares_in_one_row_until_it_finishes(db_url: str) -> None:
    """The shares of a job the upload group made live in its `leader_job_shares` row (read
    back in order), or in a SQLite store in the file the row leaves its value to, not in its
    reports' rows; finishing deletes the row and the file, and a report the helper found too
    early gets its shares back in its own row for the job creator, whose job clears them in
    turn. Nothing of an input share is stored once every job finished."""
    db = Database.open(db_url)
    ds = Datastore(db, shards=2, fresh_job_bytes=0)
    ds.migrate()
    provision(ds, TASK)
    vdaf = prio3_count()
    key = bucket_key(7200, 3600)
    rids = [bytes([i]) * 16 for i in range(3)]
    reports = [
        NewReport(TASK, rid, 7200, b"P%d" % i, b"L%d" % i, b"H%d" % i, key, 100)
        for i, rid in enumerate(rids)
    ]
    try:
        assert ds.put_reports(reports, (), JobSizes(3, 3, 3)) == ["stored"] * 3
        assert _payloads(ds) == {rid: (1, 100, None, None, None) for rid in rids}
        assert ds.count_rows("leader_job_shares", TASK) == 1
        # The value as `job_shares` documents it, in the row or (SQLite) in the job's file.
        value = b"".join(
            b"".join(len(x).to_bytes(4, "big") + x for x in (b"P%d" % i, b"L%d" % i, b"H%d" % i))
            for i in range(3)
        )
        files = _share_files(db)
        if db.dialect.name == "sqlite":
            assert _row_values(db) == [b""] and list(files.values()) == [value]
        else:
            assert _row_values(db) == [value] and files == {}
        assert ds.task_stats(TASK)["report_aggregations"] == {"start": 3}
        (lease,) = ds.acquire_aggregation_jobs(now=100, lease_duration=10, limit=10)
        _, read = ds.leader_job(lease)
        assert [
            (r.report_id, r.public_share, r.leader_input_share, r.helper_encrypted_share)
            for r in read
        ] == [(rid, b"P%d" % i, b"L%d" % i, b"H%d" % i) for i, rid in enumerate(rids)]
        outcomes = [
            ReportOutcome(rids[0], 7200, key, None, 0),
            ReportOutcome(rids[1], 7200, key, PrepareError.REPORT_TOO_EARLY, 1),
            ReportOutcome(rids[2], 7200, key, None, 2),
        ]
        shares = vdaf.field.from_ints([1, 1, 1]).reshape(3, 1, 1)
        ds.finish_leader_job(lease, outcomes, ShareAdder(vdaf, shares), requeue_at=500)
        assert ds.count_rows("leader_job_shares", TASK) == 0
        assert _share_files(db) == {}
        assert _payloads(ds) == {
            rids[0]: (1, 100, None, None, None),
            rids[1]: (0, 500, b"P1", b"L1", b"H1"),
            rids[2]: (1, 100, None, None, None),
        }
        assert ds.batch_totals(TASK, key, key + b"\xff").report_count == 2
        assert ds.task_stats(TASK)["report_aggregations"] == {"failed": 1, "finished": 2}
        # The requeued report waits for its time, then goes into a job the creator makes.
        made = [
            ds.create_aggregation_jobs(
                TASK,
                fixed_size_target=None,
                min_job_size=1,
                max_job_size=3,
                flush_before=10**6,
                now=now,
            )
            for now in (499, 500)
        ]
        assert made == [0, 1]
        (again,) = ds.acquire_aggregation_jobs(now=500, lease_duration=10, limit=10)
        _, read = ds.leader_job(again)
        assert [(r.report_id, r.leader_input_share) for r in read] == [(rids[1], b"L1")]
        one = vdaf.field.from_ints([1]).reshape(1, 1, 1)
        ds.finish_leader_job(
            again, [ReportOutcome(rids[1], 7200, key, None, 0)], ShareAdder(vdaf, one)
        )
        assert ds.batch_totals(TASK, key, key + b"\xff").report_count == 3
        assert all(p[2:] == (None, None, None) for p in _payloads(ds).values())
        # An abandoned job's shares go the same way.
        more = [
            NewReport(TASK, bytes([9 + i]) * 16, 7200, b"", b"L", b"H", key, 600) for i in range(2)
        ]
        assert ds.put_reports(more, (), JobSizes(2, 2, 2)) == ["stored"] * 2
        (dropped,) = ds.acquire_aggregation_jobs(now=600, lease_duration=10, limit=10)
        failed = [
            ReportOutcome(r.report_id, 7200, key, PrepareError.REPORT_DROPPED, None) for r in more
        ]
        ds.finish_leader_job(
            dropped, failed, ShareAdder(vdaf, vdaf.field.zeros((0, 1, 1))), abandoned=True
        )
        assert ds.count_rows("leader_job_shares", TASK) == 0
        assert _share_files(db) == {}
        assert all(p[2:] == (None, None, None) for p in _payloads(ds).values())
    finally:
        db.close()


def test_job_creation_leases_and_crash_safe_commit(ds: Datastore) -> None:
    vdaf = prio3_count()
    for i in range(5):
        _put(ds, bytes([i]) * 16, 7200 + i, None)
    # Too few reports for a job and none old enough to flush: nothing happens.
    assert (
        ds.create_aggregation_jobs(
            TASK, fixed_size_target=None, min_job_size=10, max_job_size=3, flush_before=0, now=100
        )
        == 0
    )
    assert (
        ds.create_aggregation_jobs(
            TASK, fixed_size_target=None, min_job_size=1, max_job_size=3, flush_before=0, now=100
        )
        == 2
    )
    assert ds.unaggregated_reports(TASK) == 0
    leases = ds.acquire_aggregation_jobs(now=100, lease_duration=10, limit=10)
    assert len(leases) == 2
    # Leased jobs are not handed out again until the lease expires.
    assert ds.acquire_aggregation_jobs(now=105, lease_duration=10, limit=10) == []
    retaken = ds.acquire_aggregation_jobs(now=111, lease_duration=10, limit=10)
    assert {lease.job_id for lease in retaken} == {lease.job_id for lease in leases}
    # The first holder lost its lease: its commit must not count anything.
    _, reports = ds.leader_job(retaken[0])
    outcomes = [
        ReportOutcome(r.report_id, r.client_time, bucket_key(r.client_time, 3600), None, i)
        for i, r in enumerate(reports)
    ]
    shares = vdaf.field.from_ints([1] * len(reports)).reshape(len(reports), 1, 1)
    stale = next(lease for lease in leases if lease.job_id == retaken[0].job_id)
    with pytest.raises(LeaseLostError):
        ds.finish_leader_job(stale, outcomes, ShareAdder(vdaf, shares))
    outcomes[0].error = PrepareError.VDAF_PREP_ERROR
    ds.finish_leader_job(retaken[0], outcomes, ShareAdder(vdaf, shares))
    totals = ds.batch_totals(TASK, bucket_key(0, 3600), bucket_key(10**6, 3600))
    assert totals.report_count == len(reports) - 1
    assert totals.checksum == report_checksum(r.report_id for r in reports[1:])
    assert vdaf.field.to_ints(ShareAdder(vdaf).total(totals.shares)) == [len(reports) - 1]
    # Committed once: only the other job is leasable again, and only this job's reports are
    # scrubbed (their ids stay for anti-replay).
    _, again = ds.leader_job(retaken[1])
    assert all(r.leader_input_share is not None for r in again)
    later = ds.acquire_aggregation_jobs(now=10**6, lease_duration=10, limit=10)
    assert [lease.job_id for lease in later] == [retaken[1].job_id]
    scrubbed = ds.db.run(
        "peek",
        lambda tx: tx.query(
            "SELECT report_id FROM client_reports WHERE public_share IS NULL"
            " AND task_number = (SELECT number FROM tasks WHERE task_id = :t)",
            {"t": TASK},
        ),
    )
    assert sorted(bytes(r["report_id"]) for r in scrubbed) == sorted(r.report_id for r in reports)
    assert _put(ds, reports[0].report_id, 7200, None) == "replayed"


def test_fixed_size_batches_fill_to_target(ds: Datastore) -> None:
    for i in range(7):
        _put(ds, bytes([i]) * 16, 7200, None)
    created = ds.create_aggregation_jobs(
        TASK, fixed_size_target=3, min_job_size=1, max_job_size=10, flush_before=10**6, now=100
    )
    assert created == 3
    batches = ds.db.run(
        "b",
        lambda tx: tx.query(
            "SELECT assigned, filled FROM batches WHERE task_id = :t ORDER BY assigned", {"t": TASK}
        ),
    )
    assert [(b["assigned"], b["filled"]) for b in batches] == [(1, 0), (3, 1), (3, 1)]


def test_covering_interval() -> None:
    iv = covering_interval(3601, 7300, 3600)
    assert (iv.start, iv.duration) == (3600, 7200)


def test_clock_advances() -> None:
    c = TestClock(10)
    c.advance(5)
    assert c.now() == 15
