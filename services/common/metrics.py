"""Prometheus metrics of every sagg service (prometheus_client): registries, request latency,
and `GET /metrics` in the text exposition format 0.0.4.

Where each family lives:

- **process-wide** families (``process_*`` and ``python_*`` from prometheus_client's own
  collectors, the store's transaction metrics of `services.common.tx_metrics`, the CPU by thread
  of `services.common.thread_cpu`) are on the default `prometheus_client.REGISTRY`;
- **per app**, on the app's own `CollectorRegistry` (a test process runs several apps side by
  side): event counters that count what happened in this process (they start at zero with
  it, as Prometheus counters may), the request latency histogram (`install_request_metrics`),
  and custom collectors that read the service's store at scrape time, so every replica and
  every restart reports the same numbers for what the database knows (jobs by state,
  reports per batch, log size).

`GET /metrics` exposes both registries and takes the same bearer token check as the admin
APIs (`services.common.auth`): task ids and traffic figures are not public.
"""

from __future__ import annotations

import time
from typing import Final

from fastapi import APIRouter, FastAPI
from fastapi.responses import Response
from prometheus_client import REGISTRY, CollectorRegistry, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4
from starlette.concurrency import run_in_threadpool
from starlette.routing import BaseRoute
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from services.common.auth import BearerAuth
from services.common.metric_children import child
from services.common.routing import api_router
from services.common.thread_cpu import install as install_thread_cpu

__all__ = [
    "MEDIA_PROMETHEUS_TEXT",
    "RequestMetrics",
    "exposition",
    "install_metrics",
    "install_request_metrics",
]

#: Prometheus text exposition format 0.0.4, as every service's `GET /metrics` answers it.
MEDIA_PROMETHEUS_TEXT: Final = CONTENT_TYPE_PLAIN_0_0_4

#: The route label of requests no route matched (404s, and 413s answered before routing):
#: never the raw path, whose ids would make the label set unbounded.
UNMATCHED: Final = "unmatched"

#: Request latency buckets, seconds: uploads take a few milliseconds, collections and
#: aggregation job steps up to seconds.
_BUCKETS: Final = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


def exposition(registry: CollectorRegistry) -> bytes:
    """The text of a scrape: the process-wide families, then the app's (blocking: the app's
    collectors read the store, so call it off the event loop)."""
    return generate_latest(REGISTRY) + generate_latest(registry)


def _route_template(scope: Scope) -> str:
    route = scope.get("route")
    return route.path if isinstance(route, BaseRoute) and hasattr(route, "path") else UNMATCHED


class RequestMetrics:
    """``sagg_http_request_duration_seconds`` by method, route template and status class."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.histogram = Histogram(
            "sagg_http_request_duration_seconds",
            "Time to answer HTTP requests, by method, route template and status class.",
            ("method", "route", "status"),
            buckets=_BUCKETS,
            registry=registry,
        )

    async def timed(
        self, app: ASGIApp, scope: Scope, receive: Receive, send: Send, route: str | None = None
    ) -> None:
        """Run `app` on the request and observe how long it took to answer; `route` names
        the template when no router sets one (the leader's upload fast path)."""
        status = 500  # if the app raises, the server's error handler answers 500

        async def observed(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        start = time.perf_counter()
        try:
            await app(scope, receive, observed)
        finally:
            elapsed = time.perf_counter() - start
            template = route if route is not None else _route_template(scope)
            child(self.histogram, scope["method"], template, f"{status // 100}xx").observe(elapsed)


class _RequestMetricsMiddleware:
    def __init__(self, app: ASGIApp, metrics: RequestMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        await self.metrics.timed(self.app, scope, receive, send)


def install_request_metrics(app: FastAPI, registry: CollectorRegistry) -> RequestMetrics:
    """Time every request of `app` (outermost of the middlewares installed so far: call it
    after `install_body_limit`, so that 413s are timed too)."""
    metrics = RequestMetrics(registry)
    app.add_middleware(_RequestMetricsMiddleware, metrics=metrics)
    return metrics


def metrics_router(registry: CollectorRegistry, auth: BearerAuth) -> APIRouter:
    """``GET /metrics`` behind `auth`."""
    router = api_router("ops", [auth.dependency], response_class=Response)

    @router.get(
        "/metrics",
        responses={200: {"description": "the metrics", "content": {MEDIA_PROMETHEUS_TEXT: {}}}},
    )
    async def metrics() -> Response:
        text = await run_in_threadpool(exposition, registry)
        return Response(text, media_type=MEDIA_PROMETHEUS_TEXT)

    return router


def install_metrics(
    app: FastAPI, registry: CollectorRegistry, token_hash: bytes | None
) -> RequestMetrics:
    """`GET /metrics` behind ``Authorization: Bearer <token>`` (SHA-256 `token_hash`; None
    refuses every caller with 403, as the admin APIs do without an admin token), and the
    request latency of every route of `app` on `registry`. The app's problem handlers
    (`install_problem_handlers`) answer the refusals."""
    install_thread_cpu()
    timer = install_request_metrics(app, registry)
    app.include_router(metrics_router(registry, BearerAuth(token_hash)))
    return timer
