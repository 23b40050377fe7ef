"""Leader collection jobs (DAP-09 §4.6.1): created after the checks allowed up front, then
frozen in one transaction (the batch marked collected, the leader's share, count and checksum
kept with the job) so the request to the helper is the same however often it is retried.

With aggregator noise (004 §5) the frozen share is noised once per batch and kept in
``leader_noised_shares``, so a retried or repeated collection of the batch carries the same
noise; the draw is the aggregator's (`services.aggregator.noise`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable

from services.aggregator.datastore.base import StoreBase
from services.aggregator.datastore.batch_aggregations import (
    batch_totals,
    mark_collected,
    rate_refusal,
)
from services.aggregator.datastore.leases import check_lease, leased_row
from services.aggregator.datastore.records import (
    BatchRules,
    BatchTotals,
    EarlierQueries,
    Lease,
    RatePolicy,
    ShareSum,
    opt_bytes,
)
from services.aggregator.datastore.states import CollectionState, JobState
from services.aggregator.datastore.task_numbers import TASK_NUMBER_OF
from services.common.db import Params, Row, Tx
from shared.dap.problems import ProblemType


class CollectionStore(StoreBase):
    def put_collection_job(
        self,
        task_id: bytes,
        job_id: bytes,
        request: bytes,
        query_type: int,
        current_batch: bool,
        agg_param: bytes,
        batch_key: bytes | None,
        interval: tuple[int, int] | None,
        rules: BatchRules,
        now: int,
    ) -> tuple[str, ProblemType | None]:
        """Create a collection job after the checks DAP-09 §4.6.5 allows up front.

        Deleted jobs still count for overlap and query counts: deleting discards a result,
        not the fact that the batch was queried. Jobs failed with invalidBatchSize do not:
        neither aggregator released anything of their batch (the leader refuses before
        freezing it, the helper before answering), so a collector whose interval was refused
        for a surging bucket (001 §4.8) may still collect the other buckets.
        ('created'|'exists'|'conflict', None) or ('rejected', problem)."""
        request_hash = hashlib.sha256(request).digest()

        def body(tx: Tx) -> tuple[str, ProblemType | None]:
            existing = tx.query_one(
                "SELECT request_hash FROM collection_jobs WHERE task_id = :t AND job_id = :j",
                {"t": task_id, "j": job_id},
            )
            if existing is not None:
                same = bytes(existing["request_hash"]) == request_hash
                return ("exists" if same else "conflict"), None
            if interval is not None:
                start, duration = interval
                previous = tx.query(
                    "SELECT interval_start, interval_duration, agg_param FROM collection_jobs"
                    " WHERE task_id = :t AND interval_start < :e"
                    " AND interval_start + interval_duration > :s"
                    " AND NOT (state = :failed AND error = :refused)",
                    {
                        "t": task_id,
                        "s": start,
                        "e": start + duration,
                        "failed": CollectionState.FAILED,
                        "refused": ProblemType.INVALID_BATCH_SIZE.value,
                    },
                )
                earlier = EarlierQueries(
                    other_batch=any(
                        (int(p["interval_start"]), int(p["interval_duration"])) != interval
                        for p in previous
                    ),
                    agg_params=frozenset(bytes(p["agg_param"]) for p in previous),
                )
            elif batch_key is not None:
                if not tx.query_one(
                    "SELECT 1 AS known FROM batches WHERE task_id = :t AND batch_key = :k",
                    {"t": task_id, "k": batch_key},
                ):
                    return "rejected", ProblemType.BATCH_INVALID
                earlier = EarlierQueries(
                    other_batch=False,
                    agg_params=frozenset(
                        bytes(p["agg_param"])
                        for p in tx.query(
                            "SELECT agg_param FROM collection_jobs WHERE task_id = :t"
                            " AND batch_key = :k",
                            {"t": task_id, "k": batch_key},
                        )
                    ),
                )
            else:
                earlier = EarlierQueries(other_batch=False, agg_params=frozenset())
            refused = rules.query_refusal(earlier, agg_param)
            if refused is not None:
                return "rejected", refused
            tx.execute(
                "INSERT INTO collection_jobs (task_id, job_id, request_hash, query_type,"
                " current_batch, agg_param, batch_key, interval_start, interval_duration, state,"
                " lease_expiry, lease_token, lease_attempts, created_at) VALUES (:t, :j, :rh,"
                " :qt, :cb, :ap, :k, :is, :id, :s, 0, NULL, 0, :now)",
                {
                    "t": task_id,
                    "j": job_id,
                    "rh": request_hash,
                    "qt": query_type,
                    "cb": int(current_batch),
                    "ap": agg_param,
                    "k": batch_key,
                    "is": None if interval is None else interval[0],
                    "id": None if interval is None else interval[1],
                    "s": CollectionState.PENDING,
                    "now": now,
                },
            )
            return "created", None

        outcome = self.db.run("put_collection_job", body)
        if outcome[0] == "created":
            self.collection_jobs_made.ring()
        return outcome

    def collection_job(self, task_id: bytes, job_id: bytes) -> Row | None:
        return self._job_row("collection_job", "collection_jobs", task_id, job_id)

    def collection_jobs_of_request(self, task_id: bytes, request: bytes) -> list[Row]:
        """The task's collection jobs created by this exact request (its hash): their ids,
        states, errors and whether their final state was delivered."""
        return self.db.run(
            "collection_jobs_of_request",
            lambda tx: tx.query(
                "SELECT job_id, state, error, delivered FROM collection_jobs WHERE task_id = :t"
                " AND request_hash = :rh",
                {"t": task_id, "rh": hashlib.sha256(request).digest()},
            ),
        )

    def mark_collection_delivered(self, task_id: bytes, job_id: bytes) -> None:
        """Record that the collector has been answered the job's final state."""
        self._statement(
            "mark_collection_delivered",
            "UPDATE collection_jobs SET delivered = 1 WHERE task_id = :t AND job_id = :j",
            {"t": task_id, "j": job_id},
        )

    def delete_collection_job(self, task_id: bytes, job_id: bytes) -> bool:
        return (
            self._statement(
                "delete_collection_job",
                "UPDATE collection_jobs SET state = :s, result = NULL, leader_share = NULL"
                " WHERE task_id = :t AND job_id = :j",
                {"s": CollectionState.DELETED, "t": task_id, "j": job_id},
            )
            > 0
        )

    def leased_collection_job(self, lease: Lease) -> Row:
        def body(tx: Tx) -> Row:
            return leased_row(tx, "collection_jobs", lease)

        return self.db.run("leased_collection_job", body)

    def start_collection(
        self,
        lease: Lease,
        rules: BatchRules,
        now: int,
        shares: ShareSum,
        noise: Callable[[bytes], bytes] | None = None,
        rate: RatePolicy | None = None,
    ) -> str:
        """Fix the batch of a pending collection job and freeze it.

        Returns 'waiting' (aggregation still running or too few reports: DAP-09 §4.6.5.2
        says the leader waits), 'no_batch' (current_batch with no batch ready), 'refused'
        or 'started'. On 'started' the batch is marked collected and the job holds the
        leader's aggregate share, count and checksum, all in this transaction, so later
        reports are refused and the request to the helper is the same however often it is
        retried. On 'refused' (a time bucket above the `rate` limit, 001 §4.8) the job has
        failed with invalidBatchSize and the batch is untouched; a current_batch job keeps
        the batch it picked, so the next one does not pick the refused batch again.

        `noise` (tasks with aggregator noise, 004 §5): the share frozen into the job is
        noise(share), drawn once per batch and kept in ``leader_noised_shares`` so that a
        retried or repeated collection of the batch carries the same noise."""

        def body(tx: Tx) -> str:
            job = leased_row(tx, "collection_jobs", lease)
            if job["state"] != CollectionState.PENDING:
                return "started"
            t = lease.task_id
            key = opt_bytes(job["batch_key"])
            if job["current_batch"] and key is None:
                key = _pick_current_batch(tx, t, rules)
                if key is None:
                    return "no_batch"
                tx.execute(
                    "UPDATE collection_jobs SET batch_key = :k WHERE task_id = :t AND job_id = :j",
                    {"k": key, "t": t, "j": lease.job_id},
                )
            if key is not None:
                lo, hi = key, key + b"\x00"
                busy = tx.query_one(
                    "SELECT 1 AS busy FROM aggregation_jobs WHERE task_id = :t AND role = 'leader'"
                    " AND state = :s AND batch_id = :k LIMIT 1",
                    {"t": t, "s": JobState.IN_PROGRESS, "k": key},
                )
            else:
                start = int(job["interval_start"])
                end = start + int(job["interval_duration"])
                lo, hi = start.to_bytes(8, "big"), end.to_bytes(8, "big")
                busy = tx.query_one(
                    "SELECT 1 AS busy FROM aggregation_jobs WHERE task_id = :t AND role = 'leader'"
                    " AND state = :s AND time_min < :e AND time_max >= :st LIMIT 1",
                    {"t": t, "s": JobState.IN_PROGRESS, "st": start, "e": end},
                ) or tx.query_one(
                    "SELECT 1 AS busy FROM client_reports"
                    f" WHERE task_number = {TASK_NUMBER_OF} AND aggregation_started = 0"
                    " AND client_time >= :st AND client_time < :e LIMIT 1",
                    {"t": t, "st": start, "e": end},
                )
            if busy:
                return "waiting"
            totals = batch_totals(tx, t, lo, hi)
            if not rules.size_ok(totals.report_count):
                return "waiting"
            if rate_refusal(tx, t, lo, hi, key is not None, rate) is not None:
                tx.execute(
                    "UPDATE collection_jobs SET state = :s, error = :e, lease_token = NULL"
                    " WHERE task_id = :t AND job_id = :j",
                    {
                        "s": CollectionState.FAILED,
                        "e": ProblemType.INVALID_BATCH_SIZE.value,
                        "t": t,
                        "j": lease.job_id,
                    },
                )
                return "refused"
            if noise is None:
                share = shares.merge(totals.shares)
            else:
                draw = noise
                share = _noised_leader_share(
                    tx,
                    t,
                    (lo, hi, bytes(job["agg_param"])),
                    totals,
                    lambda: draw(shares.merge(totals.shares)),
                    now,
                )
            mark_collected(tx, t, lo, hi, now)
            tx.execute(
                "UPDATE collection_jobs SET state = :s, report_count = :c, checksum = :cs,"
                " leader_share = :ls, time_min = :tmin, time_max = :tmax"
                " WHERE task_id = :t AND job_id = :j",
                {
                    "s": CollectionState.COLLECTING,
                    "c": totals.report_count,
                    "cs": totals.checksum,
                    "ls": share,
                    "tmin": totals.time_min,
                    "tmax": totals.time_max,
                    "t": t,
                    "j": lease.job_id,
                },
            )
            return "started"

        return self.db.run("start_collection", body)

    def finish_collection(self, lease: Lease, result: bytes) -> None:
        self._end_job(
            "finish_collection",
            lease,
            "state = :s, result = :r",
            {"s": CollectionState.FINISHED, "r": result, "collecting": CollectionState.COLLECTING},
            " AND state = :collecting",
        )

    def fail_collection(self, lease: Lease, problem: str) -> None:
        self._end_job(
            "fail_collection",
            lease,
            "state = :s, error = :e, leader_share = NULL",
            {"s": CollectionState.FAILED, "e": problem},
        )

    def _end_job(
        self, name: str, lease: Lease, assignments: str, params: Params, where: str = ""
    ) -> None:
        """Set a leased job's final columns and let go of its lease."""

        def body(tx: Tx) -> None:
            check_lease(tx, "collection_jobs", lease)
            tx.execute(
                f"UPDATE collection_jobs SET {assignments}, lease_token = NULL"
                f" WHERE task_id = :t AND job_id = :j{where}",
                {**params, "t": lease.task_id, "j": lease.job_id},
            )

        self.db.run(name, body)


