"""The collector store on SQLite and PostgreSQL: migrations, idempotent tasks, job leases."""

from __future__ import annotations

import pytest

from services.collector.store import (
    JobState,
    JobUpdate,
    PutTaskOutcome,
    StoreError,
    open_store,
)

NOW = 1_700_000_000_000


def _same(expected: str):
    return lambda stored: stored == expected


def test_migrations_are_idempotent(database_url: str) -> None:
    store = open_store(database_url)
    assert store.migrate() == 3
    open_store(database_url).ping()


def test_put_task_created_identical_conflict(database_url: str) -> None:
    store = open_store(database_url)
    outcome, stored = store.put_task("t1", '{"a":1}', "cfg1", "key1", NOW, _same('{"a":1}'))
    assert outcome is PutTaskOutcome.CREATED and stored.hpke_config == "cfg1"
    outcome, stored = store.put_task("t1", '{"a":1}', "cfg2", "key2", NOW, _same('{"a":1}'))
    # The existing key pair wins: a client may already have encrypted to it.
    assert outcome is PutTaskOutcome.IDENTICAL and stored.hpke_config == "cfg1"
    assert store.load_task("t1") is not None
    assert store.load_task("t1").hpke_private_key == "key1"  # type: ignore[union-attr]
    outcome, _ = store.put_task("t1", '{"a":2}', "cfg3", "key3", NOW, _same('{"a":2}'))
    assert outcome is PutTaskOutcome.CONFLICT
    assert "key1" not in repr(store.load_task("t1"))
    assert store.load_task("nope") is None


def test_jobs_need_a_task(database_url: str) -> None:
    store = open_store(database_url)
    assert not store.create_job("j", "no-such-task", "{}", NOW)
    assert store.get_job("j") is None


def test_leases_are_exclusive_and_fenced(database_url: str) -> None:
    store = open_store(database_url)
    store.put_task("t", "{}", "c", "k", NOW, _same("{}"))
    store.create_job("j1", "t", '{"type":"current_batch"}', NOW)
    store.create_job("j2", "t", '{"type":"current_batch"}', NOW + 5_000)

    first = store.acquire_jobs("a", NOW, 60_000, 10)
    assert [j.job_id for j in first] == ["j1"]  # j2 is not due yet
    assert first[0].lease_owner == "a" and first[0].state is JobState.NEW
    assert store.acquire_jobs("b", NOW + 1_000, 60_000, 10) == []  # j1 leased, j2 not due
    later = store.acquire_jobs("b", NOW + 6_000, 60_000, 10)
    assert [j.job_id for j in later] == ["j2"]

    # After the lease expires another owner takes j1 over, and the old owner's write is refused.
    stolen = store.acquire_jobs("c", NOW + 61_000, 60_000, 10)
    assert [j.job_id for j in stolen] == ["j1"]
    update = JobUpdate(state=JobState.POLLING, attempts=1, failures=0, next_attempt_ms=NOW)
    assert not store.release_job("j1", "a", update, NOW + 61_500)
    assert store.release_job("j1", "c", update, NOW + 61_500)
    job = store.get_job("j1")
    assert job is not None and job.state is JobState.POLLING and job.lease_owner is None

    done = JobUpdate(
        state=JobState.COMPLETE,
        attempts=2,
        failures=0,
        next_attempt_ms=NOW,
        report_count=3,
        interval_start=0,
        interval_duration=3600,
        result="[1, 2]",
    )
    assert store.acquire_jobs("c", NOW + 62_000, 60_000, 10)[0].job_id == "j1"
    assert store.release_job("j1", "c", done, NOW + 62_000)
    assert store.acquire_jobs("c", NOW + 62_000, 60_000, 10) == []  # j2 is still leased by b
    # Finished jobs are never leased again; j2's lease by b has expired by now.
    assert [j.job_id for j in store.acquire_jobs("c", NOW + 200_000, 60_000, 10)] == ["j2"]
    job = store.get_job("j1")
    assert job is not None and (job.state, job.result, job.report_count) == (
        JobState.COMPLETE,
        "[1, 2]",
        3,
    )
    assert store.get_job("missing") is None


def test_bad_urls_are_reported() -> None:
    with pytest.raises(StoreError, match="sqlite:///"):
        open_store("mysql://x")
    with pytest.raises(StoreError, match="migrate"):
        open_store("postgresql://nobody@127.0.0.1:1/none")
