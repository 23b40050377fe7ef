"""The DAP upload client: HPKE configs from the aggregators, reports to the leader (DAP-09
§4.4, DAP-19 §4.4).

Every uploader in sagg goes through this module: the SDK device (`client_sdk.device`), the
simulator, ``sagg upload`` (`deploy.cli`) and the interop client role (`deploy.interop.client`).

- `Uploader.put` sends one sealed DAP-09 report, ``PUT {leader}/tasks/{task_id}/reports`` with
  ``application/dap-report`` (DAP-09 §4.4.2); a refusal is a problem document, and
  ``outdatedConfig`` is reported as such so the device can send a fresh report once.
- `Uploader.post` sends DAP-19 reports in one ``UploadRequest`` (the reports one after the
  other), ``POST {leader}/tasks/{task_id}/reports`` with ``application/ppm-dap;message=upload-req``
  (DAP-19 §4.4.2, digest §5.3): an empty 2xx accepts them all, an ``UploadErrors`` body names
  the refused ones with their ReportError (`hpke_unknown_config_id` is the DAP-19 spelling of
  outdatedConfig), a problem document refuses the whole request.
- `Uploader.upload` sends reports of either version: one request per report for DAP-09,
  `per_request` reports per request for DAP-19; one `UploadResult` per report, in order.
- A taskprov task's reports (digest §11) go with its announcement, the ``DAP-Taskprov``
  header of its encoded TaskConfiguration (`announce`): the leader opts into the task on the
  first of them (`ClientTask.taskprov`, `RecipeTask.taskprov`).

Network errors and 5xx answers are retried a bounded number of times with exponential backoff
and jitter (so that thousands of simulated devices do not retry in lockstep); a 4xx is final.
A leader may have stored a report before its 5xx or the lost answer: a resend of it is then
refused as a replay, which for a report that went out before (a retry here, or `resent` by the
device's earlier rounds) means it was stored, so it counts as sent; report ids are 16 random
bytes, so no other report has that id. DAP-19 says so (``report_replayed``); DAP-09's
``reportRejected`` does not say why, so there only sagg's detail says it
(`shared.dap.problems.REPORT_REPLAYED_DETAIL`; a leader that ignores a duplicate answers 201).

- `fetch_hpke_config` asks an aggregator for its configs (``GET /hpke_config``, with
  ``?task_id=`` for DAP-09 only: DAP-19 has no per-task configs, §4.4.1). A device never does:
  it seals only to the configs of the signed, logged recipe.
- `upload_reports` is the plain client of a task without tokens or recipe bindings (what
  ``sagg task create`` prints, or what the interop runner sends): fetch both configs, shard and
  seal every measurement (`client_sdk.reports`), and send them a few requests in flight at a
  time.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Literal

import httpx
from pydantic import BaseModel, ConfigDict, Field, model_validator

from client_sdk.errors import ClientError
from client_sdk.http import HttpClient, HttpResponse, http_client
from client_sdk.reports import (
    AnyReport,
    NoUsableConfigError,
    ReportInput,
    ReportWire,
    build_reports,
    choose_config,
)
from shared.codec import DecodeError
from shared.dap import messages19 as m19
from shared.dap import taskprov
from shared.dap.ids import ReportId, TaskId
from shared.dap.messages import (
    MEDIA_HPKE_CONFIG_LIST,
    MEDIA_REPORT,
    HpkeConfig,
    HpkeConfigList,
)
from shared.dap.problems import PROBLEM_URN_PREFIX, REPORT_REPLAYED_DETAIL
from shared.dap.task import DapVersion
from shared.transport import TransportPolicy, http_failure
from shared.vdaf.spec import VdafSpec

__all__ = [
    "DEFAULT_REPORTS_PER_REQUEST",
    "ClientTask",
    "UploadError",
    "UploadResult",
    "UploadSummary",
    "Uploader",
    "fetch_hpke_config",
    "upload_reports",
]

#: DAP-19 reports per UploadRequest by default (the bulk upload of the issue's benchmark).
DEFAULT_REPORTS_PER_REQUEST = 100

Status = Literal["sent", "outdated_config", "rejected", "failed"]

#: The DAP-19 per-report errors after which a fresh report may still get through: a report
#: sealed to an unknown config (after new configs) or one from the future (later).
_RETRYABLE_19: dict[m19.ReportError, Status] = {
    m19.ReportError.HPKE_UNKNOWN_CONFIG_ID: "outdated_config",
    m19.ReportError.REPORT_TOO_EARLY: "failed",
}


class UploadError(ClientError):
    """An upload could not be done at all; the message is one line."""


@dataclass(frozen=True, slots=True)
class UploadResult:
    """The fate of one report."""

    status: Status
    detail: str = ""
    attempts: int = 1


def _problem(response: HttpResponse) -> tuple[str, str | None] | None:
    """The DAP problem type token of a refusal (``outdatedConfig``, ...) and its detail, if it
    names one."""
    try:
        body = response.json()
    except ValueError:
        return None
    if not isinstance(body, dict):
        return None
    kind, detail = body.get("type"), body.get("detail")
    if isinstance(kind, str) and kind.startswith(PROBLEM_URN_PREFIX):
        return kind[len(PROBLEM_URN_PREFIX) :], detail if isinstance(detail, str) else None
    return None


class Uploader:
    def __init__(
        self,
        http: HttpClient,
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

    def _send(
        self, method: str, url: str, body: bytes, media: str, announce: bytes | None = None
    ) -> tuple[HttpResponse | None, str, int]:
        """The leader's answer below 500 (None after the retries, with the last failure);
        `announce` is a taskprov task's configuration, sent in its DAP-Taskprov header."""
        detail = ""
        headers = {"Content-Type": media}
        if announce is not None:
            headers[taskprov.HEADER] = taskprov.encode_header(announce)
        for attempt in range(1, self.retries + 2):
            try:
                response = self.http.request(method, url, content=body, headers=headers)
            except httpx.HTTPError as exc:
                detail = f"cannot reach the leader: {http_failure(exc)}"
            else:
                if response.status_code < 500:
                    return response, "", attempt
                detail = f"leader answered {response.status_code}"
            if attempt <= self.retries:
                delay = self.backoff * 2 ** (attempt - 1)
                self._sleep(delay * (0.5 + self._jitter.random()))
        return None, detail, self.retries + 1

    @staticmethod
    def _url(leader: str, task_id: str) -> str:
        return f"{leader.rstrip('/')}/tasks/{task_id}/reports"

    def put(self, leader: str, task_id: str, body: bytes, resent: bool = False) -> UploadResult:
        """One DAP-09 report; `resent`: it went out in an earlier call (module docstring)."""
        response, detail, attempts = self._send(
            "PUT", self._url(leader, task_id), body, MEDIA_REPORT
        )
        if response is None:
            return UploadResult("failed", detail, attempts)
        if response.is_success:
            return UploadResult("sent", attempts=attempts)
        problem = _problem(response)
        token, why = problem if problem is not None else (None, None)
        if token == "outdatedConfig":
            return UploadResult("outdated_config", "outdatedConfig", attempts)
        stored_before = (resent or attempts > 1) and (token, why) == (
            "reportRejected",
            REPORT_REPLAYED_DETAIL,
        )
        if stored_before:
            return UploadResult("sent", attempts=attempts)
        name = token or str(response.status_code)
        return UploadResult("rejected", f"leader refused the report: {name}", attempts)

    def post(
        self,
        leader: str,
        task_id: str,
        reports: Sequence[bytes],
        announce: bytes | None = None,
        resent: Sequence[bool] = (),
    ) -> list[UploadResult]:
        """DAP-19 reports in one UploadRequest; one result per report, in order. `announce`:
        the encoded TaskConfiguration of a taskprov task; `resent[i]`: report i went out in an
        earlier call (module docstring)."""
        ids = [m19.Report.decode(report).report_metadata.report_id for report in reports]
        response, detail, attempts = self._send(
            "POST",
            self._url(leader, task_id),
            b"".join(reports),
            m19.MEDIA_UPLOAD_REQ,
            announce,
        )
        if response is None:
            return [UploadResult("failed", detail, attempts)] * len(reports)
        if not response.is_success:
            problem = _problem(response)
            name = problem[0] if problem is not None else str(response.status_code)
            refused = UploadResult("rejected", f"leader refused the reports: {name}", attempts)
            return [refused] * len(reports)
        if not response.content:
            return [UploadResult("sent", attempts=attempts)] * len(reports)
        errors = self._upload_errors(response, ids)
        if isinstance(errors, str):
            return [UploadResult("failed", errors, attempts)] * len(reports)
        out: list[UploadResult] = []
        for i, report_id in enumerate(ids):
            error = errors.get(report_id)
            stored_before = error == m19.ReportError.REPORT_REPLAYED and (
                attempts > 1 or (i < len(resent) and resent[i])
            )
            if error is None or stored_before:
                out.append(UploadResult("sent", attempts=attempts))
                continue
            status: Status = _RETRYABLE_19.get(error, "rejected")
            out.append(UploadResult(status, f"leader refused the report: {error.name.lower()}"))
        return out

    @staticmethod
    def _upload_errors(
        response: HttpResponse, ids: Sequence[ReportId]
    ) -> dict[ReportId, m19.ReportError] | str:
        """The refused reports of an UploadErrors answer, or why it cannot be read (DAP-19
        §4.4.2: only reports of the request, each once, in request order)."""
        media = m19.media_type_message(response.headers.get("Content-Type", ""))
        if media != "upload-errors":
            return f"leader answered the upload with {response.headers.get('Content-Type')!r}"
        try:
            status = m19.UploadErrors.decode(response.content).status
        except DecodeError as exc:
            return f"leader sent an invalid UploadErrors: {exc}"
        errors = {entry.report_id: entry.error for entry in status}
        if len(errors) != len(status) or not set(errors) <= set(ids):
            return "leader's UploadErrors names reports that were not sent"
        return errors

    def upload(
        self,
        dap: DapVersion,
        leader: str,
        task_id: str,
        reports: Sequence[bytes],
        per_request: int = DEFAULT_REPORTS_PER_REQUEST,
        announce: bytes | None = None,
        resent: Sequence[bool] = (),
    ) -> list[UploadResult]:
        """Reports of a `dap` task, one result per report in order (module docstring);
        `announce` is a taskprov task's TaskConfiguration (DAP-19 only), `resent[i]` says
        report i went out before."""
        if dap == "dap-09":
            if announce is not None:
                raise ValueError("taskprov announces DAP-19 tasks only")
            again = list(resent) + [False] * (len(reports) - len(resent))
            return [
                self.put(leader, task_id, report, was)
                for report, was in zip(reports, again, strict=True)
            ]
        out: list[UploadResult] = []
        per = max(1, per_request)
        for lo in range(0, len(reports), per):
            chunk = reports[lo : lo + per]
            out += self.post(leader, task_id, chunk, announce, resent[lo : lo + per])
        return out


