"""Background threads running the leader's drivers in the aggregator process.

Each loop polls the store every `driver_poll_s` when it finds nothing to do, and wakes at once
when this process commits what it drives (`Datastore.aggregation_jobs_made`,
`collection_jobs_made`): jobs an upload group made, or a collection job, start without waiting
out a poll, which only work from other processes then waits for."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

import httpx

from services.aggregator.drivers.aggregation import (
    AggregationJobDriver,
    create_jobs,
    delete_expired_tasks,
)
from services.aggregator.drivers.collection import CollectionJobDriver
from services.aggregator.drivers.garbage import collect_garbage
from services.aggregator.service import Aggregator
from services.common.doorbell import Doorbell
from services.common.http import http_client

log = logging.getLogger(__name__)


class DriverRunner:
    """Creator, aggregation and collection loops; `stop()` ends them after their current step."""

    def __init__(self, agg: Aggregator, http: httpx.Client | None = None) -> None:
        self.agg = agg
        timeout = agg.settings.helper_timeout_s
        self.http = http or http_client(agg.settings.transport, timeout=timeout)
        self._own_http = http is None
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._bells: set[Doorbell] = set()
        self.aggregation = AggregationJobDriver(agg, self.http)
        self.collection = CollectionJobDriver(agg, self.http)

    def start(self) -> None:
        # Leases keep the aggregation workers on different jobs, as they keep processes apart.
        workers = self.agg.settings.aggregation_workers
        ds = self.agg.ds
        # The creator and the cleanup look at reports and tasks, which no doorbell announces.
        polled = Doorbell()
        loops: dict[str, tuple[Callable[[], int], Doorbell]] = {
            "job-creator": (lambda: create_jobs(self.agg), polled),
            **{
                f"aggregation-driver-{i}": (self.aggregation.run_once, ds.aggregation_jobs_made)
                for i in range(workers)
            },
            "collection-driver": (self.collection.run_once, ds.collection_jobs_made),
            "task-cleanup": (self._cleanup, polled),
        }
        self._bells = {polled, ds.aggregation_jobs_made, ds.collection_jobs_made}
        for name, (step, bell) in loops.items():
            thread = threading.Thread(
                target=self._loop, args=(name, step, bell), name=name, daemon=True
            )
            thread.start()
            self._threads.append(thread)

    def _cleanup(self) -> int:
        delete_expired_tasks(self.agg)
        collect_garbage(self.agg)
        # Expirations are coarse; looking once a minute is plenty.
        self._stop.wait(60)
        return 0

    def _loop(self, name: str, step: Callable[[], int], bell: Doorbell) -> None:
        pause = self.agg.settings.driver_poll_s
        while True:
            rang = bell.rings()
            # After the read: `stop` sets the flag before it rings, so a ring this wait would
            # miss comes with the flag already set.
            if self._stop.is_set():
                return
            try:
                busy = step()
            except Exception as exc:
                # Log the type only: messages may quote stored data.
                log.error("%s step failed: %s", name, type(exc).__name__)
                busy = 0
            if not busy:
                bell.wait(rang, pause)

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        for bell in self._bells:
            bell.ring()
        for thread in self._threads:
            thread.join(timeout)
        self._threads.clear()
        if self._own_http:
            self.http.close()
