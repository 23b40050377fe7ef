"""What the drivers share: the leased-job loop step, HTTP plumbing to the helper and retry
timing."""

from __future__ import annotations

import contextlib
import json
import logging
from abc import ABC, abstractmethod
from dataclasses import dataclass

import httpx

from services.aggregator.datastore import Lease, LeaseLostError
from services.aggregator.service import Aggregator, Task
from services.aggregator.settings import AggregatorSettings
from services.common.auth import auth_headers
from services.common.db import TransientDbError
from services.common.http import parse_retry_after
from shared.dap import taskprov
from shared.dap.problems import ProblemType

log = logging.getLogger(__name__)


class LeasedJobDriver(ABC):
    """A driver of one kind of leader job (Janus's job driver: an acquirer and a stepper):
    each `run_once` leases up to `driver_batch` of them and steps each in turn; a lease lost
    meanwhile means another worker took the job over, which is not an error."""

    #: What the log calls the job.
    kind: str

    def __init__(self, agg: Aggregator, http: httpx.Client) -> None:
        self.agg = agg
        self.http = http

    @abstractmethod
    def acquire(self, now: int, lease_s: int, limit: int) -> list[Lease]:
        """Lease up to `limit` jobs due at `now` for `lease_s` seconds."""

    @abstractmethod
    def step(self, lease: Lease) -> None:
        """Do the leased job's next unit of work and commit it."""

    @abstractmethod
    def release_uncounted(self, lease: Lease, retry_at: int) -> None:
        """Give the job back for another step at `retry_at`, the attempt not counted."""

    def run_once(self) -> int:
        """Lease and step a few jobs; how many were leased."""
        s = self.agg.settings
        leases = self.acquire(self.agg.clock.now(), s.lease_duration_s, s.driver_batch)
        for lease in leases:
            try:
                self.step(lease)
            except LeaseLostError:
                log.warning("lost the lease on %s; another worker has it", self.kind)
            except TransientDbError:
                # The store refused a transaction of the step past its retries (PostgreSQL's
                # serialization conflicts under load). That transaction committed nothing and a
                # step may run again, as after a crash, so the job is due again at once instead
                # of after its lease (a minute by default); a request the helper answered is
                # answered again from its record of it. Not an attempt of the job's: the store
                # failed, not the job.
                log.warning("the store failed %s's step; it is due again", self.kind)
                with contextlib.suppress(LeaseLostError):
                    self.release_uncounted(lease, self.agg.clock.now())
        return len(leases)


@dataclass(frozen=True)
class HelperError(Exception):
    """The helper answered with a 4xx: retrying the same request will not help."""

    status: int
    problem: ProblemType | None
    #: The job the refused answer came with (DAP-19: its Location), to DELETE.
    job_url: str | None = None


class HelperUnavailableError(Exception):
    """Network failure or 5xx: worth retrying later."""


class HelperPendingError(Exception):
    """DAP-19 §3.1: the helper deferred the work (a 2xx with an empty body); ask again after
    `retry_after_s`, with the identical request or a GET of its Location."""

    def __init__(self, retry_after_s: float = 1.0) -> None:
        super().__init__(f"pending; retry after {retry_after_s} s")
        self.retry_after_s = retry_after_s


def helper_headers(task: Task) -> dict[str, str]:
    """The headers of every leader -> helper request of the task: the aggregator token, and a
    taskprov task's announcement (taskprov: "in every request incident to the task")."""
    headers = auth_headers(task.record.helper_token or "")
    if task.taskprov and task.announcement is not None:
        headers[taskprov.HEADER] = task.announcement
    return headers


def helper_url(endpoint: str, path: str) -> str:
    return endpoint.rstrip("/") + "/" + path.lstrip("/")


def check_response(response: httpx.Response) -> None:
    """Raise HelperUnavailableError for 5xx/429, HelperError for other non-2xx answers."""
    if response.status_code >= 500 or response.status_code == 429:
        raise HelperUnavailableError(f"helper answered {response.status_code}")
    if response.status_code >= 400:
        problem = None
        try:
            body = json.loads(response.content)
            if isinstance(body, dict) and isinstance(body.get("type"), str):
                problem = ProblemType.from_urn(body["type"])
        except ValueError:
            pass
        raise HelperError(response.status_code, problem)


def retry_after(response: httpx.Response, default: float = 1.0) -> float:
    """The seconds a deferring server asks to wait (`parse_retry_after`: capped), `default`
    without a readable Retry-After."""
    wait = parse_retry_after(response.headers.get("retry-after"))
    return default if wait is None else wait


def backoff(settings: AggregatorSettings, attempts: int) -> int:
    """Seconds to wait before attempt `attempts + 1` (exponential, capped, at least 1)."""
    delay = settings.retry_base_s * 2 ** max(0, attempts - 1)
    return max(1, int(min(settings.retry_max_s, delay)))
