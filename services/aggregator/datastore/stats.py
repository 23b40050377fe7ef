"""Counters and per-task statistics: refused reports by stage and reason, refused batches, and
the counts the stats and metrics endpoints read (`services.aggregator.metrics`)."""

from __future__ import annotations

from collections import Counter
from typing import Any

from services.aggregator.datastore.aggregation_jobs import MEMBER_SIZE
from services.aggregator.datastore.base import StoreBase
from services.aggregator.datastore.schema import TASK_TABLES
from services.aggregator.datastore.states import JobState, ReportAggregationState, Stage
from services.aggregator.datastore.task_numbers import TASK_NUMBER_OF, task_key
from services.common.db import Tx

#: Reason of `batch_refusals`: a time bucket of the batch is above the rate limit.
REFUSAL_RATE_EXCEEDED = "rate_exceeded"


def count_rejections(tx: Tx, task_id: bytes, stage: Stage, reasons: list[str], shard: int) -> None:
    """Add refused reports to the task's counters, in the transaction that refused them."""
    for reason, n in sorted(Counter(reasons).items()):
        tx.execute(
            "INSERT INTO rejection_counts (task_id, stage, reason, shard, count)"
            " VALUES (:t, :st, :r, :sh, :n) ON CONFLICT (task_id, stage, reason, shard)"
            " DO UPDATE SET count = rejection_counts.count + :n",
            {"t": task_id, "st": stage, "r": reason, "sh": shard, "n": n},
        )


def count_batch_refusal(tx: Tx, task_id: bytes, reason: str) -> None:
    tx.execute(
        "INSERT INTO batch_refusals (task_id, reason, count) VALUES (:t, :r, 1)"
        " ON CONFLICT (task_id, reason) DO UPDATE SET count = batch_refusals.count + 1",
        {"t": task_id, "r": reason},
    )


class StatsStore(StoreBase):
    def count_rows(self, table: str, task_id: bytes) -> int:
        if table not in TASK_TABLES:
            raise ValueError(table)
        row = self.db.run(
            "count_rows",
            lambda tx: tx.query_one(
                f"SELECT COUNT(*) AS n FROM {table} WHERE {task_key(table)}", {"t": task_id}
            ),
        )
        return int(row["n"]) if row else 0

    def unaggregated_reports(self, task_id: bytes) -> int:
        row = self.db.run(
            "unaggregated_reports",
            lambda tx: tx.query_one(
                f"SELECT COUNT(*) AS n FROM client_reports WHERE task_number = {TASK_NUMBER_OF}"
                " AND aggregation_started = 0",
                {"t": task_id},
            ),
        )
        return int(row["n"]) if row else 0

    def batch_refusal_counts(self, task_id: bytes) -> dict[str, int]:
        """{reason: count} of the task's refused collection requests (`batch_refusals`)."""
        rows = self.db.run(
            "batch_refusal_counts",
            lambda tx: tx.query(
                "SELECT reason, count FROM batch_refusals WHERE task_id = :t ORDER BY reason",
                {"t": task_id},
            ),
        )
        return {str(r["reason"]): int(r["count"]) for r in rows}

    def rejection_counts(self, task_id: bytes) -> dict[str, dict[str, int]]:
        """{stage: {reason: count}} of the task's refused reports."""
        rows = self.db.run(
            "rejection_counts",
            lambda tx: tx.query(
                "SELECT stage, reason, SUM(count) AS n FROM rejection_counts WHERE task_id = :t"
                " GROUP BY stage, reason ORDER BY stage, reason",
                {"t": task_id},
            ),
        )
        out: dict[str, dict[str, int]] = {stage.value: {} for stage in Stage}
        for r in rows:
            out.setdefault(str(r["stage"]), {})[str(r["reason"])] = int(r["n"])
        return out

    def task_stats(self, task_id: bytes, *, batch_limit: int = 50) -> dict[str, Any]:
        """Counts for the stats and metrics endpoints, read in one transaction.

        `batches` lists the uncollected batches (newest `batch_limit`) with their aggregated
        report counts, so progress towards min_batch_size can be watched."""

        def by_state(tx: Tx, table: str, where: str = "") -> dict[str, int]:
            rows = tx.query(
                f"SELECT state, COUNT(*) AS n FROM {table} WHERE task_id = :t{where}"
                " GROUP BY state ORDER BY state",
                {"t": task_id},
            )
            return {str(r["state"]): int(r["n"]) for r in rows}

        def report_aggregations(tx: Tx) -> dict[str, int]:
            """Reports by state: the jobs' counts, a leader job in progress's reports as
            started (`aggregation_jobs`), and the rows of leader jobs made before 0011."""
            states = by_state(tx, "report_aggregations")
            counts = tx.query_one(
                "SELECT SUM(finished_reports) AS finished, SUM(failed_reports) AS failed,"
                " SUM(CASE WHEN state = :s THEN LENGTH(members) ELSE 0 END) AS started"
                " FROM aggregation_jobs WHERE task_id = :t",
                {"t": task_id, "s": JobState.IN_PROGRESS},
            )
            for column, state, per in (
                ("finished", ReportAggregationState.FINISHED, 1),
                ("failed", ReportAggregationState.FAILED, 1),
                ("started", ReportAggregationState.START, MEMBER_SIZE),
            ):
                n = int(counts[column] or 0) // per if counts else 0
                if n:
                    states[state.value] = states.get(state.value, 0) + n
            return dict(sorted(states.items()))

        def body(tx: Tx) -> dict[str, Any]:
            reports = tx.query_one(
                "SELECT COUNT(*) AS n, SUM(CASE WHEN aggregation_started = 0 THEN 1 ELSE 0 END)"
                f" AS waiting FROM client_reports WHERE task_number = {TASK_NUMBER_OF}",
                {"t": task_id},
            )
            batches = tx.query(
                "SELECT ba.batch_key, SUM(ba.report_count) AS n, MAX(ba.time_max) AS latest"
                " FROM batch_aggregations ba WHERE ba.task_id = :t AND NOT EXISTS (SELECT 1"
                " FROM batches b WHERE b.task_id = ba.task_id AND b.batch_key = ba.batch_key"
                " AND b.collected = 1) GROUP BY ba.batch_key ORDER BY latest DESC, ba.batch_key"
                " LIMIT :n",
                {"t": task_id, "n": batch_limit},
            )
            collected = tx.query_one(
                "SELECT COUNT(*) AS n FROM batches WHERE task_id = :t AND collected = 1",
                {"t": task_id},
            )
            return {
                "reports": {
                    "received": int(reports["n"]) if reports else 0,
                    "waiting": int(reports["waiting"] or 0) if reports else 0,
                },
                "report_aggregations": report_aggregations(tx),
                "aggregation_jobs": by_state(tx, "aggregation_jobs"),
                "collection_jobs": by_state(tx, "collection_jobs"),
                "batches_collected": int(collected["n"]) if collected else 0,
                "open_batches": [(bytes(r["batch_key"]), int(r["n"])) for r in batches],
            }

        return self.db.run("task_stats", body)
