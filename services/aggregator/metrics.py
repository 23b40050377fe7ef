"""Per-task statistics: the admin stats document and a Prometheus text exposition.

The exposition (format 0.0.4) is written by hand so the aggregator takes no new dependency.
Everything comes from the datastore, so every process of one aggregator reports the same
numbers. Counts of refused reports are by stage (``upload`` at the leader, ``aggregation`` at
either aggregator) and reason: a `PrepareError` name or one of sagg's finer reasons
(``binding_mismatch``, ``token_spent``...).
"""

from __future__ import annotations

from typing import Any

from services.aggregator.datastore import Datastore, TaskRecord
from shared.dap.task import b64url_encode

_HELP = {
    "sagg_reports_received_total": (
        "counter",
        "Reports stored: accepted uploads (leader), report shares seen (helper).",
    ),
    "sagg_reports_waiting": ("gauge", "Stored reports not yet in an aggregation job."),
    "sagg_reports_rejected_total": ("counter", "Refused reports by stage and reason."),
    "sagg_report_aggregations": ("gauge", "Report aggregations by state."),
    "sagg_aggregation_jobs": ("gauge", "Aggregation jobs by state."),
    "sagg_collection_jobs": ("gauge", "Collection jobs by state."),
    "sagg_batches_collected": ("gauge", "Batches collected."),
    "sagg_batch_reports": ("gauge", "Aggregated reports of each uncollected batch."),
    "sagg_task_min_batch_size": ("gauge", "The task's minimum batch size."),
}


def task_stats(ds: Datastore, record: TaskRecord) -> dict[str, Any]:
    """The JSON document of ``GET /internal/tasks/{id}/stats``."""
    stats = ds.task_stats(record.task_id)
    return {
        "task_id": b64url_encode(record.task_id),
        "role": record.role,
        "min_batch_size": int(record.definition["min_batch_size"]),
        "reports": stats["reports"],
        "rejections": ds.rejection_counts(record.task_id),
        "report_aggregations": stats["report_aggregations"],
        "aggregation_jobs": stats["aggregation_jobs"],
        "collection_jobs": stats["collection_jobs"],
        "batches_collected": stats["batches_collected"],
        "open_batches": [
            {"batch": b64url_encode(key), "reports": n} for key, n in stats["open_batches"]
        ],
    }


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _sample(name: str, labels: dict[str, str], value: int) -> str:
    inner = ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items())
    return f"{name}{{{inner}}} {value}"


def render_metrics(ds: Datastore) -> str:
    """Every task's statistics in the Prometheus text format, grouped by metric family."""
    samples: dict[str, list[str]] = {name: [] for name in _HELP}
    for record in sorted(ds.all_tasks(), key=lambda r: r.task_id):
        doc = task_stats(ds, record)
        base = {"task": doc["task_id"], "role": record.role}
        samples["sagg_reports_received_total"].append(
            _sample("sagg_reports_received_total", base, doc["reports"]["received"])
        )
        samples["sagg_reports_waiting"].append(
            _sample("sagg_reports_waiting", base, doc["reports"]["waiting"])
        )
        for stage, reasons in doc["rejections"].items():
            for reason, n in reasons.items():
                samples["sagg_reports_rejected_total"].append(
                    _sample(
                        "sagg_reports_rejected_total",
                        {**base, "stage": stage, "reason": reason},
                        n,
                    )
                )
        for family in ("report_aggregations", "aggregation_jobs", "collection_jobs"):
            name = f"sagg_{family}"
            for state, n in doc[family].items():
                samples[name].append(_sample(name, {**base, "state": state}, n))
        samples["sagg_batches_collected"].append(
            _sample("sagg_batches_collected", base, doc["batches_collected"])
        )
        for batch in doc["open_batches"]:
            samples["sagg_batch_reports"].append(
                _sample("sagg_batch_reports", {**base, "batch": batch["batch"]}, batch["reports"])
            )
        samples["sagg_task_min_batch_size"].append(
            _sample("sagg_task_min_batch_size", base, doc["min_batch_size"])
        )
    lines: list[str] = []
    for name, (kind, help_text) in _HELP.items():
        lines.append(f"# HELP {name} {help_text}")
        lines.append(f"# TYPE {name} {kind}")
        lines.extend(samples[name])
    return "\n".join(lines) + "\n"
