"""The reports of the leader jobs this process just committed, kept for its own aggregation
driver (DAP-09 §4.5.1.1; #15).

An upload group of a time_interval task makes its jobs in the transaction that stores the
reports (`uploads`); the driver then read every row back, shares and all, by a join over the
job (`LeaderJobStore.leader_job`), ~6 us a report. Until its job finishes, nothing changes a
job's report rows (`finish_leader_job` scrubs them, the job creator only takes reports in no
job), so the reports as committed are the reports as stored: the job's first lease in this
process takes them from here, once; any later lease (a retry after a release, a job another
process leased first) reads the store. Memory only, so a crash loses nothing the store lacks,
and bounded: past `max_reports` the oldest jobs are dropped and read from the store.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence

from services.aggregator.datastore.records import LeaderReport, NewReport


class FreshJobs:
    """Committed jobs' reports by (task id, job id); shared by the upload writer's thread
    and the drivers' threads."""

    def __init__(self, max_reports: int) -> None:
        self._max = max_reports
        self._jobs: OrderedDict[tuple[bytes, bytes], list[LeaderReport]] = OrderedDict()
        self._held = 0
        self._lock = threading.Lock()

    def add(self, task_id: bytes, job_id: bytes, reports: Sequence[NewReport]) -> None:
        """Keep a committed job's reports, in job order."""
        if self._max <= 0:
            return
        rows = [
            LeaderReport(
                i,
                r.report_id,
                r.client_time,
                r.public_share,
                r.leader_input_share,
                r.helper_encrypted_share,
            )
            for i, r in enumerate(reports)
        ]
        with self._lock:
            self._jobs[(task_id, job_id)] = rows
            self._held += len(rows)
            while self._held > self._max:
                _, dropped = self._jobs.popitem(last=False)
                self._held -= len(dropped)

    def take(self, task_id: bytes, job_id: bytes) -> list[LeaderReport] | None:
        """A kept job's reports, forgotten here; None if not kept."""
        with self._lock:
            rows = self._jobs.pop((task_id, job_id), None)
            if rows is not None:
                self._held -= len(rows)
            return rows
