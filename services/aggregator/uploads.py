"""Group commit of uploads at the leader (DAP-09 §4.4.2).

Each upload is validated in the request's worker thread (decrypt, check extensions and
token); the resulting row goes to this process's single `UploadWriter`, which stores whatever
has queued up meanwhile in one transaction (`Datastore.put_reports`) and then tells every
request its outcome. A request is answered only after its own report is committed, so a 201
survives kill -9, while N concurrent uploads cost one transaction instead of N competing ones
(SQLite has one writer; on PostgreSQL each commit is a WAL flush).

Groups form by themselves: while one commit runs, the next uploads queue up, so a lone upload
is stored at once and a busy leader writes large groups. A group with a job's worth of one
task's reports also makes their aggregation jobs (`Datastore.put_reports`). Refusals found
before the store are counted in the same transaction. If a group's transaction fails on its
data, its uploads are stored one by one, so one bad row fails only its own request; if the
store stays busy or unreachable through the retries, every upload of the group gets that
error at once.

The queue is bounded (`max_queue`): when the store falls behind, a new upload is refused with
`QueueFullError` (the route answers 503 with Retry-After) and everything already queued is
still committed and answered.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter

from services.aggregator.datastore import Datastore, JobSizes, NewReport
from services.common import thread_cpu
from services.common.db import TransientDbError
from services.common.problems import InternalError

log = logging.getLogger(__name__)

#: The store's outcome of one queued report (`put_reports`), or the error that failed it.
Outcome = str | Exception
#: What a queued batch is told once its group is committed: the outcome of each of its
#: reports, in order (none for a batch of refusals only).
Done = Callable[[Sequence[Outcome]], None]


class QueueFullError(InternalError):
    """The writer already holds `max_queue` uploads: try again later."""


@dataclass(slots=True)
class Queued:
    """The uploads of one request for the writer: validated reports to store, the (task id,
    reason) of refusals to count, and whom to tell the outcomes. A DAP-19 request's reports
    go in as one batch: one lock, one wake-up of the writer, one answer, and no object per
    report beyond the report itself."""

    reports: Sequence[NewReport]
    refusals: Sequence[tuple[bytes, str]]
    done: Done

    @property
    def size(self) -> int:
        return len(self.reports) + len(self.refusals)


class UploadWriter:
    """One writer thread per process, started on demand and ended after `idle_s` idle."""

    def __init__(
        self,
        datastore: Datastore,
        *,
        max_group: int,
        max_queue: int,
        jobs: JobSizes | None = None,
        idle_s: float = 2.0,
        metrics: CollectorRegistry | None = None,
    ) -> None:
        self._ds = datastore
        self._max_group = max_group
        self._max_queue = max_queue
        self._jobs = jobs
        self._idle_s = idle_s
        self._queue: deque[Queued] = deque()
        #: Uploads in `_queue`, what `max_queue` bounds.
        self._queued = 0
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._closed = False
        # Their ratio is the mean group size: how much the group commit saves.
        self.commits = Counter(
            "sagg_upload_commits_total",
            "Transactions of the upload writer in this process.",
            ("role",),
            registry=metrics,
        ).labels(role="leader")
        self.committed = Counter(
            "sagg_upload_commit_reports_total",
            "Uploads those transactions took to the store (stored or refused there).",
            ("role",),
            registry=metrics,
        ).labels(role="leader")

    def store(self, report: NewReport, done: Callable[[Outcome], None]) -> None:
        """Queue a validated report; `done` runs in the writer thread after the commit.
        Raises `QueueFullError` (and `done` never runs) when the queue is full."""
        if not self.queue(Queued((report,), (), lambda outcomes: done(outcomes[0]))):
            raise QueueFullError

    def count_refusal(self, task_id: bytes, reason: str, done: Callable[[], None]) -> None:
        """Queue the count of an upload refused before the store."""
        if not self.queue(Queued((), ((task_id, reason),), lambda _: done())):
            raise QueueFullError

    def queue(self, batch: Queued) -> bool:
        """Queue a batch whole if the queue has room for it (or is empty: a batch larger than
        the bound must still go in some time); False, and its `done` never runs, if not."""
        with self._cond:
            if self._closed:
                raise RuntimeError("the upload writer is closed")
            if self._queued and self._queued + batch.size > self._max_queue:
                return False
            self._queue.append(batch)
            self._queued += batch.size
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="upload-writer", daemon=True)
                self._thread.start()
            else:
                self._cond.notify()
            return True

    def close(self, timeout: float = 10.0) -> None:
        """Commit what is queued, then refuse new uploads."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
            self._cond.wait_for(lambda: self._thread is None, timeout)

    def _run(self) -> None:
        while True:
            with self._cond:
                if not self._queue and not self._closed:
                    self._cond.wait(self._idle_s)
                if not self._queue:
                    self._thread = None
                    self._cond.notify_all()
                    break
                # Whole batches, up to `max_group` uploads (at least one batch).
                group = [self._queue.popleft()]
                size = group[0].size
                while self._queue and size + self._queue[0].size <= self._max_group:
                    size += self._queue[0].size
                    group.append(self._queue.popleft())
                self._queued -= size
            self._commit(group)
        # It may have started and ended between two scrapes of /metrics.
        thread_cpu.retire()

    def _commit(self, group: list[Queued]) -> None:
        reports = [r for batch in group for r in batch.reports]
        refusals = [r for batch in group for r in batch.refusals]
        try:
            stored = self._ds.put_reports(reports, refusals, self._jobs)
        except TransientDbError as exc:
            # The store stayed busy or unreachable through every retry: one by one would only
            # wait that long again per upload. Every request gets the error (a 500: retry).
            log.error("storing an upload group failed: %s", type(exc).__name__)
            self._fail(group, exc)
            return
        except Exception as exc:
            if len(reports) + len(refusals) > 1:
                log.warning(
                    "an upload group failed (%s); storing its reports one by one",
                    type(exc).__name__,
                )
                for batch in group:
                    self._tell(batch, self._commit_apart(batch))
                return
            log.error("storing an upload failed: %s", type(exc).__name__)
            self._fail(group, exc)
            return
        self.commits.inc()
        self.committed.inc(len(reports))
        start = 0
        for batch in group:
            end = start + len(batch.reports)
            self._tell(batch, stored[start:end])
            start = end

    def _commit_apart(self, batch: Queued) -> list[Outcome]:
        """A batch's uploads one transaction each, so one bad row fails only its own report."""
        outcomes: list[Outcome] = []
        for report in batch.reports:
            try:
                outcomes += self._ds.put_reports([report])
            except Exception as exc:
                log.error("storing an upload failed: %s", type(exc).__name__)
                outcomes.append(exc)
            else:
                self.commits.inc()
                self.committed.inc()
        for refusal in batch.refusals:
            try:
                self._ds.put_reports([], [refusal])
            except Exception as exc:
                # The refusal stands; only its count is lost.
                log.error("counting an upload refusal failed: %s", type(exc).__name__)
        return outcomes

    def _fail(self, group: list[Queued], exc: Exception) -> None:
        """Every report of the group failed with `exc` (its refusals stand)."""
        for batch in group:
            self._tell(batch, [exc] * len(batch.reports))

    @staticmethod
    def _tell(batch: Queued, outcomes: Sequence[Outcome]) -> None:
        try:
            batch.done(outcomes)
        except Exception as exc:
            # A request's callback must not stop the writer; the others still get answers.
            log.error("upload callback failed: %s", type(exc).__name__)
