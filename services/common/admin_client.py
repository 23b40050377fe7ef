"""The one client of the parties' admin API: ``PUT`` and ``GET /internal/tasks/{id}``.

DAP-09 §4.2 leaves task provisioning out of band; in sagg it is each party's admin API.
``PUT /internal/tasks/{id}`` answers 201 when it created the task, 200 when it already held
the identical one (so provisioning may be retried, as the recipe server does after a failed
publication, without harm), 409 when it holds a different one; ``GET`` answers the task
without its secrets, 404 for an unknown one. Each party takes its own bearer token
(`PartyTokens`): the operator's admin token of that party, or the provisioning token it gave
the recipe server.

Why here: the recipe server provisions tasks (`services.recipe_server.provision`), and so do
``sagg task create`` and the interop roles (`deploy.cli`, `deploy.interop`), while ``sagg
collect`` reads one (`deploy.collect`). `services.common` is the lowest layer that may speak
HTTP (`shared` is pure) and one both the recipe server and `deploy` may import, so the requests
are built and the answers read here, once. `AdminClient` sends them over a blocking client (TLS
under the transport policy of `services.common.http`), `AsyncAdminClient` over an async one
(the interop roles call the app they wrap in process).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import httpx

from shared.transport import http_failure

__all__ = [
    "AdminClient",
    "AsyncAdminClient",
    "Party",
    "PartyTokens",
    "ProvisionError",
    "TaskMissingError",
]

PartyName = Literal["leader", "helper", "collector"]


class ProvisionError(Exception):
    """A party refused or could not be reached; the message is one line."""


class TaskMissingError(ProvisionError):
    """The party does not know the task (404), as opposed to an outage."""


@dataclass(frozen=True, repr=False)
class PartyTokens:
    """The bearer token presented to each DAP party (no party ever sees another's)."""

    leader: str
    helper: str
    collector: str

    @classmethod
    def shared(cls, token: str) -> PartyTokens:
        """One token for all three (a test bench run by one operator)."""
        return cls(token, token, token)

    def __repr__(self) -> str:
        return "PartyTokens(...)"


@dataclass(frozen=True, repr=False)
class Party:
    """One party's admin API: its role (for messages), base URL and bearer token."""

    name: PartyName
    url: str
    token: str

    def task_url(self, task_id: str) -> str:
        return f"{self.url.rstrip('/')}/internal/tasks/{task_id}"

    def __repr__(self) -> str:
        return f"Party({self.name!r}, {self.url!r})"


def _put_request(
    http: httpx.Client | httpx.AsyncClient, party: Party, task_id: str, body: str
) -> httpx.Request:
    headers = {"Authorization": f"Bearer {party.token}", "Content-Type": "application/json"}
    return http.build_request("PUT", party.task_url(task_id), content=body, headers=headers)


def _get_request(
    http: httpx.Client | httpx.AsyncClient, party: Party, task_id: str
) -> httpx.Request:
    headers = {"Authorization": f"Bearer {party.token}"}
    return http.build_request("GET", party.task_url(task_id), headers=headers)


def _unreachable(party: Party, exc: httpx.HTTPError) -> ProvisionError:
    return ProvisionError(f"cannot reach the {party.name} at {party.url}: {http_failure(exc)}")


def _refusal(response: httpx.Response) -> str:
    """``HTTP 409`` and the problem document's detail (RFC 9457), if it has one."""
    detail = ""
    try:
        doc = response.json()
        if isinstance(doc, dict):
            detail = str(doc.get("detail") or doc.get("title") or "")
    except ValueError:
        pass
    return f"HTTP {response.status_code}" + (f" {detail}" if detail else "")


def _put_answer(party: Party, response: httpx.Response) -> dict[str, Any]:
    if response.status_code not in (200, 201):
        raise ProvisionError(f"the {party.name} refused the task: {_refusal(response)}")
    return _json_object(party, response) if response.content else {}


def _get_answer(party: Party, task_id: str, response: httpx.Response) -> dict[str, Any]:
    if response.status_code == 404:
        raise TaskMissingError(f"the {party.name} does not know task {task_id}")
    if response.status_code != 200:
        raise ProvisionError(
            f"the {party.name} refused to show task {task_id}: {_refusal(response)}"
        )
    return _json_object(party, response)


def _json_object(party: Party, response: httpx.Response) -> dict[str, Any]:
    try:
        body = response.json()
    except ValueError:
        body = None
    if not isinstance(body, dict):
        raise ProvisionError(f"the {party.name} answered with something other than a task")
    return body


class AdminClient:
    """The admin API over a blocking `httpx.Client` (the caller owns and closes it)."""

    def __init__(self, http: httpx.Client) -> None:
        self.http = http

    def _send(self, party: Party, request: httpx.Request) -> httpx.Response:
        try:
            return self.http.send(request)
        except httpx.HTTPError as exc:
            raise _unreachable(party, exc) from None

    def put_task(self, party: Party, task_id: str, body: str) -> dict[str, Any]:
        """PUT the task (its JSON `body`); the party's answer (``{}`` if it sent none)."""
        request = _put_request(self.http, party, task_id, body)
        return _put_answer(party, self._send(party, request))

    def get_task(self, party: Party, task_id: str) -> dict[str, Any]:
        """The party's view of the task; `TaskMissingError` if it does not know it."""
        request = _get_request(self.http, party, task_id)
        return _get_answer(party, task_id, self._send(party, request))


class AsyncAdminClient:
    """The admin API over an `httpx.AsyncClient` (the caller owns and closes it)."""

    def __init__(self, http: httpx.AsyncClient) -> None:
        self.http = http

    async def put_task(self, party: Party, task_id: str, body: str) -> dict[str, Any]:
        """PUT the task (its JSON `body`); the party's answer (``{}`` if it sent none)."""
        request = _put_request(self.http, party, task_id, body)
        try:
            response = await self.http.send(request)
        except httpx.HTTPError as exc:
            raise _unreachable(party, exc) from None
        return _put_answer(party, response)
