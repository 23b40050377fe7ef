"""Collector -> Leader HTTP calls of DAP-09 §4.6.1 and DAP-19 §4.6.1, and how their answers
are classified.

Each call returns an outcome instead of raising, so the poller decides in one place what is
retried (network errors, 5xx, 429) and what ends the job (any other 4xx problem document).

DAP-19 (`LeaderClient19`, digest §4 rows 7-9, §2; a taskprov task's requests carry its
DAP-Taskprov announcement, digest §11): the collector POSTs its CollectionJobReq to
``{leader}/tasks/{id}/collection_jobs``; the leader picks the job id and answers any 2xx with a
``Location`` (resolved against the request URL, RFC 9110 §10.2.2) and either the
CollectionJobResp or an empty body (pending, with Retry-After). The collector then GETs the
Location: an empty 2xx is still pending, a 2xx body is the CollectionJobResp, a problem
document is the failure. Statuses are read by class only (201/202 are not relied on). A
Location on another origin or outside ``{leader}/tasks/{id}/collection_jobs/`` is refused, as
dap-ts does: the collector's credential goes to that URL. Creation is idempotent (an identical
POST names the same job), so a collector that lost the Location POSTs again.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass
from urllib.parse import urljoin, urlsplit

import httpx

from services.common.http import parse_retry_after
from shared.dap import messages19 as m19
from shared.dap import taskprov
from shared.dap.ids import CollectionJobId, TaskId
from shared.dap.messages import DAP_AUTH_HEADER, MEDIA_COLLECT_REQ, MEDIA_COLLECTION, CollectionReq
from shared.dap.problems import ProblemType

__all__ = [
    "Gone",
    "LeaderClient",
    "LeaderClient19",
    "Outcome",
    "Pending",
    "Permanent",
    "Ready",
    "Started",
    "Transient",
]


@dataclass(frozen=True, slots=True)
class Started:
    """The leader accepted the collection job (DAP-09: 201; DAP-19: a 2xx naming the job's
    URL, `location`, with no result yet)."""

    location: str | None = None
    retry_after: float | None = None


@dataclass(frozen=True, slots=True)
class Pending:
    """Not ready yet (202); `retry_after` is the leader's Retry-After in seconds, if any."""

    retry_after: float | None


@dataclass(frozen=True, slots=True)
class Ready:
    """The encoded `Collection` (200); a DAP-19 job answered by its creating POST carries the
    `location` it was created at (to DELETE it there once the outcome is stored)."""

    body: bytes
    location: str | None = None


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


class LeaderClient19:
    """DAP-19 collection jobs at one leader, authenticating as the collector (module
    docstring; DAP-19 §3.1-§3.3, §4.6.1)."""

    def __init__(
        self,
        http: httpx.AsyncClient,
        leader_endpoint: str,
        auth_token: str,
        announce: bytes | None = None,
    ) -> None:
        self._http = http
        self._base = leader_endpoint.rstrip("/")
        self._headers = {"Authorization": f"Bearer {auth_token}"}
        if announce is not None:
            # A taskprov task: every collection request announces it (digest §11).
            self._headers[taskprov.HEADER] = taskprov.encode_header(announce)

    def _jobs(self, task_id: TaskId) -> str:
        return f"{self._base}/tasks/{task_id.to_b64url()}/collection_jobs"

    async def create(self, task_id: TaskId, request: m19.CollectionJobReq) -> Outcome:
        """POST the CollectionJobReq: `Started` (pending), `Ready` (answered at once) or a
        failure."""
        url = self._jobs(task_id)
        headers = {**self._headers, "Content-Type": m19.MEDIA_COLLECTION_JOB_REQ}
        try:
            response = await self._http.post(url, content=request.encode(), headers=headers)
        except httpx.HTTPError as exc:
            return Transient(f"cannot reach the leader: {type(exc).__name__}")
        if not response.is_success:
            return LeaderClient._error(response)
        location = response.headers.get("Location")
        if location is None:
            return Permanent("leader created the collection job without a Location", "no_location")
        resolved = urljoin(url, location)
        if not self._owns(task_id, resolved):
            return Permanent(f"leader named the job at {location!r}", "foreign_location")
        if response.content:
            return self._result(response, resolved)
        return Started(resolved, parse_retry_after(response.headers.get("Retry-After")))

    def _owns(self, task_id: TaskId, url: str) -> bool:
        """Whether `url` is a collection job of this task at this leader."""
        jobs, found = urlsplit(self._jobs(task_id) + "/"), urlsplit(url)
        same_origin = (found.scheme, found.netloc) == (jobs.scheme, jobs.netloc)
        job = found.path.removeprefix(jobs.path)
        return same_origin and job != found.path and bool(job) and "/" not in job

    async def poll(self, location: str) -> Outcome:
        """GET the job: an empty 2xx is pending, a 2xx body the CollectionJobResp."""
        try:
            response = await self._http.get(location, headers=self._headers)
        except httpx.HTTPError as exc:
            return Transient(f"cannot reach the leader: {type(exc).__name__}")
        if not response.is_success:
            return LeaderClient._error(response)
        if not response.content:
            return Pending(parse_retry_after(response.headers.get("Retry-After")))
        return self._result(response)

    @staticmethod
    def _result(response: httpx.Response, location: str | None = None) -> Outcome:
        content_type = response.headers.get("Content-Type", "")
        if m19.media_type_message(content_type) != "collection-job-resp":
            return Permanent(
                f"leader answered with Content-Type {content_type!r}", "unexpected_media_type"
            )
        return Ready(response.content, location)

    async def delete(self, location: str) -> bool:
        """Tell the leader it may discard the job (DAP-19 §4.6.1 "Collection Job Deletion":
        it keeps what replay and double-collection checks need); whether it answered 2xx."""
        try:
            response = await self._http.delete(location, headers=self._headers)
        except httpx.HTTPError:
            return False
        return response.is_success
