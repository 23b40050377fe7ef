"""Routes answered before FastAPI's stack: the per-device hot paths of the attester.

A population of devices makes one enrolment and one token request each (issue #13). FastAPI's
per-request machinery (seven middleware layers, routing through included routers, a
`Request`, dependency solving, JSON body validation and an anyio thread hop per blocking
call) cost about 0.6 ms of CPU per request on a 2-core machine, more than an enrolment or a
batched token request itself. A `RawRoute` is answered by `RawRoutesApp.__call__` before that
stack, with what the stack gave the route kept:

- its request latency in the app's ``sagg_http_request_duration_seconds`` under its template;
- the app's body cap (`services.common.limits`): a declared length past it is answered 413
  unread, a chunked body as soon as it passes it; a declared body past the route's own
  `max_body` gets the route's own answer (`RawRoute.too_long`) without the rest being read; an
  answer given with body unread carries ``Connection: close``;
- problem documents: 405 with ``Allow`` for another method on the path, a 500 problem for an
  unhandled exception (logged by type and route only: the text may quote request data);
- its OpenAPI operation (`RawRoute.operation`, request body and answers with their models),
  merged into ``app.openapi()`` so the description and the fuzzers still see the route.

The leader's uploads do the same in their own module (`services.aggregator.upload_route`:
they also admit, queue and group-commit); these routes only read the body and answer.
Blocking work runs in `run_blocking`'s small thread pool: one hop, no capacity limiter.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar

from fastapi import FastAPI
from fastapi.responses import Response
from pydantic import BaseModel
from starlette.types import Receive, Scope, Send

from services.common.limits import content_too_large, declared_length, read_body
from services.common.metrics import RequestMetrics
from services.common.problems import ServiceError
from services.common.routing import PROBLEM_RESPONSES

__all__ = ["RawRequest", "RawRoute", "RawRoutesApp", "json_operation", "run_blocking"]

log = logging.getLogger(__name__)
T = TypeVar("T")

HTTP_METHOD_NOT_ALLOWED = 405
#: Blocking work of the raw routes (store transactions, signature checks, RSA): CPU under the
#: GIL or in OpenSSL, so a few threads keep the event loop free without thrashing.
_blocking = ThreadPoolExecutor(max_workers=4, thread_name_prefix="raw-route")


async def run_blocking(fn: Callable[..., T], *args: Any) -> T:
    """`fn(*args)` in the raw routes' thread pool."""
    return await asyncio.get_running_loop().run_in_executor(_blocking, fn, *args)


@dataclass(frozen=True, slots=True)
class RawRequest:
    """What a raw route's handler sees: the body and the headers (names lower-case)."""

    body: bytes
    headers: dict[str, str]

    def header(self, name: str) -> str | None:
        return self.headers.get(name)


@dataclass(frozen=True)
class RawRoute:
    """POST (or `method`) `path`, answered by `handler` from the whole body, which is at most
    `max_body` bytes; a longer one is answered `too_long()`."""

    path: str
    handler: Callable[[RawRequest], Awaitable[Response]]
    max_body: int
    too_long: Callable[[], Response]
    #: The OpenAPI operation object (`json_operation`, or hand-written for binary bodies).
    operation: dict[str, Any]
    method: str = "POST"
    #: Models the operation refers to, added to the description's components.
    models: Sequence[type[BaseModel]] = field(default=())


def json_operation(
    tag: str,
    summary: str,
    body: type[BaseModel],
    answers: dict[int, tuple[type[BaseModel], str]],
) -> dict[str, Any]:
    """The OpenAPI operation of a route taking a JSON `body` model and answering `answers`
    (status -> (model, description)), problem documents otherwise."""
    return {
        "tags": [tag],
        "summary": summary,
        "operationId": summary.lower().replace(" ", "_"),
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": _ref(body)}},
        },
        "responses": {
            **{
                str(status): {
                    "description": description,
                    "content": {"application/json": {"schema": _ref(model)}},
                }
                for status, (model, description) in answers.items()
            },
            **{str(k): v for k, v in PROBLEM_RESPONSES.items()},
        },
    }


def _ref(model: type[BaseModel]) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{model.__name__}"}


class _TooLargeError(Exception):
    pass


class RawRoutesApp(FastAPI):
    """A FastAPI app that answers its `raw_routes` itself (module docstring). Set
    `raw_routes`, `raw_body_cap` and `raw_metrics` before serving."""

    raw_routes: dict[str, RawRoute]
    raw_body_cap: int
    raw_metrics: RequestMetrics

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.raw_routes = {}

    def add_raw_route(self, route: RawRoute) -> None:
        self.raw_routes[route.path] = route

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        route = self.raw_routes.get(scope["path"]) if scope["type"] == "http" else None
        if route is None:
            await super().__call__(scope, receive, send)
            return

        async def answer(scope: Scope, receive: Receive, send: Send) -> None:
            await self._answer(route, scope, receive, send)

        await self.raw_metrics.timed(answer, scope, receive, send, route=route.path)

    async def _answer(self, route: RawRoute, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["method"] != route.method:
            refusal = ServiceError("Method Not Allowed", status=HTTP_METHOD_NOT_ALLOWED)
            refusal.headers = {"Allow": route.method}
            await _send(refusal.response(), scope, receive, send, complete=False)
            return
        length, chunked = declared_length(scope)
        if length is not None and length > self.raw_body_cap:
            await content_too_large(scope, self.raw_body_cap, dap=False)(scope, receive, send)
            return
        # A chunked body is read up to the app's cap, as `BodyLimitMiddleware` reads it ahead,
        # so one past the cap is answered 413 on these routes too.
        read = await read_body(receive, self.raw_body_cap if chunked else route.max_body)
        if read is None:
            return
        body, complete = read
        if len(body) > self.raw_body_cap:
            await content_too_large(scope, self.raw_body_cap, dap=False)(scope, receive, send)
            return
        if len(body) > route.max_body:
            await _send(route.too_long(), scope, receive, send, complete=complete)
            return
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        try:
            response = await route.handler(RawRequest(body, headers))
        except ServiceError as exc:
            response = exc.response()
        except Exception as exc:  # the stack's ServerErrorMiddleware answered these 500
            log.error("unhandled %s on %s %s", type(exc).__name__, route.method, route.path)
            response = ServiceError().response()
        await _send(response, scope, receive, send, complete=True)

    def openapi(self) -> dict[str, Any]:
        if self.openapi_schema is not None:
            return self.openapi_schema
        schema = super().openapi()
        components = schema.setdefault("components", {}).setdefault("schemas", {})
        for route in self.raw_routes.values():
            schema["paths"].setdefault(route.path, {})[route.method.lower()] = route.operation
            for model in route.models:
                components.update(
                    model.model_json_schema(ref_template="#/components/schemas/{model}").pop(
                        "$defs", {}
                    )
                )
                components[model.__name__] = model.model_json_schema(
                    ref_template="#/components/schemas/{model}"
                )
        return schema


async def _send(
    response: Response, scope: Scope, receive: Receive, send: Send, *, complete: bool
) -> None:
    if not complete:
        # Answered with body unread: the rest of it is never read.
        response.headers["Connection"] = "close"
    await response(scope, receive, send)
