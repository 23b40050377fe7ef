"""The reports of the leader jobs this process just committed, kept for its own aggregation
driver (DAP-09 §4.5.1.1; #15).

An upload group of a time_interval task makes its jobs in the transaction that stores the
reports (`uploads`); the driver then read every row back, shares and all, by a join over the
job (`LeaderJobStore.leader_job`), ~6 us a report. Until its job finishes, nothing changes a
job's reports or its shares row (`finish_leader_job` deletes it, the job creator only takes
reports in no job), so the reports as committed are the reports as stored: the job's first
lease in this process takes them from here, once; any later lease (a retry after a release, a
job another process leased first) reads the store. Memory only, so a crash loses nothing the
store lacks, and bounded by the encoded bytes of the shares it holds: past `max_bytes` the
oldest jobs are dropped and read from the store. A burst of uploads makes jobs faster than
the driver takes them, and the driver takes the oldest first: a bound of a few jobs dropped
most of a burst's jobs before their turn (~5 us a report more to read them back, #15).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence

from services.aggregator.datastore.records import JobReport, NewReport


class FreshJobs:
    """Committed jobs' reports by (task id, job id); shared by the upload writer's thread
    and the drivers' threads."""

    def __init__(self, max_bytes: int) -> None:
        self._max = max_bytes
        self._jobs: OrderedDict[tuple[bytes, bytes], tuple[Sequence[NewReport], int]] = (
            OrderedDict()
        )
        #: Bytes of the held jobs' shares as `job_shares` encodes them.
        self._held = 0
        self._lock = threading.Lock()

    def add(self, task_id: bytes, job_id: bytes, reports: Sequence[NewReport], size: int) -> None:
        """Keep a committed job's reports, in job order, as the writer made them (nothing
        changes them after the commit); `size` is the bytes of their shares (`job_shares`)."""
        if self._max <= 0:
            return
        with self._lock:
            self._jobs[(task_id, job_id)] = reports, size
            self._held += size
            while self._held > self._max:
                _, (_, dropped) = self._jobs.popitem(last=False)
                self._held -= dropped

    def take(self, task_id: bytes, job_id: bytes) -> Sequence[JobReport] | None:
        """A kept job's reports, forgotten here; None if not kept."""
        with self._lock:
            kept = self._jobs.pop((task_id, job_id), None)
            if kept is None:
                return None
            reports, size = kept
            self._held -= size
            return reports
