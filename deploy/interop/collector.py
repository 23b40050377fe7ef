"""The interop collector: the test API over the real collector app (interop draft §4.5).

``add_task`` provisions a `CollectorTask` (the collector generates the task's X25519 /
HKDF-SHA256 / AES-128-GCM key pair and the answer carries its encoded HpkeConfig);
``collection_start`` creates a collection job, whose id is the handle, and the collector's own
poller runs the DAP-09 §4.6.1 exchange with the leader; ``collection_poll`` reads the job.
The collector app runs in process and is called over an ASGI transport, so its validation,
store and poller are exactly those of a deployment.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, Literal

import httpx
from fastapi import FastAPI
from pydantic import Field

from deploy.interop.common import (
    Command,
    CommandBody,
    InteropError,
    InteropVdaf,
    format_result,
    interop_app,
    problem_detail,
    service_settings,
)
from services.collector.app import create_app
from services.collector.settings import CollectorSettings
from services.common.admin_client import AsyncAdminClient, Party, ProvisionError
from shared.dap.messages import QueryType
from shared.dap.task import CollectorTask

__all__ = ["InteropQuery", "build_collector_app", "collector_settings"]

log = logging.getLogger(__name__)

#: collection_poll statuses (§4.5.3) by the collector API's job state.
_STATUS = {"pending": "in progress", "complete": "complete", "failed": "error"}


class AddTask(CommandBody):
    """``/internal/test/add_task`` for the collector (§4.5.1)."""

    task_id: str
    leader: str
    vdaf: InteropVdaf
    collector_authentication_token: str
    query_type: Literal[1, 2]


class InteropQuery(CommandBody):
    """The interop query object (§4.5.2): type 1 time_interval, type 2 fixed_size with
    subtype 0 (by_batch_id) or 1 (current_batch)."""

    type: Literal[1, 2]
    batch_interval_start: int | None = Field(default=None, ge=0)
    batch_interval_duration: int | None = Field(default=None, ge=1)
    subtype: Literal[0, 1] | None = None
    batch_id: str | None = None

    def api_query(self) -> dict[str, Any]:
        """The collector API's query JSON (`services.collector.collect.CollectQuery`)."""
        if QueryType(self.type) == QueryType.TIME_INTERVAL:
            if self.batch_interval_start is None or self.batch_interval_duration is None:
                raise InteropError("a time_interval query needs batch_interval_start/duration")
            return {
                "type": "time_interval",
                "start": self.batch_interval_start,
                "duration": self.batch_interval_duration,
            }
        if self.subtype == 0:
            if not self.batch_id:
                raise InteropError("a by_batch_id query needs batch_id")
            return {"type": "fixed_size", "batch_id": self.batch_id}
        if self.subtype == 1:
            return {"type": "current_batch"}
        raise InteropError("a fixed_size query needs subtype 0 or 1")


class CollectionStart(CommandBody):
    """``/internal/test/collection_start`` (§4.5.2)."""

    task_id: str
    agg_param: str = ""
    query: InteropQuery


class CollectionPoll(CommandBody):
    """``/internal/test/collection_poll`` (§4.5.3)."""

    handle: str = Field(min_length=1)


def collector_settings(data: Path, host: str, port: int) -> CollectorSettings:
    """A private SQLite store and short polling intervals (runners poll for about 60 s)."""
    return CollectorSettings(
        **service_settings(data / "collector.sqlite3", host, port),
        poll_interval=0.5,
        max_backoff=2.0,
    )


def build_collector_app(settings: CollectorSettings) -> FastAPI:
    """The interop collector's ASGI app over `settings`."""
    inner = create_app(settings)
    admin_token = settings.admin_token.get_secret_value()
    admin = {"Authorization": f"Bearer {admin_token}"}
    internal = httpx.AsyncClient(
        transport=httpx.ASGITransport(app=inner), base_url="http://collector.internal"
    )
    party = Party("collector", "http://collector.internal", admin_token)

    async def call(method: str, path: str, json_body: Any = None) -> httpx.Response:
        return await internal.request(method, path, json=json_body, headers=admin)

    async def add_task(request: AddTask) -> dict[str, Any]:
        task = CollectorTask.model_validate(
            {
                "task_id": request.task_id,
                "leader_endpoint": request.leader,
                "query_type": request.query_type,
                "vdaf": request.vdaf.spec(),
                "collector_auth_token": request.collector_authentication_token,
                # The interop task gives the collector neither (§4.5.1); the leader enforces
                # both, so the collector's own pre-checks are left at their permissive values.
                "min_batch_size": 1,
                "time_precision": 1,
            }
        )
        try:
            answer = await AsyncAdminClient(internal).put_task(
                party, task.task_id, task.model_dump_json()
            )
        except ProvisionError as exc:
            raise InteropError(f"task not added: {exc}") from None
        log.info("task %s added (%s)", task.task_id, task.vdaf.describe())
        return {"collector_hpke_config": answer["collector_hpke_config"]}

    async def collection_start(request: CollectionStart) -> dict[str, Any]:
        if request.agg_param != "":
            # Prio3's aggregation parameter is empty (VDAF-08 §7), and the collector API
            # has no field for one.
            raise InteropError("Prio3 takes no aggregation parameter: agg_param must be empty")
        response = await call(
            "POST",
            "/collections",
            {"task_id": request.task_id, "query": request.query.api_query()},
        )
        if response.status_code != 201:
            raise InteropError(f"collection not started: {problem_detail(response)}")
        return {"handle": response.json()["collection_job_id"]}

    async def collection_poll(request: CollectionPoll) -> dict[str, Any]:
        response = await call("GET", f"/collections/{request.handle}")
        if response.status_code == 404:
            raise InteropError(f"unknown handle {request.handle!r}")
        if response.status_code != 200:
            raise InteropError(f"collection unreadable: {problem_detail(response)}")
        view = response.json()
        status = _STATUS.get(view["state"], "error")
        out: dict[str, Any] = {"status": status}
        if status == "error":
            out["error"] = view.get("error") or "collection failed"
        if status == "complete":
            interval = view.get("interval") or {}
            out.update(
                report_count=view["report_count"],
                interval_start=interval.get("start"),
                interval_duration=interval.get("duration"),
                result=format_result(view["result"]),
            )
            if view.get("batch_id") is not None:
                out["batch_id"] = view["batch_id"]
        return out

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        # A mounted or wrapped app's lifespan is not run by Starlette; the collector's opens
        # the store and runs the poller, so it is entered here.
        async with inner.router.lifespan_context(inner):
            try:
                yield
            finally:
                await internal.aclose()

    return interop_app(
        "collector",
        {
            "add_task": Command(AddTask, add_task),
            "collection_start": Command(CollectionStart, collection_start),
            "collection_poll": Command(CollectionPoll, collection_poll),
        },
        lifespan,
    )
