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
from services.common.db import TransientDbError
from services.common.problems import InternalError

log = logging.getLogger(__name__)

#: What a queued upload is told once its group is committed: the store's outcome
#: (`put_reports`; COUNTED for a refusal), or the error that failed it.
Done = Callable[[str | Exception], None]
COUNTED = "counted"


class QueueFullError(InternalError):
    """The writer already holds `max_queue` uploads: try again later."""


@dataclass(frozen=True)
class Queued:
    """One upload for the writer: a validated report to store, or the (task id, reason) of a
    refusal to count, and whom to tell the outcome."""

    report: NewReport | None
    refusal: tuple[bytes, str] | None
    done: Done


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

    def store(self, report: NewReport, done: Done) -> None:
        """Queue a validated report; `done` runs in the writer thread after the commit.
        Raises `QueueFullError` (and `done` never runs) when the queue is full."""
        if not self.queue_all([Queued(report, None, done)]):
            raise QueueFullError

    def count_refusal(self, task_id: bytes, reason: str, done: Done) -> None:
        """Queue the count of an upload refused before the store."""
        if not self.queue_all([Queued(None, (task_id, reason), done)]):
            raise QueueFullError

    def queue_all(self, items: Sequence[Queued]) -> int:
        """Queue uploads in order, as many as the queue has room for: how many (the `done` of
        the others never runs). One lock and one wake-up of the writer for them all: a
        DAP-19 request's reports cost no hand-over each, and go into one group."""
        with self._cond:
            if self._closed:
                raise RuntimeError("the upload writer is closed")
            room = max(0, self._max_queue - len(self._queue))
            taken = items[:room]
            if not taken:
                return 0
            self._queue.extend(taken)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="upload-writer", daemon=True)
                self._thread.start()
            else:
                self._cond.notify()
            return len(taken)

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
                    return
                take = min(len(self._queue), self._max_group)
                group = [self._queue.popleft() for _ in range(take)]
            self._commit(group)

    def _commit(self, group: list[Queued]) -> None:
        reports = [p.report for p in group if p.report is not None]
        refusals = [p.refusal for p in group if p.refusal is not None]
        try:
            stored = iter(self._ds.put_reports(reports, refusals, self._jobs))
        except TransientDbError as exc:
            # The store stayed busy or unreachable through every retry: one by one would only
            # wait that long again per upload. Every request gets the error (a 500: retry).
            log.error("storing an upload group failed: %s", type(exc).__name__)
            for pending in group:
                self._tell(pending, exc)
            return
        except Exception as exc:
            if len(group) > 1:
                log.warning(
                    "an upload group failed (%s); storing its reports one by one",
                    type(exc).__name__,
                )
                for pending in group:
                    self._commit([pending])
                return
            log.error("storing an upload failed: %s", type(exc).__name__)
            self._tell(group[0], exc)
            return
        self.commits.inc()
        self.committed.inc(len(reports))
        for pending in group:
            self._tell(pending, next(stored) if pending.report is not None else COUNTED)

    @staticmethod
    def _tell(pending: Queued, outcome: str | Exception) -> None:
        try:
            pending.done(outcome)
        except Exception as exc:
            # A request's callback must not stop the writer; the others still get answers.
            log.error("upload callback failed: %s", type(exc).__name__)
