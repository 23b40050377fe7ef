"""The group-commit upload writer: groups, answers after commit, failure isolation, close."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from services.aggregator.datastore import Datastore, NewReport, UploadOutcome
from services.aggregator.uploads import Outcome, Queued, QueueFullError, UploadWriter
from services.common.db import Database, TransientDbError

TASK = b"\x02" * 32


@pytest.fixture
def ds(db_url: str) -> Iterator[Datastore]:
    db = Database.open(db_url, pool_size=4)
    store = Datastore(db, shards=2)
    store.migrate()
    assert store.put_task(TASK, "leader", {}, b"h" * 32, None, None, 0) == "created"
    yield store
    db.close()


def _report(i: int, client_time: Any = 7200) -> NewReport:
    return NewReport(TASK, i.to_bytes(16, "big"), client_time, b"p", b"l", b"h", None, 100)


class _Answers:
    """Collects the writer's answers; `stored_then` is what the store held at each answer."""

    def __init__(self, ds: Datastore, expected: int) -> None:
        self.ds = ds
        self.outcomes: dict[int, str | Exception] = {}
        self.stored_then: dict[int, int] = {}
        self._left = expected
        self._lock = threading.Lock()
        self.all_in = threading.Event()

    def callback(self, i: int) -> Any:
        def done(outcome: str | Exception) -> None:
            # Read in the writer thread, right when the request would be answered.
            rows = self.ds.db.run(
                "probe",
                lambda tx: tx.query(
                    "SELECT COUNT(*) AS n FROM client_reports WHERE report_id = :r",
                    {"r": i.to_bytes(16, "big")},
                ),
            )
            with self._lock:
                self.outcomes[i] = outcome
                self.stored_then[i] = int(rows[0]["n"])
                self._left -= 1
                if self._left == 0:
                    self.all_in.set()

        return done

    def counted(self, i: int) -> Any:
        """The callback of a refusal's count: records COUNTED under `i`."""
        callback = self.callback(i)
        return lambda: callback(COUNTED)


COUNTED = "counted"