def _noised_leader_share(
    tx: Tx,
    task_id: bytes,
    batch: tuple[bytes, bytes, bytes],
    totals: BatchTotals,
    draw: Callable[[], bytes],
    now: int,
) -> bytes:
    """The stored noised share of `batch` (key range and aggregation parameter), or a fresh
    `draw` stored now (004 §5).

    Reused only for the same report count and checksum; the batch is collected, so they
    cannot change in practice, and a share of other reports needs its own noise anyway."""
    lo, hi, agg_param = batch
    key = {"t": task_id, "lo": lo, "hi": hi, "ap": agg_param}
    stored = tx.query_one(
        "SELECT report_count, checksum, share FROM leader_noised_shares"
        " WHERE task_id = :t AND key_lo = :lo AND key_hi = :hi AND agg_param = :ap",
        key,
    )
    if (
        stored is not None
        and int(stored["report_count"]) == totals.report_count
        and bytes(stored["checksum"]) == totals.checksum
    ):
        return bytes(stored["share"])
    noised = draw()
    if stored is not None:
        tx.execute(
            "DELETE FROM leader_noised_shares"
            " WHERE task_id = :t AND key_lo = :lo AND key_hi = :hi AND agg_param = :ap",
            key,
        )
    tx.execute(
        "INSERT INTO leader_noised_shares (task_id, key_lo, key_hi, agg_param, report_count,"
        " checksum, share, created_at) VALUES (:t, :lo, :hi, :ap, :c, :cs, :sh, :now)",
        {
            **key,
            "c": totals.report_count,
            "cs": totals.checksum,
            "sh": noised,
            "now": now,
        },
    )
    return noised


def _pick_current_batch(tx: Tx, task_id: bytes, rules: BatchRules) -> bytes | None:
    """A fixed_size batch of a size `rules` allow, tied to no collection job yet
    (DAP-09 §4.6.1: current_batch never returns a batch already collected)."""
    rows = tx.query(
        "SELECT b.batch_key, SUM(ba.report_count) AS n FROM batches b"
        " JOIN batch_aggregations ba ON ba.task_id = b.task_id AND ba.batch_key = b.batch_key"
        " WHERE b.task_id = :t AND b.collected = 0 AND NOT EXISTS (SELECT 1 FROM"
        " collection_jobs cj WHERE cj.task_id = b.task_id AND cj.batch_key = b.batch_key)"
        " GROUP BY b.batch_key, b.created_at ORDER BY b.created_at, b.batch_key",
        {"t": task_id},
    )
    for r in rows:
        if rules.size_ok(int(r["n"])):
            return bytes(r["batch_key"])
    return None
