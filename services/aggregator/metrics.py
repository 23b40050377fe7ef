"""Per-task statistics: the admin stats document and the aggregator's Prometheus metrics.

Everything comes from the datastore at scrape time (`services.common.metrics`), so every
process of one aggregator reports the same numbers, across restarts. Counts of refused reports
are by stage (``upload`` at the leader, ``aggregation`` at either aggregator) and reason: a
`PrepareError` name or one of sagg's finer reasons (``binding_mismatch``, ``token_spent``...).
Batch progress is the aggregated report count of each uncollected batch over the task's
minimum batch size (DAP-09 §4.6.5: a batch is collectable at 1.0). Refused collections of
batches that passed DAP's checks are counted by reason (``rate_exceeded``: 001 §4.8 rate
validation).
"""

from __future__ import annotations

from typing import Any

from services.aggregator.datastore import Datastore, TaskRecord
from services.common.metrics import Registry, Scrape
from shared.b64url import b64url_encode

__all__ = ["aggregator_metrics", "task_stats"]

_TASK = ("task", "role")


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


def aggregator_metrics(ds: Datastore, registry: Registry | None = None) -> Registry:
    """Every task's statistics as metric families, read from `ds` on each scrape (added to
    `registry`, which may hold the process's event counters already)."""
    if registry is None:
        registry = Registry()
    registry.family(
        "sagg_reports_received_total",
        "counter",
        "Reports stored: accepted uploads (leader), report shares seen (helper).",
        _TASK,
    )
    registry.family(
        "sagg_reports_waiting", "gauge", "Stored reports not yet in an aggregation job.", _TASK
    )
    registry.family(
        "sagg_reports_rejected_total",
        "counter",
        "Refused reports by stage and reason.",
        (*_TASK, "stage", "reason"),
    )
    registry.family(
        "sagg_batches_refused_total",
        "counter",
        "Collection requests refused by reason (rate_exceeded: 001 §4.8 rate validation).",
        (*_TASK, "reason"),
    )
    for family, what in (
        ("report_aggregations", "Report aggregations"),
        ("aggregation_jobs", "Aggregation jobs"),
        ("collection_jobs", "Collection jobs"),
    ):
        registry.family(f"sagg_{family}", "gauge", f"{what} by state.", (*_TASK, "state"))
    registry.family("sagg_batches_collected", "gauge", "Batches collected.", _TASK)
    registry.family(
        "sagg_batch_reports",
        "gauge",
        "Aggregated reports of each uncollected batch.",
        (*_TASK, "batch"),
    )
    registry.family(
        "sagg_batch_progress_ratio",
        "gauge",
        "Aggregated reports of each uncollected batch over the minimum batch size.",
        (*_TASK, "batch"),
    )
    registry.family("sagg_task_min_batch_size", "gauge", "The task's minimum batch size.", _TASK)

    def read(scrape: Scrape) -> None:
        for record in sorted(ds.all_tasks(), key=lambda r: r.task_id):
            _task_samples(scrape, task_stats(ds, record))

    registry.on_scrape(read)
    return registry


def _task_samples(scrape: Scrape, doc: dict[str, Any]) -> None:
    base = {"task": doc["task_id"], "role": doc["role"]}
    scrape.add("sagg_reports_received_total", doc["reports"]["received"], **base)
    scrape.add("sagg_reports_waiting", doc["reports"]["waiting"], **base)
    for stage, reasons in doc["rejections"].items():
        for reason, n in reasons.items():
            scrape.add("sagg_reports_rejected_total", n, **base, stage=stage, reason=reason)
    for reason, n in doc["batches_refused"].items():
        scrape.add("sagg_batches_refused_total", n, **base, reason=reason)
    for family in ("report_aggregations", "aggregation_jobs", "collection_jobs"):
        for state, n in doc[family].items():
            scrape.add(f"sagg_{family}", n, **base, state=state)
    scrape.add("sagg_batches_collected", doc["batches_collected"], **base)
    min_batch_size = doc["min_batch_size"]
    for batch in doc["open_batches"]:
        scrape.add("sagg_batch_reports", batch["reports"], **base, batch=batch["batch"])
        scrape.add(
            "sagg_batch_progress_ratio",
            batch["reports"] / min_batch_size,
            **base,
            batch=batch["batch"],
        )
    scrape.add("sagg_task_min_batch_size", min_batch_size, **base)
