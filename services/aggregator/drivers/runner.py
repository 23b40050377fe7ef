"""Background threads running the leader's drivers in the aggregator process."""

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
        self.aggregation = AggregationJobDriver(agg, self.http)
        self.collection = CollectionJobDriver(agg, self.http)

    def start(self) -> None:
        # Leases keep the aggregation workers on different jobs, as they keep processes apart.
        workers = self.agg.settings.aggregation_workers
        loops: dict[str, Callable[[], int]] = {
            "job-creator": lambda: create_jobs(self.agg),
            **{f"aggregation-driver-{i}": self.aggregation.run_once for i in range(workers)},
            "collection-driver": self.collection.run_once,
            "task-cleanup": self._cleanup,
        }
        for name, step in loops.items():
            thread = threading.Thread(target=self._loop, args=(name, step), name=name, daemon=True)
            thread.start()
            self._threads.append(thread)

    def _cleanup(self) -> int:
        delete_expired_tasks(self.agg)
        collect_garbage(self.agg)
        # Expirations are coarse; looking once a minute is plenty.
        self._stop.wait(60)
        return 0

    def _loop(self, name: str, step: Callable[[], int]) -> None:
        pause = self.agg.settings.driver_poll_s
        while not self._stop.is_set():
            try:
                busy = step()
            except Exception as exc:
                # Log the type only: messages may quote stored data.
                log.error("%s step failed: %s", name, type(exc).__name__)
                busy = 0
            if not busy:
                self._stop.wait(pause)

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout)
        self._threads.clear()
        if self._own_http:
            self.http.close()
