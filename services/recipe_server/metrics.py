"""The recipe server's Prometheus metrics (`services.common.metrics`).

From the store at scrape time: recipes published by analyst, the tasks they name, tasks
provisioned but not yet logged (an interrupted publication, `service` "Retries"), and the size
of the log (its latest signed tree head). In process: publications by outcome, refused ones by
reason, tasks created on the DAP parties, and device fetches of recipes and of the listing.
"""

from __future__ import annotations

from dataclasses import dataclass

from services.common.metrics import Counter, Registry, Scrape
from services.recipe_server.provision import (
    ExistingTask,
    NewTask,
    Provisioner,
    ProvisionError,
    TaskRequest,
)
from services.recipe_server.store import RecipeStore

__all__ = ["CountingProvisioner", "RecipeServerMetrics"]


@dataclass(frozen=True)
class RecipeServerMetrics:
    registry: Registry
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
        registry = Registry()
        registry.family(
            "sagg_recipe_server_recipes", "gauge", "Recipes in the log, by analyst.", ("analyst",)
        )
        registry.family("sagg_recipe_server_recipe_tasks", "gauge", "DAP tasks recipes name.")
        registry.family(
            "sagg_recipe_server_pending_tasks",
            "gauge",
            "Tasks provisioned for publications that have not reached the log.",
        )
        registry.family(
            "sagg_recipe_server_log_size", "gauge", "Entries of the recipe log (latest tree head)."
        )
        published = registry.counter(
            "sagg_recipe_server_publications_total",
            "Accepted publications: created, or the same draft again (existing).",
            ("outcome",),
        )
        refused = registry.counter(
            "sagg_recipe_server_publications_refused_total",
            "Refused publications by reason.",
            ("reason",),
        )
        provisioned = registry.counter(
            "sagg_recipe_server_tasks_provisioned_total",
            "Task creations on collector, leader and helper, by outcome.",
            ("outcome",),
        )
        fetches = registry.counter(
            "sagg_recipe_server_recipe_fetches_total",
            "Recipes served with their inclusion proof, by recipe id.",
            ("recipe",),
        )
        listings = registry.counter(
            "sagg_recipe_server_listing_fetches_total", "Listings of the log served."
        )

        def read(scrape: Scrape) -> None:
            counts = store.counts()
            for analyst, n in counts.recipes_by_analyst.items():
                scrape.add("sagg_recipe_server_recipes", n, analyst=analyst)
            scrape.add("sagg_recipe_server_recipe_tasks", counts.tasks)
            scrape.add("sagg_recipe_server_pending_tasks", counts.pending_tasks)
            scrape.add("sagg_recipe_server_log_size", counts.log_size)

        registry.on_scrape(read)
        return cls(registry, published, refused, provisioned, fetches, listings)


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
            self._counter.inc(outcome="failed")
            raise
        self._counter.inc(outcome="created")

    def existing(self, task_id: str, request: TaskRequest) -> ExistingTask:
        return self._inner.existing(task_id, request)