def test_concurrent_uploads_are_committed_in_groups_and_answered_after_commit(
    ds: Datastore,
) -> None:
    registry = CollectorRegistry()
    writer = UploadWriter(ds, max_group=16, max_queue=1024, metrics=registry)
    n = 60
    answers = _Answers(ds, n + 2)
    # Keep the writer busy with a slow first group so that the rest queue up behind it.
    gate, entered = threading.Event(), threading.Event()
    original = ds.put_reports

    def slow_first(*args: Any, **kwargs: Any) -> list[UploadOutcome]:
        entered.set()
        gate.wait(5)
        return original(*args, **kwargs)

    ds.put_reports = slow_first  # type: ignore[method-assign]
    writer.store(_report(0), answers.callback(0))
    assert entered.wait(5)
    threads = [
        threading.Thread(target=writer.store, args=(_report(i), answers.callback(i)))
        for i in range(1, n)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    writer.store(_report(1), answers.callback(n))  # a replay, queued behind its original
    writer.count_refusal(TASK, "hpke_decrypt_error", answers.counted(n + 1))
    gate.set()
    assert answers.all_in.wait(10)
    ds.put_reports = original  # type: ignore[method-assign]

    assert [answers.outcomes[i] for i in range(n)] == ["stored"] * n
    assert answers.outcomes[n] == "replayed"
    assert answers.outcomes[n + 1] == COUNTED
    # Every report was in the store when its request was answered.
    assert all(answers.stored_then[i] == 1 for i in range(n))
    leader = {"role": "leader"}
    assert registry.get_sample_value("sagg_upload_commit_reports_total", leader) == n + 1
    # One slow group, then the queue in groups of at most 16.
    commits = registry.get_sample_value("sagg_upload_commits_total", leader)
    assert commits == 1 + -(-(n + 2) // 16), commits
    assert ds.count_rows("client_reports", TASK) == n
    assert ds.rejection_counts(TASK)["upload"] == {
        "hpke_decrypt_error": 1,
        "report_replayed": 1,
    }
    writer.close()


def test_a_bad_report_fails_only_its_own_upload(ds: Datastore) -> None:
    writer = UploadWriter(ds, max_group=64, max_queue=1024)
    answers = _Answers(ds, 5)
    gate, entered = threading.Event(), threading.Event()
    original = ds.put_reports
    calls: list[int] = []

    def gated(reports: Any, *args: Any, **kwargs: Any) -> list[UploadOutcome]:
        calls.append(len(reports))
        if len(calls) == 1:
            entered.set()
            gate.wait(5)
        return original(reports, *args, **kwargs)

    ds.put_reports = gated  # type: ignore[method-assign]
    writer.store(_report(100), answers.callback(100))
    assert entered.wait(5)
    for i in range(4):
        # Report 2 breaks a NOT NULL column: its group's transaction fails as a whole.
        writer.store(_report(i, None if i == 2 else 7200), answers.callback(i))
    gate.set()
    assert answers.all_in.wait(10)
    assert answers.outcomes[100] == "stored"
    assert [answers.outcomes[i] for i in (0, 1, 3)] == ["stored"] * 3
    assert isinstance(answers.outcomes[2], Exception)
    # The failed group of four was retried report by report.
    assert calls == [1, 4, 1, 1, 1, 1]
    assert ds.count_rows("client_reports", TASK) == 4
    writer.close()


def test_a_batch_goes_in_whole_or_not_at_all_and_is_answered_once(ds: Datastore) -> None:
    """A DAP-19 request's uploads go in as one batch: whole if the queue has room for it,
    else not at all; its reports are committed in one group and answered together, in
    order; a batch too large for the bound goes in once the queue is empty."""
    writer = UploadWriter(ds, max_group=64, max_queue=4)
    gate, entered = threading.Event(), threading.Event()
    original = ds.put_reports
    groups: list[int] = []

    def held(reports: Any, *args: Any, **kwargs: Any) -> list[UploadOutcome]:
        groups.append(len(reports))
        entered.set()
        gate.wait(5)
        return original(reports, *args, **kwargs)

    ds.put_reports = held  # type: ignore[method-assign]
    first = _Answers(ds, 1)
    writer.store(_report(100), first.callback(100))
    assert entered.wait(5)
    told: list[Sequence[Outcome]] = []
    batch = Queued([_report(i) for i in (0, 1, 2)], [(TASK, "hpke_decrypt_error")], told.append)
    assert writer.queue(batch)
    # Full: a one-report batch does not fit, nor does a single upload.
    assert not writer.queue(Queued([_report(3)], (), told.append))
    with pytest.raises(QueueFullError):
        writer.store(_report(4), first.callback(4))
    gate.set()
    for _ in range(250):
        if told:
            break
        threading.Event().wait(0.02)
    assert told == [["stored"] * 3]
    assert groups == [1, 3]
    assert ds.count_rows("client_reports", TASK) == 4
    assert ds.rejection_counts(TASK)["upload"] == {"hpke_decrypt_error": 1}
    ds.put_reports = original  # type: ignore[method-assign]
    # Larger than the bound, into an empty queue: stored all the same.
    big = [_report(i) for i in range(10, 16)]
    assert writer.queue(Queued(big, (), told.append))
    writer.close()
    assert told[-1] == ["stored"] * 6
    assert ds.count_rows("client_reports", TASK) == 10


def test_close_commits_what_is_queued_and_refuses_more(ds: Datastore) -> None:
    writer = UploadWriter(ds, max_group=8, max_queue=1024, idle_s=0.05)
    answers = _Answers(ds, 20)
    for i in range(20):
        writer.store(_report(i), answers.callback(i))
    writer.close()
    assert answers.all_in.is_set()
    assert ds.count_rows("client_reports", TASK) == 20
    with pytest.raises(RuntimeError):
        writer.store(_report(99), answers.callback(99))


def test_the_writer_thread_ends_when_idle_and_comes_back(ds: Datastore) -> None:
    writer = UploadWriter(ds, max_group=8, max_queue=1024, idle_s=0.05)
    first = _Answers(ds, 1)
    writer.store(_report(1), first.callback(1))
    assert first.all_in.wait(5)
    for _ in range(100):
        if writer._thread is None:
            break
        threading.Event().wait(0.02)
    else:
        pytest.fail("the idle writer thread did not end")
    second = _Answers(ds, 1)
    writer.store(_report(2), second.callback(2))
    assert second.all_in.wait(5)
    assert second.outcomes[2] == "stored"
    writer.close()


def test_a_store_that_stays_unavailable_fails_the_group_at_once(ds: Datastore) -> None:
    writer = UploadWriter(ds, max_group=64, max_queue=1024)
    answers = _Answers(ds, 4)
    calls: list[int] = []
    gate, entered = threading.Event(), threading.Event()

    def unavailable(reports: Any, *_: Any, **__: Any) -> list[UploadOutcome]:
        calls.append(len(reports))
        entered.set()
        gate.wait(5)
        raise TransientDbError("database is locked")

    ds.put_reports = unavailable  # type: ignore[method-assign]
    writer.store(_report(0), answers.callback(0))
    assert entered.wait(5)
    for i in range(1, 4):
        writer.store(_report(i), answers.callback(i))
    gate.set()
    assert answers.all_in.wait(10)
    assert all(isinstance(answers.outcomes[i], TransientDbError) for i in range(4))
    # No report-by-report retry of a group the store could not take.
    assert calls == [1, 3]
    writer.close()
