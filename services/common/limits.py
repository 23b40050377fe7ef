"""Request limits every service shares: the settings, and the request body cap.

Janus and Divvi Up cap every request body and refuse a larger one with 413 before reading it;
sagg does the same in one ASGI middleware that every app installs (`install_body_limit`):

- a declared ``Content-Length`` above the cap is answered 413 at once, nothing of the body read;
- a chunked body (no length declared) is read ahead up to the cap, chunk by chunk: one byte
  over and the request is answered 413, the rest never read, whatever the route does;
- any answer given while the client still has body to send carries ``Connection: close``, so
  the server never reads (and throws away) an unread rest after answering.

413 answers are problem documents (RFC 9457); on DAP resources (``/tasks/{task_id}/...``) a DAP
problem with the task id (DAP-09 §3.2). The leader's upload route caps its bodies itself, from
the task's exact largest report (`services.aggregator.upload_route`). Uvicorn's limits (the
concurrency cap and the header and body read timeouts) are in `services.common.serving`.
"""

from __future__ import annotations

from dataclasses import dataclass

from fastapi import FastAPI
from fastapi.responses import Response
from pydantic import BaseModel, Field
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from services.common.problems import (
    DapProblemError,
    ServiceError,
    path_task_id,
)
from shared.dap.problems import ProblemType

__all__ = [
    "HTTP_CONTENT_TOO_LARGE",
    "BodyLimitMiddleware",
    "ServerLimits",
    "content_too_large",
    "declared_length",
    "install_body_limit",
]

HTTP_CONTENT_TOO_LARGE = 413
MIB = 1024 * 1024


class ServerLimits(BaseModel):
    """The limits of one service's HTTP server (mixed into each service's settings)."""

    #: Largest request body of any route (the leader's uploads: the task's largest report).
    max_request_body_bytes: int = Field(default=MIB, ge=1)
    #: Open connections plus running requests beyond which uvicorn answers 503.
    limit_concurrency: int = Field(default=1024, ge=1)
    #: A request's header block must arrive within this long of its first byte (or of the
    #: connection's opening), else 408 and the connection is closed.
    header_timeout_s: float = Field(default=10.0, gt=0)
    #: A request's whole body must arrive within this long of its headers, else 408 and close.
    body_timeout_s: float = Field(default=30.0, gt=0)


def declared_length(scope: Scope) -> tuple[int | None, bool]:
    """(Content-Length, whether a body without declared length follows: chunked)."""
    length: int | None = None
    chunked = False
    for name, value in scope["headers"]:
        if name == b"content-length":
            # The HTTP parser already refused a malformed or repeated length.
            length = int(value)
        elif name == b"transfer-encoding":
            chunked = True
    return length, chunked and length is None


async def read_body(receive: Receive, limit: int) -> tuple[bytes, bool] | None:
    """(the body, read until it ends or is longer than `limit`; whether all of it was read),
    or None if the client went away first: a route's body, read once its route is known."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunk = message.get("body", b"")
        chunks.append(chunk)
        size += len(chunk)
        more = bool(message.get("more_body", False))
        if size > limit:
            return b"".join(chunks), not more
        if not more:
            return b"".join(chunks), True


def content_too_large(
    scope: Scope, limit: int, *, dap: bool, task_id: str | None = None
) -> Response:
    """The 413 problem response; ``Connection: close`` so the rest is never read."""
    detail = f"the request body is larger than {limit} bytes"
    headers = {"Connection": "close"}
    task = task_id if task_id is not None else path_task_id(scope.get("path", ""))
    if dap and task is not None:
        problem = DapProblemError(
            ProblemType.INVALID_MESSAGE, detail, task_id=task, status=HTTP_CONTENT_TOO_LARGE
        )
        response = problem.response()
        response.headers.update(headers)
        return response
    too_large = ServiceError("Content Too Large", detail=detail, status=HTTP_CONTENT_TOO_LARGE)
    too_large.task_id, too_large.headers = task, headers
    return too_large.response()


@dataclass
class _Body:
    """Whether all of one request's body has been received."""

    complete: bool


class BodyLimitMiddleware:
    """Caps request bodies at `max_bytes` (module docstring)."""

    def __init__(self, app: ASGIApp, max_bytes: int, dap: bool = False) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.dap = dap

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length, chunked = declared_length(scope)
        if length is not None and length > self.max_bytes:
            await content_too_large(scope, self.max_bytes, dap=self.dap)(scope, receive, send)
            return
        body = _Body(complete=not chunked and not length)

        async def tracked() -> Message:
            message = await receive()
            if message["type"] == "http.request":
                body.complete = not message.get("more_body", False)
            return message

        app_receive: Receive = tracked
        if chunked:
            # Read ahead to the cap, so that even a route that never reads its body answers
            # 413 rather than leaving an endless chunked body on the connection. (A declared
            # length is enforced by the HTTP parser.)
            ahead: list[Message] = []
            read = 0
            while not body.complete:
                message = await tracked()
                ahead.append(message)
                if message["type"] != "http.request":
                    break
                read += len(message.get("body", b""))
                if read > self.max_bytes:
                    await content_too_large(scope, self.max_bytes, dap=self.dap)(
                        scope, receive, send
                    )
                    return
            replay = iter(ahead)

            async def replayed() -> Message:
                return next(replay, None) or await tracked()

            app_receive = replayed

        async def guarded_send(message: Message) -> None:
            if message["type"] == "http.response.start" and not body.complete:
                message = {**message, "headers": [*message["headers"], _CLOSE]}
            await send(message)

        await self.app(scope, app_receive, guarded_send)


_CLOSE = (b"connection", b"close")


def install_body_limit(app: FastAPI, max_bytes: int, *, dap: bool = False) -> None:
    """Cap every route's request body at `max_bytes`; `dap`: answer DAP problems on DAP paths."""
    app.add_middleware(BodyLimitMiddleware, max_bytes=max_bytes, dap=dap)
