"""The CLI side of collection: ask the collector service, wait, and format the result.

`fetch_task` reads the collector's task first (``GET /internal/tasks/{id}`` through
`services.common.admin_client`): an unknown task fails before anything is started, and the
analysis learns the aggregators' noise (004 §5).
"""

from __future__ import annotations

import csv
import io
import json
import time
from datetime import UTC, datetime
from typing import Any

import httpx
from pydantic import ValidationError

from deploy.errors import DeployError
from deploy.tables import table_text
from services.common.admin_client import AdminClient, Party, ProvisionError, TaskMissingError
from shared.dap.task import CollectorTaskInfo
from shared.transport import http_failure

__all__ = [
    "CollectError",
    "fetch_task",
    "format_result",
    "request_collection",
    "wait_for_collection",
]


class CollectError(DeployError):
    """The collection could not be started or did not finish; one-line message."""


def _detail(response: httpx.Response) -> str:
    try:
        doc = response.json()
    except ValueError:
        return f"HTTP {response.status_code}"
    if isinstance(doc, dict):
        text = doc.get("detail") or doc.get("title")
        if text:
            return f"HTTP {response.status_code}: {text}"
    return f"HTTP {response.status_code}"


def fetch_task(http: httpx.Client, collector: str, token: str, task_id: str) -> CollectorTaskInfo:
    """The collector's task without its secrets."""
    try:
        body = AdminClient(http).get_task(Party("collector", collector, token), task_id)
    except TaskMissingError:
        raise CollectError(f"unknown task {task_id}: the collector has no such task") from None
    except ProvisionError as exc:
        raise CollectError(str(exc)) from None
    body.pop("collector_hpke_config", None)
    try:
        return CollectorTaskInfo.model_validate(body)
    except ValidationError:
        raise CollectError(f"the collector sent a malformed definition of task {task_id}") from None


def request_collection(
    http: httpx.Client, collector: str, token: str, task_id: str, query: dict[str, Any]
) -> str:
    """POST /collections; returns the collection job id."""
    try:
        response = http.post(
            f"{collector.rstrip('/')}/collections",
            json={"task_id": task_id, "query": query},
            headers={"Authorization": f"Bearer {token}"},
        )
    except httpx.HTTPError as exc:
        raise CollectError(
            f"cannot reach the collector at {collector}: {http_failure(exc)}"
        ) from None
    # 200: a DAP-19 batch this collector has already collected (its stored outcome answers).
    if response.status_code not in (200, 201):
        raise CollectError(f"the collector refused the collection: {_detail(response)}")
    job_id = response.json().get("collection_job_id")
    if not isinstance(job_id, str):
        raise CollectError("the collector did not return a collection job id")
    return job_id


def wait_for_collection(
    http: httpx.Client, collector: str, token: str, job_id: str, wait: float, interval: float = 0.25
) -> dict[str, Any]:
    """Poll GET /collections/{id} until it is no longer pending or `wait` seconds pass."""
    deadline = time.monotonic() + wait
    url = f"{collector.rstrip('/')}/collections/{job_id}"
    while True:
        try:
            response = http.get(url, headers={"Authorization": f"Bearer {token}"})
        except httpx.HTTPError as exc:
            raise CollectError(
                f"cannot reach the collector at {collector}: {http_failure(exc)}"
            ) from None
        if response.status_code != 200:
            raise CollectError(f"the collector answered {_detail(response)}")
        body: dict[str, Any] = response.json()
        if body.get("state") == "failed":
            raise CollectError(f"collection failed: {body.get('error', 'unknown error')}")
        if body.get("state") == "complete":
            return body
        if time.monotonic() >= deadline:
            raise CollectError(
                f"collection job {job_id} still pending after {wait:g} s (check later: GET {url})"
            )
        time.sleep(interval)


def _vdaf_name(vdaf: dict[str, Any]) -> str:
    params = ", ".join(f"{k}={v}" for k, v in vdaf.items() if k != "type")
    return f"{vdaf.get('type', '?')}({params})" if params else str(vdaf.get("type", "?"))


def _utc(seconds: int) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def format_result(body: dict[str, Any], fmt: str) -> str:
    """The completed collection as a table, JSON or CSV."""
    result = body.get("result")
    if fmt == "json":
        return json.dumps(body, indent=2)
    if fmt == "csv":
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        if isinstance(result, list):
            writer.writerow(["bucket", "value"])
            writer.writerows([i, v] for i, v in enumerate(result))
        else:
            writer.writerow(["result"])
            writer.writerow([result])
        return out.getvalue().rstrip("\n")

    lines = [
        f"task          {body.get('task_id', '?')}",
        f"VDAF          {_vdaf_name(body.get('vdaf', {}))}",
        f"reports       {body.get('report_count', '?')}",
    ]
    interval = body.get("interval")
    if isinstance(interval, dict):
        start, duration = int(interval["start"]), int(interval["duration"])
        lines.append(f"interval      {_utc(start)} .. {_utc(start + duration)} ({duration} s)")
    if body.get("batch_id"):
        lines.append(f"batch         {body['batch_id']}")
    if isinstance(result, list):
        lines += ["", table_text(("bucket", "value"), enumerate(result), right=(0, 1))]
    else:
        lines.append(f"result        {result}")
    return "\n".join(lines)
