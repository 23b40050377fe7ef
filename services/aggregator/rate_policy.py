"""Rate validation of a batch before its aggregate share is released (001 §4.8).

A batch whose fullest `time_precision` bucket holds more reports than the task allows
(`shared.dap.task.RateValidation.max_reports_per_bucket`) is refused with invalidBatchSize:
a surge of reports in one bucket is what a Sybil attack on the batch looks like. The datastore
counts the buckets and calls `RateLimit.refusal` in the transaction that would release the
share, so a refused batch stays as it was: not collected, no query spent, no report dropped.
"""

from __future__ import annotations

from dataclasses import dataclass

from services.aggregator.datastore import BucketCount, Refusal
from shared.dap.problems import ProblemType


@dataclass(frozen=True)
class RateLimit:
    """The task's bucket width and the most reports a bucket may hold (the datastore's
    `RatePolicy`)."""

    time_precision: int
    max_reports_per_bucket: int

    def refusal(self, busiest: BucketCount) -> Refusal | None:
        if busiest.reports <= self.max_reports_per_bucket:
            return None
        return Refusal(
            ProblemType.INVALID_BATCH_SIZE,
            f"the time bucket starting at {busiest.bucket} holds {busiest.reports} reports,"
            f" more than the {self.max_reports_per_bucket} the task's rate validation allows"
            " (001 §4.8)",
        )
