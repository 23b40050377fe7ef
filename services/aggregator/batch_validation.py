"""Batch validation (DAP-09 §4.6.5; DAP-19 §4.6.6, digest §8): whether a collection may have
the batch it asks for, decided from what the store holds of the task's earlier queries.

Pure: the datastore reads the facts (`EarlierQueries`, a batch's report count) in the
transaction that records the query or releases the share and calls these rules there
(`datastore.records.BatchRules`), so the decision and the write stay atomic.
"""

from __future__ import annotations

from dataclasses import dataclass

from services.aggregator.datastore.records import EarlierQueries
from shared.dap.problems import ProblemType


@dataclass(frozen=True)
class DapBatchRules:
    """A task's batch limits: min/max batch size and how often one batch may be queried."""

    min_batch_size: int
    max_batch_size: int | None
    max_batch_query_count: int

    def query_refusal(self, earlier: EarlierQueries, agg_param: bytes) -> ProblemType | None:
        """Overlap (§4.6.5.3), then the query count (§4.6.5.2), then the VDAF's own check of
        the aggregation parameter: Prio3 takes none, so any but the empty one is invalid."""
        if earlier.other_batch:
            return ProblemType.BATCH_OVERLAP
        params = earlier.agg_params
        if agg_param not in params and len(params) >= self.max_batch_query_count:
            return ProblemType.BATCH_QUERIED_TOO_MANY_TIMES
        if agg_param != b"":
            return ProblemType.INVALID_MESSAGE
        return None

    def size_ok(self, report_count: int) -> bool:
        """The batch size check (§4.6.5.1.2): min_batch_size <= count (<= max_batch_size)."""
        if report_count < self.min_batch_size:
            return False
        return self.max_batch_size is None or report_count <= self.max_batch_size
