"""PUT /tasks/{task_id}/reports (DAP-09 §4.4.2) as a plain ASGI route in front of FastAPI.

Uploads are the leader's hot path: FastAPI's middleware stack, routing, request objects and
the thread-pool round trip cost more CPU than the upload's own work (decrypt, check, store).
This route reads the body and writes the response itself, with the same media-type check and
the same problem documents as every other route. Validation runs in a small thread pool (the
task, key and issuer caches may need the store or the network) and the report is stored by the
group-commit writer (`services.aggregator.uploads`). Other methods on the path get the 405
FastAPI would give.
"""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from starlette.types import Receive, Scope, Send

from services.aggregator.service import Aggregator, Answer
from services.common.problems import (
    DapProblemError,
    HttpProblemError,
    dap_problem_response,
    problem_response,
)
from shared.constants import MEDIA_REPORT
from shared.dap.problems import ProblemType

log = logging.getLogger(__name__)

_PREFIX = "/tasks/"
_SUFFIX = "/reports"
HTTP_METHOD_NOT_ALLOWED = 405
HTTP_UNSUPPORTED_MEDIA_TYPE = 415
#: Validation is CPU under the GIL: a few threads keep the event loop free without thrashing.
_validators = ThreadPoolExecutor(max_workers=4, thread_name_prefix="upload-validate")


def upload_task_id(scope: Scope) -> str | None:
    """The task id if `scope` is a request to the upload resource, else None."""
    if scope["type"] != "http":
        return None
    path: str = scope["path"]
    # Mounted under a prefix (the interop API's /dap/), the path still carries the prefix.
    root: str = scope.get("root_path", "")
    if root and path.startswith(root):
        path = path[len(root) :]
    if not (path.startswith(_PREFIX) and path.endswith(_SUFFIX)):
        return None
    task_id = path[len(_PREFIX) : -len(_SUFFIX)]
    return task_id if task_id and "/" not in task_id else None


def _media_type(scope: Scope) -> str:
    for name, value in scope["headers"]:
        if name == b"content-type":
            return str(value.decode("latin-1").split(";")[0].strip().lower())
    return ""


async def _read_body(receive: Receive) -> bytes | None:
    """The request body, or None if the client went away first."""
    chunks: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(chunks)


def _settle(future: asyncio.Future[Answer | Exception], result: Answer | Exception) -> None:
    if not future.done():
        future.set_result(result)


async def handle_upload(
    agg: Aggregator, task_id: str, scope: Scope, receive: Receive, send: Send
) -> None:
    """Answer one request to the upload resource."""
    if scope["method"] != "PUT":
        response = problem_response(
            type_="about:blank",
            title="Method Not Allowed",
            status=HTTP_METHOD_NOT_ALLOWED,
            task_id=task_id,
            headers={"Allow": "PUT"},
        )
        await response(scope, receive, send)
        return
    if _media_type(scope) != MEDIA_REPORT:
        problem = DapProblemError(
            ProblemType.INVALID_MESSAGE,
            f"expected Content-Type {MEDIA_REPORT}",
            task_id=task_id,
            status=HTTP_UNSUPPORTED_MEDIA_TYPE,
        )
        await _respond(problem, scope, receive, send)
        return
    body = await _read_body(receive)
    if body is None:
        return
    loop = asyncio.get_running_loop()
    answer: asyncio.Future[Answer | Exception] = loop.create_future()

    def done(result: Answer | Exception) -> None:
        loop.call_soon_threadsafe(_settle, answer, result)

    def validate_and_store() -> None:
        try:
            agg.upload(task_id, body, done)
        except Exception as exc:
            done(exc)

    # Fire and forget: `done` settles the answer once the writer has committed the report
    # (loop.run_in_executor would chain a second future per upload for nothing).
    _validators.submit(validate_and_store)
    await _respond(await answer, scope, receive, send)


async def _respond(result: Answer | Exception, scope: Scope, receive: Receive, send: Send) -> None:
    if isinstance(result, Answer):
        headers: list[tuple[bytes, bytes]] = [(b"content-length", b"%d" % len(result.body))]
        if result.body and result.media_type:
            headers.append((b"content-type", result.media_type.encode()))
        await send({"type": "http.response.start", "status": result.status, "headers": headers})
        await send({"type": "http.response.body", "body": result.body})
        return
    response: Any
    if isinstance(result, DapProblemError):
        log.info("PUT %s -> %s", scope["path"], result.problem.value)
        response = dap_problem_response(result)
    elif isinstance(result, HttpProblemError):
        response = problem_response(
            type_="about:blank", title=result.title, status=result.status, task_id=result.task_id
        )
    else:
        # The exception text may quote request data; log only its type and the route.
        log.error("unhandled %s on PUT %s", type(result).__name__, scope["path"])
        response = problem_response(type_="about:blank", title="Internal Server Error", status=500)
    await response(scope, receive, send)
