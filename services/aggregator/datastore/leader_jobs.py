"""Leader aggregation jobs (DAP-09 §4.5.1.1): unaggregated reports grouped into jobs (and, for
fixed_size tasks, into batches), and a finished job committed with its output shares.

Jobs are created in the same transaction that marks their reports started, and a job's output
shares are added in the transaction that finishes it, so a restart at any point neither loses
nor double-counts a report.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence

from services.aggregator.datastore import job_shares
from services.aggregator.datastore.aggregation_jobs import (
    insert_job,
    insert_report_aggregations,
)
from services.aggregator.datastore.base import StoreBase
from services.aggregator.datastore.batch_aggregations import add_outcomes
from services.aggregator.datastore.leases import leased_row
from services.aggregator.datastore.records import (
    LeaderReport,
    Lease,
    ReportOutcome,
    ShareSum,
    opt_bytes,
)
from services.aggregator.datastore.states import JobState, ReportAggregationState, Stage
from services.aggregator.datastore.stats import count_rejections
from services.common.db import Row, Tx
from shared.dap.messages import PrepareError


def unassign(tx: Tx, task_id: bytes, batch_id: bytes | None, count: int) -> None:
    """Give `count` reports' places in a fixed_size batch back: they will not be in it."""
    if batch_id is None or count == 0:
        return
    tx.execute(
        "UPDATE batches SET assigned = assigned - :n, filled = 0"
        " WHERE task_id = :t AND batch_key = :k",
        {"t": task_id, "k": batch_id, "n": count},
    )


def insert_leader_job(
    tx: Tx,
    task_id: bytes,
    batch_id: bytes | None,
    reports: Sequence[tuple[bytes, int]],
    now: int,
) -> bytes:
    """A new leader job over `reports` (report id, client time), in this order; its id. The
    caller marks the reports started in the same transaction."""
    job_id = secrets.token_bytes(16)
    times = [time for _, time in reports]
    insert_job(tx, task_id, job_id, "leader", batch_id, times, JobState.IN_PROGRESS, now)
    insert_report_aggregations(
        tx,
        task_id,
        job_id,
        [(report_id, time, ReportAggregationState.START, None) for report_id, time in reports],
    )
    return job_id


