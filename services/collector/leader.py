"""Collector -> Leader HTTP calls of DAP-09 §4.6.1 and how their answers are classified.

Each call returns an outcome instead of raising, so the poller decides in one place what is
retried (network errors, 5xx, 429) and what ends the job (any other 4xx problem document).
"""

from __future__ import annotations

import contextlib
import email.utils
import json
import time
from dataclasses import dataclass

import httpx

from shared.dap.ids import CollectionJobId, TaskId
from shared.dap.messages import DAP_AUTH_HEADER, MEDIA_COLLECT_REQ, MEDIA_COLLECTION, CollectionReq
from shared.dap.problems import ProblemType

__all__ = [
    "Gone",
    "LeaderClient",
    "Outcome",
    "Pending",
    "Permanent",
    "Ready",
    "Started",
    "Transient",
]


@dataclass(frozen=True, slots=True)
class Started:
    """The leader accepted the collection job (201)."""


@dataclass(frozen=True, slots=True)
class Pending:
    """Not ready yet (202); `retry_after` is the leader's Retry-After in seconds, if any."""

    retry_after: float | None


@dataclass(frozen=True, slots=True)
class Ready:
    """The encoded `Collection` (200)."""

    body: bytes


@dataclass(frozen=True, slots=True)
class Gone:
    """The leader deleted the job's results (204)."""


@dataclass(frozen=True, slots=True)
class Transient:
    """Worth retrying: the leader was unreachable or answered 5xx/429."""

    reason: str
    retry_after: float | None = None


@dataclass(frozen=True, slots=True)
class Permanent:
    """The leader refused the job; retrying the same request cannot help. `problem` is the
    DAP problem type's name (`ProblemType.value`), or ``http_<status>`` without one."""

    reason: str
    problem: str


Outcome = Started | Pending | Ready | Gone | Transient | Permanent


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """Retry-After as seconds from now: delta-seconds or an HTTP-date (RFC 9110 §10.2.3)."""
    if value is None:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def _problem_document(response: httpx.Response) -> dict[str, object] | None:
    try:
        doc = json.loads(response.content)
    except (ValueError, RecursionError):
        return None
    return doc if isinstance(doc, dict) else None


def problem_name(response: httpx.Response) -> str:
    """A short, bounded name of an error response: the DAP problem type's name if it is one,
    else ``http_<status>`` (metrics label failed collections by it)."""
    doc = _problem_document(response)
    kind = doc.get("type") if doc is not None else None
    problem = ProblemType.from_urn(kind) if isinstance(kind, str) else None
    return problem.value if problem is not None else f"http_{response.status_code}"


def describe_problem(response: httpx.Response) -> str:
    """A one-line description of an error response, naming the DAP problem type if any."""
    status = response.status_code
    doc = _problem_document(response)
    if doc is None:
        return f"leader answered HTTP {status}"
    kind = doc.get("type")
    problem = ProblemType.from_urn(kind) if isinstance(kind, str) else None
    name = problem.value if problem is not None else (kind or "error")
    detail = doc.get("detail") or doc.get("title")
    return f"leader answered HTTP {status} {name}" + (f": {detail}" if detail else "")


class LeaderClient:
    """Talks to one leader for one task, authenticating as the collector (DAP-09 §3.1)."""

    def __init__(self, http: httpx.AsyncClient, leader_endpoint: str, auth_token: str) -> None:
        self._http = http
        self._base = leader_endpoint.rstrip("/")
        # Both headers: `Authorization: Bearer` is what sagg's leader expects, DAP-Auth-Token
        # is what interop peers (Janus, the interop draft) expect.
        self._headers = {"Authorization": f"Bearer {auth_token}", DAP_AUTH_HEADER: auth_token}

    def _url(self, task_id: TaskId, job_id: CollectionJobId) -> str:
        return f"{self._base}/tasks/{task_id.to_b64url()}/collection_jobs/{job_id.to_b64url()}"

    async def start(
        self, task_id: TaskId, job_id: CollectionJobId, request: CollectionReq
    ) -> Outcome:
        """PUT the CollectionReq; an identical re-PUT after a crash is accepted by the leader."""
        headers = {**self._headers, "Content-Type": MEDIA_COLLECT_REQ}
        try:
            response = await self._http.put(
                self._url(task_id, job_id), content=request.encode(), headers=headers
            )
        except httpx.HTTPError as exc:
            return Transient(f"cannot reach the leader: {type(exc).__name__}")
        if response.status_code in (200, 201):
            return Started()
        return self._error(response)

    async def poll(self, task_id: TaskId, job_id: CollectionJobId) -> Outcome:
        """POST with an empty body: 202 pending, 200 Collection, 204 deleted (DAP-09 §4.6.1)."""
        try:
            response = await self._http.post(self._url(task_id, job_id), headers=self._headers)
        except httpx.HTTPError as exc:
            return Transient(f"cannot reach the leader: {type(exc).__name__}")
        status = response.status_code
        if status == 202:
            return Pending(parse_retry_after(response.headers.get("Retry-After")))
        if status == 200:
            media = response.headers.get("Content-Type", "").split(";")[0].strip()
            if media != MEDIA_COLLECTION:
                return Permanent(
                    f"leader answered 200 with Content-Type {media!r}", "unexpected_media_type"
                )
            return Ready(response.content)
        if status == 204:
            return Gone()
        return self._error(response)

    async def delete(self, task_id: TaskId, job_id: CollectionJobId) -> None:
        """Tell the leader it may discard the job (DAP-09 §4.6.1); best effort."""
        with contextlib.suppress(httpx.HTTPError):
            await self._http.delete(self._url(task_id, job_id), headers=self._headers)

    @staticmethod
    def _error(response: httpx.Response) -> Outcome:
        status = response.status_code
        reason = describe_problem(response)
        if status >= 500 or status in (408, 429):
            return Transient(reason, parse_retry_after(response.headers.get("Retry-After")))
        return Permanent(reason, problem_name(response))
