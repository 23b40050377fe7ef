"""`GET /healthz` of every service: 200 once its store answers, 503 while it does not.

Launchers (`sagg up`), the compose file's health checks and load balancers poll it. No
authentication: the answer says only whether the process can serve.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

from fastapi import APIRouter, FastAPI
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict
from starlette.concurrency import run_in_threadpool

from services.common.routing import api_router

__all__ = ["Health", "health_router", "install_healthz"]

log = logging.getLogger(__name__)


class Health(BaseModel):
    """The answer: ``ok`` or ``unavailable``, and what the service adds (the token issuer's
    role)."""

    model_config = ConfigDict(extra="allow")

    status: str


def health_router(probe: Callable[[], bool], details: Mapping[str, str] | None = None) -> APIRouter:
    """`GET /healthz`: `probe` runs in the thread pool and returns whether the store is ready
    (migrated); an exception from it (store unreachable) is a 503 too."""
    extra = dict(details or {})
    router = api_router("ops")

    @router.get(
        "/healthz",
        response_model=Health,
        responses={503: {"model": Health, "description": "the store is not ready"}},
    )
    async def healthz() -> Response:
        try:
            ready = await run_in_threadpool(probe)
        except Exception as exc:
            # The type only: driver messages can quote connection strings.
            log.warning("health check failed: %s", type(exc).__name__)
            ready = False
        if not ready:
            return JSONResponse({"status": "unavailable", **extra}, status_code=503)
        return JSONResponse({"status": "ok", **extra})

    return router


def install_healthz(
    app: FastAPI, probe: Callable[[], bool], details: Mapping[str, str] | None = None
) -> None:
    app.include_router(health_router(probe, details))