class LeaderJobStore(StoreBase):
    def create_aggregation_jobs(
        self,
        task_id: bytes,
        *,
        fixed_size_target: int | None,
        min_job_size: int,
        max_job_size: int,
        flush_before: int,
        now: int,
        scan_limit: int = 5000,
    ) -> int:
        """Group unaggregated reports into new jobs; the number of jobs created.

        Reports left over below `min_job_size` wait, unless the oldest was received before
        `flush_before`: small deployments must not wait forever. For fixed_size tasks
        (`fixed_size_target` = reports per batch), reports go into outstanding batches in order
        until each holds the target, and a job never spans two batches.
        """

        def body(tx: Tx) -> int:
            rows = tx.query(
                "SELECT report_id, client_time, received_at FROM client_reports"
                " WHERE task_id = :t AND aggregation_started = 0 AND received_at <= :now"
                " ORDER BY client_time, report_id LIMIT :n",
                {"t": task_id, "n": scan_limit, "now": now},
            )
            if not rows:
                return 0
            flush = min(int(r["received_at"]) for r in rows) < flush_before
            groups: list[tuple[bytes | None, list[Row]]]
            if fixed_size_target is None:
                groups = [(None, rows)]
            else:
                groups = self._assign_to_batches(tx, task_id, rows, fixed_size_target, flush, now)
            created = 0
            for batch_id, members in groups:
                for start in range(0, len(members), max_job_size):
                    chunk = members[start : start + max_job_size]
                    if len(chunk) < min_job_size and not flush:
                        unassign(tx, task_id, batch_id, len(chunk))
                        continue
                    self._insert_leader_job(tx, task_id, batch_id, chunk, now)
                    created += 1
            return created

        return self.db.run("create_aggregation_jobs", body)

    def _assign_to_batches(
        self,
        tx: Tx,
        task_id: bytes,
        rows: list[Row],
        target: int,
        flush: bool,
        now: int,
    ) -> list[tuple[bytes | None, list[Row]]]:
        outstanding = tx.query(
            "SELECT batch_key, assigned FROM batches WHERE task_id = :t AND filled = 0"
            " AND collected = 0 ORDER BY created_at, batch_key",
            {"t": task_id},
        )
        groups: list[tuple[bytes | None, list[Row]]] = []
        pending = list(rows)
        while pending:
            if outstanding:
                batch = outstanding.pop(0)
                key, assigned = bytes(batch["batch_key"]), int(batch["assigned"])
            else:
                key, assigned = secrets.token_bytes(32), 0
                tx.execute(
                    "INSERT INTO batches (task_id, batch_key, collected, assigned, filled,"
                    " created_at) VALUES (:t, :k, 0, 0, 0, :now)",
                    {"t": task_id, "k": key, "now": now},
                )
            take = pending[: max(0, target - assigned)]
            pending = pending[len(take) :]
            if not take:
                tx.execute(
                    "UPDATE batches SET filled = 1 WHERE task_id = :t AND batch_key = :k",
                    {"t": task_id, "k": key},
                )
                continue
            tx.execute(
                "UPDATE batches SET assigned = assigned + :n, filled = :f"
                " WHERE task_id = :t AND batch_key = :k",
                {"t": task_id, "k": key, "n": len(take), "f": int(assigned + len(take) >= target)},
            )
            groups.append((key, take))
        return groups

    def _insert_leader_job(
        self, tx: Tx, task_id: bytes, batch_id: bytes | None, chunk: list[Row], now: int
    ) -> None:
        job_id = insert_leader_job(
            tx,
            task_id,
            batch_id,
            [(bytes(r["report_id"]), int(r["client_time"])) for r in chunk],
            now,
        )
        # One statement over the job's rows (the report_aggregations just inserted) rather
        # than one parameter set per report.
        tx.execute(
            "UPDATE client_reports SET aggregation_started = 1 WHERE task_id = :t AND report_id"
            " IN (SELECT report_id FROM report_aggregations WHERE task_id = :t AND job_id = :j)",
            {"t": task_id, "j": job_id},
        )

    def leader_job(self, lease: Lease) -> tuple[Row, list[LeaderReport]]:
        """The job row and its reports (with their stored shares), in job order: as this
        process committed them if it made the job just now (`fresh_jobs`), else as stored."""

        def body(tx: Tx) -> tuple[Row, list[LeaderReport]]:
            job = leased_row(tx, "aggregation_jobs", lease)
            fresh = self._fresh.take(lease.task_id, lease.job_id)
            if fresh is not None:
                return job, fresh
            ids = {"t": lease.task_id, "j": lease.job_id}
            kept = tx.query_one(
                "SELECT shares FROM leader_job_shares WHERE task_id = :t AND job_id = :j", ids
            )
            if kept is not None:
                members = tx.query(
                    "SELECT ord, report_id, client_time FROM report_aggregations"
                    " WHERE task_id = :t AND job_id = :j ORDER BY ord",
                    ids,
                )
                shares = job_shares.decode(bytes(kept["shares"]), len(members))
                return job, [
                    LeaderReport(int(m["ord"]), bytes(m["report_id"]), int(m["client_time"]), *s)
                    for m, s in zip(members, shares, strict=True)
                ]
            rows = tx.query(
                "SELECT ra.ord, ra.report_id, ra.client_time, cr.public_share,"
                " cr.leader_input_share, cr.helper_encrypted_share"
                " FROM report_aggregations ra LEFT JOIN client_reports cr"
                " ON cr.task_id = ra.task_id AND cr.report_id = ra.report_id"
                " WHERE ra.task_id = :t AND ra.job_id = :j ORDER BY ra.ord",
                {"t": lease.task_id, "j": lease.job_id},
            )
            return job, [
                LeaderReport(
                    int(r["ord"]),
                    bytes(r["report_id"]),
                    int(r["client_time"]),
                    opt_bytes(r["public_share"]),
                    opt_bytes(r["leader_input_share"]),
                    opt_bytes(r["helper_encrypted_share"]),
                )
                for r in rows
            ]

        return self.db.run("leader_job", body)

    def finish_leader_job(
        self,
        lease: Lease,
        outcomes: Sequence[ReportOutcome],
        shares: ShareSum,
        *,
        abandoned: bool = False,
        requeue_at: int | None = None,
        bucket_precision: int | None = None,
    ) -> list[ReportOutcome]:
        """Commit a leader job: output shares into batches, report states, job done.

        Reports whose batch got collected meanwhile are failed with batch_collected rather
        than added. With `requeue_at`, reports the helper found too early keep their shares
        and become available to a new job from that time on (DAP-09 §4.5.1.1 allows exactly
        this one retry); every other report is scrubbed. Returns the outcomes as committed."""

        def body(tx: Tx) -> list[ReportOutcome]:
            job = leased_row(tx, "aggregation_jobs", lease, "batch_id")
            shard = self._shard()
            final = add_outcomes(
                tx,
                lease.task_id,
                outcomes,
                shares,
                shard,
                check_saturation=None,
                bucket_precision=bucket_precision,
            )
            count_rejections(
                tx,
                lease.task_id,
                Stage.AGGREGATION,
                [r for r in (o.rejection_reason for o in final) if r is not None],
                shard,
            )
            failed_in_batch = sum(1 for o in final if o.error is not None)
            if job["batch_id"] is not None and failed_in_batch:
                unassign(tx, lease.task_id, bytes(job["batch_id"]), failed_in_batch)
            # Set-based where every report of the job gets the same change: all finished, then
            # the failed ones one by one; shares scrubbed for all but the requeued ones.
            ids = {"t": lease.task_id, "j": lease.job_id}
            tx.execute(
                "UPDATE report_aggregations SET state = :s, error = NULL"
                " WHERE task_id = :t AND job_id = :j",
                {**ids, "s": ReportAggregationState.FINISHED},
            )
            tx.execute_many(
                "UPDATE report_aggregations SET state = :s, error = :e"
                " WHERE task_id = :t AND job_id = :j AND ord = :o",
                [
                    {**ids, "o": ord_, "s": ReportAggregationState.FAILED, "e": int(o.error)}
                    for ord_, o in enumerate(final)
                    if o.error is not None
                ],
            )
            requeue = {
                o.report_id
                for o in final
                if requeue_at is not None and o.error == PrepareError.REPORT_TOO_EARLY
            }
            _release_shares(tx, lease, requeue, requeue_at)
            tx.execute(
                "UPDATE aggregation_jobs SET state = :s, lease_token = NULL, step = 1"
                " WHERE task_id = :t AND job_id = :j",
                {
                    "s": JobState.ABANDONED if abandoned else JobState.FINISHED,
                    "t": lease.task_id,
                    "j": lease.job_id,
                },
            )
            return final

        return self.db.run("finish_leader_job", body)


