"""The collector's Prometheus metrics (prometheus_client, `services.common.metrics`).

From the store at scrape time (`CollectorJobs`): collection jobs by task and state, and failed
ones by problem (the leader's DAP problem type, DAP-09 §3.2, or the collector's own reason such
as ``invalid_collection``). In process: every request to the leader (the PUT that starts a
job, each poll) by outcome.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from services.collector.store import JobState, Store

__all__ = ["CollectorJobs", "CollectorMetrics"]


class CollectorJobs(Collector):
    """Tasks and collection jobs, read from the store (`store()`: the open one) at scrape time."""

    def __init__(self, store: Callable[[], Store]) -> None:
        self.store = store

    def collect(self) -> Iterator[Metric]:
        db = self.store()
        tasks = GaugeMetricFamily("sagg_collector_tasks", "Tasks provisioned on the collector.")
        tasks.add_metric([], db.task_count())
        jobs = GaugeMetricFamily(
            "sagg_collector_collection_jobs",
            "Collection jobs by state (new, polling, complete, failed).",
            labels=["task", "state"],
        )
        failed = GaugeMetricFamily(
            "sagg_collector_collections_failed",
            "Failed collection jobs by problem type.",
            labels=["task", "problem"],
        )
        states: dict[tuple[str, str], int] = {}
        for row in db.job_counts():
            key = (row.task_id, row.state.value)
            states[key] = states.get(key, 0) + row.count
            if row.state is JobState.FAILED:
                failed.add_metric([row.task_id, row.problem or "unknown"], row.count)
        for (task, state), n in states.items():
            jobs.add_metric([task, state], n)
        yield from (tasks, jobs, failed)


@dataclass(frozen=True)
class CollectorMetrics:
    registry: CollectorRegistry
    #: Labels task, request (``start`` | ``poll`` | ``delete``) and outcome (``pending``,
    #: ``ready``, ``deleted``...).
    leader_requests: Counter

    @classmethod
    def create(cls, store: Callable[[], Store]) -> CollectorMetrics:
        registry = CollectorRegistry()
        registry.register(CollectorJobs(store))
        requests = Counter(
            "sagg_collector_leader_requests_total",
            "Requests to the leader for collection jobs (start, poll, delete) by outcome.",
            ("task", "request", "outcome"),
            registry=registry,
        )
        return cls(registry, requests)
