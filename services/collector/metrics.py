"""The collector's Prometheus metrics (`services.common.metrics`).

From the store at scrape time: collection jobs by task and state, and failed ones by problem
(the leader's DAP problem type, DAP-09 §3.2, or the collector's own reason such as
``invalid_collection``). In process: every request to the leader (the PUT that starts a job,
each poll) by outcome.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from services.collector.store import JobState, Store
from services.common.metrics import Counter, Registry, Scrape

__all__ = ["CollectorMetrics"]


@dataclass(frozen=True)
class CollectorMetrics:
    registry: Registry
    #: Labels task, request (``start`` | ``poll``) and outcome (``pending``, ``ready``...).
    leader_requests: Counter

    @classmethod
    def create(cls, store: Callable[[], Store]) -> CollectorMetrics:
        registry = Registry()
        registry.family("sagg_collector_tasks", "gauge", "Tasks provisioned on the collector.")
        registry.family(
            "sagg_collector_collection_jobs",
            "gauge",
            "Collection jobs by state (new, polling, complete, failed).",
            ("task", "state"),
        )
        registry.family(
            "sagg_collector_collections_failed",
            "gauge",
            "Failed collection jobs by problem type.",
            ("task", "problem"),
        )
        requests = registry.counter(
            "sagg_collector_leader_requests_total",
            "Requests to the leader for collection jobs (start, poll) by outcome.",
            ("task", "request", "outcome"),
        )

        def read(scrape: Scrape) -> None:
            db = store()
            scrape.add("sagg_collector_tasks", db.task_count())
            states: dict[tuple[str, str], int] = {}
            for row in db.job_counts():
                key = (row.task_id, row.state.value)
                states[key] = states.get(key, 0) + row.count
                if row.state is JobState.FAILED:
                    problem = row.problem or "unknown"
                    scrape.add(
                        "sagg_collector_collections_failed",
                        row.count,
                        task=row.task_id,
                        problem=problem,
                    )
            for (task, state), n in states.items():
                scrape.add("sagg_collector_collection_jobs", n, task=task, state=state)

        registry.on_scrape(read)
        return cls(registry, requests)