class ClientTask(BaseModel):
    """What a plain client needs to know about a task (what `sagg task create` prints)."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    task_id: str
    leader: str
    helper: str
    vdaf: VdafSpec
    time_precision: int = Field(ge=1)
    dap: DapVersion = "dap-09"
    #: A DAP-19 task's encoded TaskConfiguration (unpadded base64url), bound into every AAD.
    task_configuration: str | None = None
    #: A taskprov task (digest §11): uploads announce its configuration, and its id is the
    #: one taskprov derives from it.
    taskprov: bool = False

    @model_validator(mode="after")
    def _wire_is_valid(self) -> ClientTask:
        wire = self.wire  # ValueError for an inconsistent version and configuration
        if self.taskprov:
            if wire.configuration is None:
                raise ValueError("a taskprov task is a dap-19 task")
            if taskprov.task_id_of(wire.configuration) != wire.task_id:
                raise ValueError("a taskprov task's id is the one taskprov derives")
        return self

    @property
    def announcement(self) -> bytes | None:
        """What uploads announce: a taskprov task's TaskConfiguration, else nothing."""
        return self.wire.configuration if self.taskprov else None

    @property
    def wire(self) -> ReportWire:
        return ReportWire.of(self.task_id, self.time_precision, self.dap, self.task_configuration)

    def build_reports(
        self,
        measurements: Sequence[Any],
        leader_config: HpkeConfig,
        helper_config: HpkeConfig,
        report_time: int,
    ) -> list[AnyReport]:
        """Shard and seal one report per measurement, without extensions (ValueError for an
        invalid measurement)."""
        return build_reports(
            self.vdaf.instance(),
            self.wire,
            [ReportInput(m, report_time) for m in measurements],
            leader_config,
            helper_config,
        )


