"""Garbage collection of per-report state, so that storage stays bounded (DAP-09 §4.5.1.4).

An aggregator must remember every report id it accepted to refuse replays, and every token it
accepted to refuse double spends; kept forever, both grow with every report. They can be
forgotten once no aggregator would accept the report or the token again:

- a report older than its task's `report_expiry_age` is refused at upload (leader) and dropped
  in aggregation (helper), so its id, its payload and the aggregation jobs made only of such
  reports can go (a task without an expiry age keeps them all);
- a token is only accepted until `grace` after its window ended (`report_checks.ReportChecker`),
  and its window ends at most `clock_skew_s + window_seconds` after it was spent, so a token
  spent longer ago than that sum can go. `grace` is the larger of the two token graces, so a
  store shared by leader and helper tasks is safe for both.

Aggregate shares, batches and collection jobs are per batch, not per report, and stay until the
task itself is deleted (`drivers.aggregation.delete_expired_tasks`).
"""

from __future__ import annotations

import logging

from services.aggregator.datastore import Garbage
from services.aggregator.service import Aggregator

__all__ = ["collect_garbage"]

log = logging.getLogger(__name__)


def collect_garbage(agg: Aggregator) -> Garbage:
    """One pass over every task, in bounded transactions; what was deleted."""
    s = agg.settings
    now = agg.clock.now()
    grace = max(s.token_upload_grace_s, s.token_aggregation_grace_s)
    total = Garbage()
    for record in agg.ds.all_tasks():
        definition = record.definition
        expiry = definition.get("report_expiry_age")
        tokens = definition.get("tokens")
        window = int(tokens["window_seconds"]) if tokens else 0
        while True:
            deleted = agg.ds.collect_garbage(
                record.task_id,
                report_horizon=None if expiry is None else now - int(expiry),
                token_horizon=now - s.clock_skew_s - window - grace,
                limit=s.gc_batch_size,
            )
            total += deleted
            if max(deleted.reports, deleted.aggregation_jobs, deleted.spent_tokens) < (
                s.gc_batch_size
            ):
                break
    swept = agg.ds.sweep_job_share_files()
    if swept:
        log.info("swept %d job share files no job names", swept)
    if total.total:
        log.info(
            "garbage collected: %d reports, %d aggregation jobs, %d spent tokens",
            total.reports,
            total.aggregation_jobs,
            total.spent_tokens,
        )
    return total
