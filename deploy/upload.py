"""A small DAP-09 client for plain measurements: fetch configs, shard, seal, upload (DAP-09 §4.4).

Each aggregator's HPKE config is fetched once (`GET /hpke_config?task_id=`, DAP-09 §4.4.1);
reports are built by the SDK's `client_sdk.reports.build_reports` (no extensions: plain tasks
take neither tokens nor recipe bindings) and PUT to the leader as `application/dap-report`
(DAP-09 §4.4.2), a few in flight at a time.
"""

from __future__ import annotations

import random
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import httpx
from pydantic import BaseModel, ConfigDict, Field

from client_sdk.errors import ClientError
from client_sdk.http import http_client, http_failure
from client_sdk.reports import NoUsableConfigError, ReportInput, choose_config
from client_sdk.reports import build_reports as sdk_build_reports
from shared.codec import DecodeError
from shared.dap.ids import TaskId
from shared.dap.messages import (
    MEDIA_HPKE_CONFIG_LIST,
    MEDIA_REPORT,
    HpkeConfig,
    HpkeConfigList,
    Report,
)
from shared.transport import TransportPolicy
from shared.vdaf.spec import VdafSpec

__all__ = [
    "ClientTask",
    "UploadError",
    "UploadResult",
    "expected_aggregate",
    "fetch_hpke_config",
    "random_measurements",
    "upload_reports",
]


class UploadError(ClientError):
    """An upload could not be done; the message is one line."""


class ClientTask(BaseModel):
    """What a client needs to know about a task (what `sagg task create` prints)."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    task_id: str
    leader: str
    helper: str
    vdaf: VdafSpec
    time_precision: int = Field(ge=1)


@dataclass(frozen=True, slots=True)
class UploadResult:
    uploaded: int
    rejected: list[str]  # one line per report the leader refused


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


def build_reports(
    task: ClientTask,
    measurements: Sequence[Any],
    leader_config: HpkeConfig,
    helper_config: HpkeConfig,
    report_time: int,
) -> list[Report]:
    """Shard and seal one report per measurement (ValueError for an invalid measurement)."""
    return sdk_build_reports(
        task.vdaf.instance(),
        TaskId.from_b64url(task.task_id),
        task.time_precision,
        [ReportInput(m, report_time) for m in measurements],
        leader_config,
        helper_config,
    )


def upload_reports(
    task: ClientTask,
    measurements: Sequence[Any],
    *,
    report_time: int | None = None,
    http: httpx.Client | None = None,
    concurrency: int = 8,
) -> UploadResult:
    """Upload one report per measurement to the task's leader.

    Raises UploadError when nothing can be uploaded (configs unavailable, a measurement out of
    range); reports the leader refuses one by one are listed in the result instead.
    """
    own = http is None
    client = http or http_client(TransportPolicy(), timeout=30.0)
    try:
        task_id = TaskId.from_b64url(task.task_id)
        leader_config = fetch_hpke_config(client, task.leader, task_id)
        helper_config = fetch_hpke_config(client, task.helper, task_id)
        try:
            reports = build_reports(
                task,
                measurements,
                leader_config,
                helper_config,
                int(time.time()) if report_time is None else report_time,
            )
        except (ValueError, TypeError) as exc:
            raise UploadError(f"invalid measurement for {task.vdaf.describe()}: {exc}") from None
        url = f"{task.leader.rstrip('/')}/tasks/{task.task_id}/reports"

        def put(report: Report) -> str | None:
            try:
                response = client.put(
                    url, content=report.encode(), headers={"Content-Type": MEDIA_REPORT}
                )
            except httpx.HTTPError as exc:
                return f"cannot reach the leader: {http_failure(exc)}"
            if response.is_success:
                return None
            return f"leader answered {response.status_code}: {response.text[:200]}"

        # Loopback uploads are latency-bound; a few in flight keep the leader busy.
        with ThreadPoolExecutor(max_workers=max(1, concurrency)) as pool:
            outcomes = list(pool.map(put, reports))
        rejected = [reason for reason in outcomes if reason is not None]
        return UploadResult(len(reports) - len(rejected), rejected)
    finally:
        if own:
            client.close()


def random_measurements(vdaf: VdafSpec, count: int, rng: random.Random) -> list[Any]:
    """`count` valid measurements for `vdaf`, uniformly drawn (for demos and load tests)."""
    if vdaf.type == "Prio3Count":
        return [rng.randrange(2) for _ in range(count)]
    if vdaf.type == "Prio3Sum":
        assert vdaf.bits is not None
        return [rng.randrange(2**vdaf.bits) for _ in range(count)]
    if vdaf.type == "Prio3Histogram":
        assert vdaf.length is not None
        return [rng.randrange(vdaf.length) for _ in range(count)]
    if vdaf.type in ("Prio3SumVec", "Prio3SumVecField64Multiproof"):
        assert vdaf.length is not None and vdaf.bits is not None
        bits, length = vdaf.bits, vdaf.length
        return [[rng.randrange(2**bits) for _ in range(length)] for _ in range(count)]
    assert vdaf.length is not None and vdaf.max_count is not None  # MultiHotHistogram
    length, max_count = vdaf.length, vdaf.max_count
    out = []
    for _ in range(count):
        hot = set(rng.sample(range(length), rng.randint(0, max_count)))
        out.append([int(i in hot) for i in range(length)])
    return out


def expected_aggregate(vdaf: VdafSpec, measurements: Sequence[Any]) -> int | list[int]:
    """What collecting exactly these measurements must give (the plain-text aggregate)."""
    if vdaf.type in ("Prio3Count", "Prio3Sum"):
        return sum(int(m) for m in measurements)
    assert vdaf.length is not None
    if vdaf.type == "Prio3Histogram":
        counts = [0] * vdaf.length
        for m in measurements:
            counts[int(m)] += 1
        return counts
    return [sum(int(m[i]) for m in measurements) for i in range(vdaf.length)]
