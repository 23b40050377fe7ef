"""The interop client: ``/internal/test/upload`` over the SDK's upload client (interop draft §4.3).

Each upload fetches both aggregators' HPKE configs (DAP-09 §4.4.1), shards the measurement,
seals the two input shares and PUTs the report to the leader (DAP-09 §4.4.2), then answers
once the leader has accepted or refused it. A refused report is a permanent failure and is
not retried: refusals (a far-future time, a replay, a collected batch) do not change on retry.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI
from pydantic import Field

from client_sdk.http import http_client
from client_sdk.upload import ClientTask, UploadError, upload_reports
from deploy.interop.common import (
    Command,
    CommandBody,
    InteropError,
    InteropVdaf,
    interop_app,
    parse_measurement,
)
from shared.codec import DecodeError
from shared.dap.ids import TaskId
from shared.transport import TransportPolicy

__all__ = ["build_client_app"]

log = logging.getLogger(__name__)


class Upload(CommandBody):
    """``/internal/test/upload`` (§4.3.1)."""

    task_id: str
    leader: str
    helper: str
    vdaf: InteropVdaf
    measurement: str | int | list[str | int]
    #: Report time in epoch seconds; now when absent. Rounded down to time_precision.
    time: int | None = Field(default=None, ge=0)
    time_precision: int = Field(ge=1)


def build_client_app(timeout: float = 30.0) -> FastAPI:
    """The interop client's ASGI app; one HTTP client (and connection pool) for all uploads."""
    # The interop harness names its aggregators by plain http:// URLs on a private network.
    http = http_client(TransportPolicy(allow_insecure_http=True), timeout=timeout)

    def upload_one(task: ClientTask, measurement: int | list[int], when: int | None) -> None:
        try:
            TaskId.from_b64url(task.task_id)
        except DecodeError as exc:
            raise InteropError(f"task_id: {exc}") from None
        result = upload_reports(task, [measurement], report_time=when, http=http, concurrency=1)
        if result.rejected:
            raise InteropError(result.rejected[0])

    async def upload(request: Upload) -> dict[str, Any]:
        spec = request.vdaf.spec()
        measurement = parse_measurement(spec, request.measurement)
        task = ClientTask(
            task_id=request.task_id,
            leader=request.leader,
            helper=request.helper,
            vdaf=spec,
            time_precision=request.time_precision,
        )
        try:
            # Sharding and HPKE are CPU work and the HTTP client blocks: keep the loop free.
            await asyncio.to_thread(upload_one, task, measurement, request.time)
        except UploadError as exc:
            raise InteropError(str(exc)) from None
        return {}

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        try:
            yield
        finally:
            http.close()

    return interop_app("client", {"upload": Command(Upload, upload)}, lifespan)