def _release_shares(tx: Tx, lease: Lease, requeue: set[bytes], requeue_at: int | None) -> None:
    """A finished job's shares, gone: its shares row deleted (`job_shares`), or for a job the
    creator made, its reports' payload columns cleared. The reports in `requeue` keep their
    shares (back in their rows) and become available to a new job from `requeue_at`."""
    ids = {"t": lease.task_id, "j": lease.job_id}
    kept = (
        tx.query_one("SELECT shares FROM leader_job_shares WHERE task_id = :t AND job_id = :j", ids)
        if requeue
        else None
    )
    back: list[dict[str, object]] = [{"r": rid} for rid in requeue]
    restore = ""
    if tx.execute("DELETE FROM leader_job_shares WHERE task_id = :t AND job_id = :j", ids):
        if kept is not None:
            members = tx.query(
                "SELECT report_id FROM report_aggregations WHERE task_id = :t AND job_id = :j"
                " ORDER BY ord",
                ids,
            )
            shares = job_shares.decode(bytes(kept["shares"]), len(members))
            back = [
                {"r": rid, "p": public, "l": leader, "h": helper}
                for rid, (public, leader, helper) in zip(
                    (bytes(m["report_id"]) for m in members), shares, strict=True
                )
                if rid in requeue
            ]
            restore = ", public_share = :p, leader_input_share = :l, helper_encrypted_share = :h"
    else:
        tx.execute(
            "UPDATE client_reports SET public_share = NULL, leader_input_share = NULL,"
            " helper_encrypted_share = NULL WHERE task_id = :t AND report_id IN"
            " (SELECT report_id FROM report_aggregations WHERE task_id = :t AND job_id = :j"
            "  AND (error IS NULL OR error != :keep))",
            # Without a requeue time no report keeps its shares (-1 is no PrepareError).
            {
                **ids,
                "keep": int(PrepareError.REPORT_TOO_EARLY) if requeue_at is not None else -1,
            },
        )
    tx.execute_many(
        f"UPDATE client_reports SET aggregation_started = 0, received_at = :at{restore}"
        " WHERE task_id = :t AND report_id = :r",
        [{"t": lease.task_id, "at": requeue_at, **b} for b in back],
    )