@dataclass(frozen=True, slots=True)
class UploadSummary:
    uploaded: int
    rejected: list[str]  # one line per report the leader refused or that never arrived


def fetch_hpke_config(
    http: HttpClient, aggregator: str, task_id: TaskId, dap: DapVersion = "dap-09"
) -> HpkeConfig:
    """The aggregator's preferred HPKE config whose suite this client supports (DAP-09 §4.4.1,
    DAP-19 §4.4.1: the same HpkeConfigList, under its own media type and for every task)."""
    url = f"{aggregator.rstrip('/')}/hpke_config"
    params = {"task_id": task_id.to_b64url()} if dap == "dap-09" else {}
    try:
        response = http.get(url, params=params)
    except httpx.HTTPError as exc:
        raise UploadError(f"cannot reach {aggregator}: {http_failure(exc)}") from None
    if response.status_code != 200:
        raise UploadError(f"{aggregator} refused the HPKE config request: {response.status_code}")
    content_type = response.headers.get("Content-Type", "")
    media = content_type.split(";")[0].strip()
    # A server that serves both versions on one route may label the list either way.
    if media != MEDIA_HPKE_CONFIG_LIST and m19.media_type_message(content_type) != (
        "hpke-config-list"
    ):
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
    per_request: int = DEFAULT_REPORTS_PER_REQUEST,
) -> UploadSummary:
    """Upload one report per measurement to the task's leader (a DAP-19 task's in
    UploadRequests of `per_request` reports).

    Raises UploadError when nothing can be uploaded (configs unavailable, a measurement out of
    range); reports the leader refuses one by one are listed in the result instead. The leader's
    refusals are final (a far-future time, a replay, a collected batch do not change on retry);
    network errors and 5xx answers are retried up to `retries` times.
    """
    own = http is None
    client = http or http_client(TransportPolicy(), timeout=30.0)
    try:
        task_id = TaskId.from_b64url(task.task_id)
        leader_config = fetch_hpke_config(client, task.leader, task_id, task.dap)
        helper_config = fetch_hpke_config(client, task.helper, task_id, task.dap)
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
        per = 1 if task.dap == "dap-09" else max(1, per_request)
        requests = [
            [report.encode() for report in reports[lo : lo + per]]
            for lo in range(0, len(reports), per)
        ]

        def send(bodies: list[bytes]) -> list[UploadResult]:
            return uploader.upload(
                task.dap, task.leader, task.task_id, bodies, per, task.announcement
            )

        # Loopback uploads are latency-bound; a few in flight keep the leader busy.
        with ThreadPoolExecutor(max_workers=max(1, concurrency)) as pool:
            outcomes = [result for results in pool.map(send, requests) for result in results]
        rejected = [outcome.detail for outcome in outcomes if outcome.status != "sent"]
        return UploadSummary(len(reports) - len(rejected), rejected)
    finally:
        if own:
            client.close()
