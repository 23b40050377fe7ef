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
    decode_members,
    encode_members,
    insert_job,
)
from services.aggregator.datastore.base import StoreBase
from services.aggregator.datastore.batch_aggregations import add_outcomes
from services.aggregator.datastore.job_share_files import IN_FILE, JobShareFiles
from services.aggregator.datastore.leases import leased_row
from services.aggregator.datastore.records import (
    JobReport,
    LeaderReport,
    Lease,
    ReportOutcome,
    ShareSum,
    opt_bytes,
)
from services.aggregator.datastore.states import JobState, Stage
from services.aggregator.datastore.stats import count_rejections
from services.aggregator.datastore.task_numbers import TASK_NUMBER_OF, task_number
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
    insert_job(
        tx,
        task_id,
        job_id,
        "leader",
        batch_id,
        times,
        JobState.IN_PROGRESS,
        now,
        members=encode_members(reports),
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
                f" WHERE task_number = {TASK_NUMBER_OF} AND aggregation_started = 0"
                " AND received_at <= :now"
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

        created = self.db.run("create_aggregation_jobs", body)
        if created:
            self.aggregation_jobs_made.ring()
        return created

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
        members = [(bytes(r["report_id"]), int(r["client_time"])) for r in chunk]
        insert_leader_job(tx, task_id, batch_id, members, now)
        tx.update_in(
            "client_reports",
            "aggregation_started = 1",
            ("task_number", task_number(tx, task_id)),
            "report_id",
            [report_id for report_id, _ in members],
        )

    def leader_job(self, lease: Lease) -> tuple[Row, Sequence[JobReport]]:
        """The job row and its reports (with their stored shares), in job order: as this
        process committed them if it made the job just now (`fresh_jobs`), else as stored."""

        def body(tx: Tx) -> tuple[Row, Sequence[JobReport]]:
            job = leased_row(tx, "aggregation_jobs", lease)
            fresh = self._fresh.take(lease.task_id, lease.job_id)
            if fresh is not None:
                return job, fresh
            members = _members(tx, lease, job["members"])
            kept = _stored_shares(tx, lease, len(members), self._share_files)
            shares: list[tuple[bytes | None, ...]]
            if kept is not None:
                shares = list(kept)
            else:
                # A job the creator made: its reports' shares are in their rows.
                rows = tx.rows_in(
                    "client_reports",
                    ("report_id", "public_share", "leader_input_share", "helper_encrypted_share"),
                    ("task_number", task_number(tx, lease.task_id)),
                    "report_id",
                    [report_id for report_id, _ in members],
                )
                stored = {
                    bytes(r["report_id"]): (
                        opt_bytes(r["public_share"]),
                        opt_bytes(r["leader_input_share"]),
                        opt_bytes(r["helper_encrypted_share"]),
                    )
                    for r in rows
                }
                shares = [stored.get(report_id, (None, None, None)) for report_id, _ in members]
            return job, [
                LeaderReport(report_id, time, *three)
                for (report_id, time), three in zip(members, shares, strict=True)
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
        """Commit a leader job: output shares into batches, its reports' counts, job done.

        Reports whose batch got collected meanwhile are failed with batch_collected rather
        than added. With `requeue_at`, reports the helper found too early keep their shares
        and become available to a new job from that time on (DAP-09 §4.5.1.1 allows exactly
        this one retry); every other report is scrubbed. Returns the outcomes as committed."""

        def body(tx: Tx) -> list[ReportOutcome]:
            job = leased_row(tx, "aggregation_jobs", lease, "batch_id, members IS NULL AS legacy")
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
            failed = sum(1 for o in final if o.error is not None)
            if job["batch_id"] is not None and failed:
                unassign(tx, lease.task_id, bytes(job["batch_id"]), failed)
            requeue = {
                o.report_id
                for o in final
                if requeue_at is not None and o.error == PrepareError.REPORT_TOO_EARLY
            }
            _release_shares(
                tx, lease, [o.report_id for o in final], requeue, requeue_at, self._share_files
            )
            ids = {"t": lease.task_id, "j": lease.job_id}
            if job["legacy"]:
                # Made before its reports were kept in its row (migration 0011).
                tx.execute(
                    "DELETE FROM report_aggregations WHERE task_id = :t AND job_id = :j", ids
                )
            tx.execute(
                "UPDATE aggregation_jobs SET state = :s, lease_token = NULL, step = 1,"
                " finished_reports = :fin, failed_reports = :fail"
                " WHERE task_id = :t AND job_id = :j",
                {
                    **ids,
                    "s": JobState.ABANDONED if abandoned else JobState.FINISHED,
                    "fin": len(final) - failed,
                    "fail": failed,
                },
            )
            return final

        final = self.db.run("finish_leader_job", body)
        # After the commit that deleted its row: a crash in between leaves a file `sweep`
        # takes, never a row without its file.
        if self._share_files is not None:
            self._share_files.remove(lease.task_id, lease.job_id)
        return final


def _members(tx: Tx, lease: Lease, members: bytes | None) -> list[tuple[bytes, int]]:
    """A leader job's (report id, client time), in job order: from its row, or for a job made
    before migration 0011, from its report aggregations."""
    if members is not None:
        return decode_members(bytes(members))
    rows = tx.query(
        "SELECT report_id, client_time FROM report_aggregations"
        " WHERE task_id = :t AND job_id = :j ORDER BY ord",
        {"t": lease.task_id, "j": lease.job_id},
    )
    return [(bytes(r["report_id"]), int(r["client_time"])) for r in rows]


def _stored_shares(
    tx: Tx, lease: Lease, count: int, files: JobShareFiles | None
) -> list[job_shares.JobShares] | None:
    """The shares of a job the upload writer made (`job_shares`: its row's value, or its file,
    `job_share_files`), decoded for its `count` reports; None for a job the creator made (its
    reports' shares are in their rows)."""
    row = tx.query_one(
        "SELECT shares FROM leader_job_shares WHERE task_id = :t AND job_id = :j",
        {"t": lease.task_id, "j": lease.job_id},
    )
    if row is None:
        return None
    value = bytes(row["shares"])
    if value == IN_FILE and files is not None:
        value = files.read(lease.task_id, lease.job_id)
    return job_shares.decode(value, count)


def _release_shares(
    tx: Tx,
    lease: Lease,
    members: list[bytes],
    requeue: set[bytes],
    requeue_at: int | None,
    files: JobShareFiles | None,
) -> None:
    """A finished job's shares, gone: its shares row deleted (`job_shares`), or for a job the
    creator made, its reports' (`members`, in job order) payload columns cleared. The reports
    in `requeue` keep their shares (back in their rows) and become available to a new job
    from `requeue_at`."""
    kept = _stored_shares(tx, lease, len(members), files) if requeue else None
    back: list[dict[str, object]] = [{"r": rid} for rid in requeue]
    restore = ""
    ids = {"t": lease.task_id, "j": lease.job_id}
    if tx.execute("DELETE FROM leader_job_shares WHERE task_id = :t AND job_id = :j", ids):
        if kept is not None:
            back = [
                {"r": rid, "p": public, "l": leader, "h": helper}
                for rid, (public, leader, helper) in zip(members, kept, strict=True)
                if rid in requeue
            ]
            restore = ", public_share = :p, leader_input_share = :l, helper_encrypted_share = :h"
    else:
        tx.update_in(
            "client_reports",
            "public_share = NULL, leader_input_share = NULL, helper_encrypted_share = NULL",
            ("task_number", task_number(tx, lease.task_id)),
            "report_id",
            [rid for rid in members if rid not in requeue],
        )
    tx.execute_many(
        f"UPDATE client_reports SET aggregation_started = 0, received_at = :at{restore}"
        f" WHERE task_number = {TASK_NUMBER_OF} AND report_id = :r",
        [{"t": lease.task_id, "at": requeue_at, **b} for b in back],
    )
