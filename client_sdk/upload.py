"""The DAP upload client: HPKE configs from the aggregators, reports to the leader (DAP-09 §4.4).

Every uploader in sagg goes through this module: the SDK device (`client_sdk.device`), the
simulator, ``sagg upload`` (`deploy.cli`) and the interop client role (`deploy.interop.client`).

- `Uploader.put` sends one sealed report, ``PUT {leader}/tasks/{task_id}/reports`` with
  ``application/dap-report`` (§4.4.2). Network errors and 5xx answers are retried a bounded
  number of times with exponential backoff and jitter (so that thousands of simulated devices
  do not retry in lockstep); a 4xx is final, and ``outdatedConfig`` is reported as such so the
  device can send a fresh report once.
- `fetch_hpke_config` asks an aggregator for its configs (``GET /hpke_config?task_id=``,
  §4.4.1). A device never does: it seals only to the configs of the signed, logged recipe.
- `upload_reports` is the plain client of a task without tokens or recipe bindings (what
  ``sagg task create`` prints, or what the interop runner sends): fetch both configs, shard and
  seal every measurement (`client_sdk.reports`), and put them a few in flight at a time.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Literal

import httpx
from pydantic import BaseModel, ConfigDict, Field

from client_sdk.http import http_client
from client_sdk.reports import NoUsableConfigError, ReportInput, build_reports, choose_config
from shared.codec import DecodeError
from shared.dap.ids import TaskId
from shared.dap.messages import (
    MEDIA_HPKE_CONFIG_LIST,
    MEDIA_REPORT,
    HpkeConfig,
    HpkeConfigList,
    Report,
)
from shared.dap.problems import ProblemType
from shared.transport import TransportPolicy, http_failure
from shared.vdaf.spec import VdafSpec

__all__ = [
    "ClientTask",
    "UploadError",
    "UploadResult",
    "UploadSummary",
    "Uploader",
    "fetch_hpke_config",
    "upload_reports",
]


class UploadError(Exception):
    """An upload could not be done at all; the message is one line."""


@dataclass(frozen=True, slots=True)
class UploadResult:
    """The fate of one report."""

    status: Literal["sent", "outdated_config", "rejected", "failed"]
    detail: str = ""
    attempts: int = 1


class Uploader:
    def __init__(
        self,
        http: httpx.Client,
        *,
        retries: int = 3,
        backoff: float = 0.2,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.http = http
        self.retries = retries
        self.backoff = backoff
        self._sleep = sleep
        self._jitter = random.Random()  # timing only; nothing private depends on it

    def put(self, leader: str, task_id: str, body: bytes) -> UploadResult:
        url = f"{leader.rstrip('/')}/tasks/{task_id}/reports"
        detail = ""
        for attempt in range(1, self.retries + 2):
            try:
                response = self.http.put(url, content=body, headers={"Content-Type": MEDIA_REPORT})
            except httpx.HTTPError as exc:
                detail = f"cannot reach the leader: {http_failure(exc)}"
            else:
                if response.is_success:
                    return UploadResult("sent", attempts=attempt)
                if response.status_code < 500:
                    return self._refusal(response, attempt)
                detail = f"leader answered {response.status_code}"
            if attempt <= self.retries:
                delay = self.backoff * 2 ** (attempt - 1)
                self._sleep(delay * (0.5 + self._jitter.random()))
        return UploadResult("failed", detail, self.retries + 1)

    @staticmethod
    def _refusal(response: httpx.Response, attempt: int) -> UploadResult:
        problem: ProblemType | None = None
        try:
            body = response.json()
            if isinstance(body, dict) and isinstance(body.get("type"), str):
                problem = ProblemType.from_urn(body["type"])
        except ValueError:
            pass
        if problem is ProblemType.OUTDATED_CONFIG:
            return UploadResult("outdated_config", "outdatedConfig", attempt)
        name = problem.value if problem else str(response.status_code)
        return UploadResult("rejected", f"leader refused the report: {name}", attempt)


class ClientTask(BaseModel):
    """What a plain client needs to know about a task (what `sagg task create` prints)."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    task_id: str
    leader: str
    helper: str
    vdaf: VdafSpec
    time_precision: int = Field(ge=1)

    def build_reports(
        self,
        measurements: Sequence[Any],
        leader_config: HpkeConfig,
        helper_config: HpkeConfig,
        report_time: int,
    ) -> list[Report]:
        """Shard and seal one report per measurement, without extensions (ValueError for an
        invalid measurement)."""
        return build_reports(
            self.vdaf.instance(),
            TaskId.from_b64url(self.task_id),
            self.time_precision,
            [ReportInput(m, report_time) for m in measurements],
            leader_config,
            helper_config,
        )


