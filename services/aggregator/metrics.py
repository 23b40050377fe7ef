"""Per-task statistics: the admin stats document and the aggregator's Prometheus metrics.

Everything comes from the datastore at scrape time (`AggregatorCollector`, a prometheus_client
collector), so every process of one aggregator reports the same numbers, across restarts.
Counts of refused reports are by stage (``upload`` at the leader, ``aggregation`` at either
aggregator) and reason: a `PrepareError` name or one of sagg's finer reasons
(``binding_mismatch``, ``token_spent``...).
Batch progress is the aggregated report count of each uncollected batch over the task's
minimum batch size (DAP-09 §4.6.5: a batch is collectable at 1.0). Refused collections of
batches that passed DAP's checks are counted by reason (``rate_exceeded``: 001 §4.8 rate
validation).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from services.aggregator.datastore import Datastore, TaskRecord
from shared.b64url import b64url_encode

__all__ = ["AggregatorCollector", "task_stats"]

_TASK = ["task", "role"]
#: The job families by state: name and what they count.
_BY_STATE = (
    ("report_aggregations", "Report aggregations"),
    ("aggregation_jobs", "Aggregation jobs"),
    ("collection_jobs", "Collection jobs"),
)


def task_stats(ds: Datastore, record: TaskRecord) -> dict[str, Any]:
    """The JSON document of ``GET /internal/tasks/{id}/stats``."""
    stats = ds.task_stats(record.task_id)
    return {
        "task_id": b64url_encode(record.task_id),
        "role": record.role,
        "min_batch_size": int(record.definition["min_batch_size"]),
        "reports": stats["reports"],
        "rejections": ds.rejection_counts(record.task_id),
        "batches_refused": ds.batch_refusal_counts(record.task_id),
        "report_aggregations": stats["report_aggregations"],
        "aggregation_jobs": stats["aggregation_jobs"],
        "collection_jobs": stats["collection_jobs"],
        "batches_collected": stats["batches_collected"],
        "open_batches": [
            {"batch": b64url_encode(key), "reports": n} for key, n in stats["open_batches"]
        ],
    }


class AggregatorCollector(Collector):
    """Every task's statistics as metric families, read from `ds` on each scrape."""

    def __init__(self, ds: Datastore) -> None:
        self.ds = ds

    def collect(self) -> Iterator[Metric]:
        received = CounterMetricFamily(
            "sagg_reports_received_total",
            "Reports stored: accepted uploads (leader), report shares seen (helper).",
            labels=_TASK,
        )
        waiting = GaugeMetricFamily(
            "sagg_reports_waiting", "Stored reports not yet in an aggregation job.", labels=_TASK
        )
        rejected = CounterMetricFamily(
            "sagg_reports_rejected_total",
            "Refused reports by stage and reason.",
            labels=[*_TASK, "stage", "reason"],
        )
        refused = CounterMetricFamily(
            "sagg_batches_refused_total",
            "Collection requests refused by reason (rate_exceeded: 001 §4.8 rate validation).",
            labels=[*_TASK, "reason"],
        )
        by_state = {
            family: GaugeMetricFamily(
                f"sagg_{family}", f"{what} by state.", labels=[*_TASK, "state"]
            )
            for family, what in _BY_STATE
        }
        collected = GaugeMetricFamily("sagg_batches_collected", "Batches collected.", labels=_TASK)
        batch_reports = GaugeMetricFamily(
            "sagg_batch_reports",
            "Aggregated reports of each uncollected batch.",
            labels=[*_TASK, "batch"],
        )
        progress = GaugeMetricFamily(
            "sagg_batch_progress_ratio",
            "Aggregated reports of each uncollected batch over the minimum batch size.",
            labels=[*_TASK, "batch"],
        )
        min_size = GaugeMetricFamily(
            "sagg_task_min_batch_size", "The task's minimum batch size.", labels=_TASK
        )
        for record in sorted(self.ds.all_tasks(), key=lambda r: r.task_id):
            doc = task_stats(self.ds, record)
            base = [doc["task_id"], doc["role"]]
            received.add_metric(base, doc["reports"]["received"])
            waiting.add_metric(base, doc["reports"]["waiting"])
            for stage, reasons in doc["rejections"].items():
                for reason, n in reasons.items():
                    rejected.add_metric([*base, stage, reason], n)
            for reason, n in doc["batches_refused"].items():
                refused.add_metric([*base, reason], n)
            for family, states in by_state.items():
                for state, n in doc[family].items():
                    states.add_metric([*base, state], n)
            collected.add_metric(base, doc["batches_collected"])
            for batch in doc["open_batches"]:
                batch_reports.add_metric([*base, batch["batch"]], batch["reports"])
                progress.add_metric(
                    [*base, batch["batch"]], batch["reports"] / doc["min_batch_size"]
                )
            min_size.add_metric(base, doc["min_batch_size"])
        yield from (received, waiting, rejected, refused, *by_state.values(), collected)
        yield from (batch_reports, progress, min_size)
