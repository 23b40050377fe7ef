"""The recipe server's Prometheus metrics (`services.common.metrics`).

From the store at scrape time: recipes published by analyst, the tasks they name, tasks
provisioned but not yet logged (an interrupted publication, `service` "Retries"), and the size
of the log (its latest signed tree head). In process: publications by outcome, refused ones by
reason, tasks created on the DAP parties, and device fetches of recipes and of the listing.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from services.recipe_server.provision import (
    ExistingTask,
    NewTask,
    Provisioner,
    ProvisionError,
    TaskRequest,
)
from services.recipe_server.store import RecipeStore

__all__ = ["CountingProvisioner", "RecipeLog", "RecipeServerMetrics"]


class RecipeLog(Collector):
    """The recipe store at scrape time: recipes by analyst, their tasks, the log's size."""

    def __init__(self, store: RecipeStore) -> None:
        self.store = store

    def collect(self) -> Iterator[Metric]:
        counts = self.store.counts()
        recipes = GaugeMetricFamily(
            "sagg_recipe_server_recipes", "Recipes in the log, by analyst.", labels=["analyst"]
        )
        for analyst, n in counts.recipes_by_analyst.items():
            recipes.add_metric([analyst], n)
        yield recipes
        yield GaugeMetricFamily(
            "sagg_recipe_server_recipe_tasks", "DAP tasks recipes name.", counts.tasks
        )
        yield GaugeMetricFamily(
            "sagg_recipe_server_pending_tasks",
            "Tasks provisioned for publications that have not reached the log.",
            counts.pending_tasks,
        )
        yield GaugeMetricFamily(
            "sagg_recipe_server_log_size",
            "Entries of the recipe log (latest tree head).",
            counts.log_size,
        )


@dataclass(frozen=True)
class RecipeServerMetrics:
    registry: CollectorRegistry
    #: Label outcome: ``created`` or ``existing`` (the same draft again).
    published: Counter
    #: Label reason: ``unauthorized``, ``too_large``, ``invalid_draft``, ``forbidden``,
    #: ``conflict``, ``provisioning_failed``.
    refused: Counter
    #: Label outcome: ``created`` or ``failed``.
    provisioned: Counter
    #: Label recipe: each served GET /recipes/{id}.
    fetches: Counter
    listings: Counter

    @classmethod
    def create(cls, store: RecipeStore) -> RecipeServerMetrics:
        registry = CollectorRegistry()
        registry.register(RecipeLog(store))
        return cls(
            registry,
            published=Counter(
                "sagg_recipe_server_publications_total",
                "Accepted publications: created, or the same draft again (existing).",
                ("outcome",),
                registry=registry,
            ),
            refused=Counter(
                "sagg_recipe_server_publications_refused_total",
                "Refused publications by reason.",
                ("reason",),
                registry=registry,
            ),
            provisioned=Counter(
                "sagg_recipe_server_tasks_provisioned_total",
                "Task creations on collector, leader and helper, by outcome.",
                ("outcome",),
                registry=registry,
            ),
            fetches=Counter(
                "sagg_recipe_server_recipe_fetches_total",
                "Recipes served with their inclusion proof, by recipe id.",
                ("recipe",),
                registry=registry,
            ),
            listings=Counter(
                "sagg_recipe_server_listing_fetches_total",
                "Listings of the log served.",
                registry=registry,
            ),
        )


class CountingProvisioner:
    """A `Provisioner` that counts the task creations it passes on."""

    def __init__(self, inner: Provisioner, counter: Counter) -> None:
        self._inner = inner
        self._counter = counter
        self.leader_url = inner.leader_url
        self.helper_url = inner.helper_url

    def new_task_id(self) -> str:
        return self._inner.new_task_id()

    def hpke_configs(self) -> tuple[str, str]:
        return self._inner.hpke_configs()

    def create(self, task: NewTask) -> None:
        try:
            self._inner.create(task)
        except ProvisionError:
            self._counter.labels(outcome="failed").inc()
            raise
        self._counter.labels(outcome="created").inc()

    def existing(self, task_id: str, request: TaskRequest) -> ExistingTask:
        return self._inner.existing(task_id, request)