@dataclass(frozen=True, slots=True)
class UploadSummary:
    uploaded: int
    rejected: list[str]  # one line per report the leader refused or that never arrived


def fetch_hpke_config(http: httpx.Client, aggregator: str, task_id: TaskId) -> HpkeConfig:
    """The aggregator's preferred HPKE config whose suite this client supports (DAP-09 §4.4.1)."""
    url = f"{aggregator.rstrip('/')}/hpke_config"
    try:
        response = http.get(url, params={"task_id": task_id.to_b64url()})
    except httpx.HTTPError as exc:
        raise UploadError(f"cannot reach {aggregator}: {http_failure(exc)}") from None
    if response.status_code != 200:
        raise UploadError(f"{aggregator} refused the HPKE config request: {response.status_code}")
    media = response.headers.get("Content-Type", "").split(";")[0].strip()
    if media != MEDIA_HPKE_CONFIG_LIST:
        raise UploadError(f"{aggregator} sent HPKE configs as {media!r}")
    try:
        configs = HpkeConfigList.decode(response.content).configs
    except DecodeError as exc:
        raise UploadError(f"{aggregator} sent an invalid HpkeConfigList: {exc}") from None
    try:
        return choose_config(configs)
    except NoUsableConfigError:
        raise UploadError(f"{aggregator} offers no HPKE suite this client supports") from None


def upload_reports(
    task: ClientTask,
    measurements: Sequence[Any],
    *,
    report_time: int | None = None,
    http: httpx.Client | None = None,
    concurrency: int = 8,
    retries: int = 3,
) -> UploadSummary:
    """Upload one report per measurement to the task's leader.

    Raises UploadError when nothing can be uploaded (configs unavailable, a measurement out of
    range); reports the leader refuses one by one are listed in the result instead. The leader's
    refusals are final (a far-future time, a replay, a collected batch do not change on retry);
    network errors and 5xx answers are retried up to `retries` times.
    """
    own = http is None
    client = http or http_client(TransportPolicy(), timeout=30.0)
    try:
        task_id = TaskId.from_b64url(task.task_id)
        leader_config = fetch_hpke_config(client, task.leader, task_id)
        helper_config = fetch_hpke_config(client, task.helper, task_id)
        try:
            reports = task.build_reports(
                measurements,
                leader_config,
                helper_config,
                int(time.time()) if report_time is None else report_time,
            )
        except (ValueError, TypeError) as exc:
            raise UploadError(f"invalid measurement for {task.vdaf.describe()}: {exc}") from None
        uploader = Uploader(client, retries=retries)

        def put(report: Report) -> UploadResult:
            return uploader.put(task.leader, task.task_id, report.encode())

        # Loopback uploads are latency-bound; a few in flight keep the leader busy.
        with ThreadPoolExecutor(max_workers=max(1, concurrency)) as pool:
            outcomes = list(pool.map(put, reports))
        rejected = [outcome.detail for outcome in outcomes if outcome.status != "sent"]
        return UploadSummary(len(reports) - len(rejected), rejected)
    finally:
        if own:
            client.close()
