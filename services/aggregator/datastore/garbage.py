"""Garbage collection of per-report rows no aggregator would accept again
(`services.aggregator.drivers.garbage` says when that is)."""

from __future__ import annotations

from services.aggregator.datastore.base import StoreBase
from services.aggregator.datastore.records import Garbage
from services.aggregator.datastore.states import JobState
from services.aggregator.datastore.task_numbers import TASK_NUMBER_OF
from services.common.db import Tx


class GarbageStore(StoreBase):
    def sweep_job_share_files(self) -> int:
        """Unlink the job share files that no job names any more and no transaction under way
        can still commit (`job_share_files`); how many. None in a PostgreSQL store."""
        files = self._share_files
        if files is None:
            return 0
        rows = self.db.run(
            "job_share_files",
            lambda tx: tx.query("SELECT task_id, job_id FROM leader_job_shares"),
        )
        return files.sweep((bytes(r["task_id"]), bytes(r["job_id"])) for r in rows)

    def collect_garbage(
        self, task_id: bytes, *, report_horizon: int | None, token_horizon: int, limit: int
    ) -> Garbage:
        """Delete up to `limit` rows of each kind that can no longer matter (`drivers.garbage`).

        - reports timestamped before `report_horizon` (no horizon: kept forever), unless a
          leader job in progress still needs their payload; their ids leave the replay set,
          which is safe because both aggregators refuse reports that old;
        - aggregation jobs whose every report is that old, except leader jobs in progress,
          and DAP-19 jobs a helper deferred before it;
        - spent tokens spent before `token_horizon`, which no aggregator would accept again.
        """

        def body(tx: Tx) -> Garbage:
            reports = jobs = 0
            if report_horizon is not None:
                horizon = {"t": task_id, "h": report_horizon, "n": limit}
                # `aggregation_started IN (0, 1)` lets the (task, started, time) index serve.
                reports = tx.execute(
                    f"DELETE FROM client_reports WHERE task_number = {TASK_NUMBER_OF}"
                    " AND report_id IN (SELECT report_id FROM client_reports"
                    f" WHERE task_number = {TASK_NUMBER_OF}"
                    " AND aggregation_started IN (0, 1) AND client_time < :h"
                    " AND (aggregation_started = 0 OR leader_input_share IS NULL) LIMIT :n)",
                    horizon,
                )
                expired_jobs = (
                    "SELECT job_id FROM aggregation_jobs WHERE task_id = :t AND time_max < :h"
                    f" AND NOT (role = 'leader' AND state = '{JobState.IN_PROGRESS}') LIMIT :n"
                )
                job_ids = [r["job_id"] for r in tx.query(expired_jobs, horizon)]
                rows = [{"t": task_id, "j": job_id} for job_id in job_ids]
                tx.execute_many(
                    "DELETE FROM aggregation_jobs WHERE task_id = :t AND job_id = :j", rows
                )
                # A deferred job the leader never came back for (DAP-19 §3.1): deferred
                # before the horizon, its reports are all older than it.
                jobs = len(job_ids) + tx.execute(
                    "DELETE FROM deferred_aggregation_jobs WHERE task_id = :t AND job_id IN ("
                    " SELECT job_id FROM deferred_aggregation_jobs WHERE task_id = :t"
                    " AND created_at < :h LIMIT :n)",
                    horizon,
                )
            tokens = tx.execute(
                "DELETE FROM spent_tokens WHERE task_id = :t AND spent_at < :h AND nonce IN ("
                " SELECT nonce FROM spent_tokens WHERE task_id = :t AND spent_at < :h LIMIT :n)",
                {"t": task_id, "h": token_horizon, "n": limit},
            )
            return Garbage(reports, jobs, tokens)

        return self.db.run("collect_garbage", body)
