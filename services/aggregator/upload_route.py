"""PUT (DAP-09 §4.4.2) and POST (DAP-19 §4.4.2) /tasks/{task_id}/reports as a plain ASGI route
in front of FastAPI.

Uploads are the leader's hot path: FastAPI's middleware stack, routing, request objects and
the thread-pool round trip cost more CPU than the upload's own work (decrypt, check, store).
This route reads the body and writes the response itself, with the same media-type check and
the same problem documents as every other route. Validation runs in a small thread pool (the
task and key caches may need the store) and the report is stored by the group-commit writer
(`services.aggregator.uploads`). Other methods on the path get the 405 FastAPI would give.

Every resource an upload takes is bounded, as Janus bounds them:
- the body is capped at the task's exact largest report (`shared.dap.sizes`; for DAP-19,
  `upload_max_reports` of them): a longer
  Content-Length, or a chunked body one byte past it, is answered 413 (a DAP problem with the
  task id) and the rest is never read. The task is looked up before the body is read, from the
  caches when they know it (unknown ids are cached too: `Aggregator.cached_task`);
- at most `upload_pending_max` uploads are admitted at a time (validating, waiting for their
  issuer or for the writer) and the writer queues at most `upload_queue_max`; past either the
  answer is 503 with Retry-After, and every upload already admitted is still answered;
- validation never waits for a token issuer in the pool: an upload whose issuer keys must be
  fetched waits on the event loop (at most `issuer_timeout_s`) and is validated again, so a
  slow issuer delays only its own task's uploads (`services.aggregator.tokens`).
An answer given before the body is read carries ``Connection: close``.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from concurrent.futures import ThreadPoolExecutor

from starlette.types import Receive, Scope, Send

from services.aggregator.answer import Answer
from services.aggregator.service import Aggregator, Task
from services.aggregator.tokens import IssuerKeysPendingError, IssuerUnavailableError
from services.common.limits import content_too_large, declared_length, read_body
from services.common.problems import (
    DapProblemError,
    HttpProblemError,
    ServiceError,
    log_problem,
)
from shared.dap import taskprov
from shared.dap.problems import ProblemType

log = logging.getLogger(__name__)

_TASKPROV_HEADER = taskprov.HEADER.lower().encode()
_PREFIX = "/tasks/"
_SUFFIX = "/reports"
HTTP_METHOD_NOT_ALLOWED = 405
HTTP_UNSUPPORTED_MEDIA_TYPE = 415
#: PUT uploads one DAP-09 Report, POST a DAP-19 UploadRequest.
_UPLOAD_METHODS = ("PUT", "POST")
#: Validation is CPU under the GIL, off the event loop. One thread: more only take the GIL
#: from each other (and from the writer and drivers), each handoff a context switch for
#: both; against four, one cut validation's CPU by an eighth (~15 us a DAP-19 report, six
#: alternated runs) and raised throughput (#15).
_validators = ThreadPoolExecutor(max_workers=1, thread_name_prefix="upload-validate")


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


def _header(scope: Scope, wanted: bytes) -> str | None:
    """The request's first `wanted` header (a lowercase name), or None."""
    for name, value in scope["headers"]:
        if name == wanted:
            return str(value.decode("latin-1"))
    return None


def _content_type(scope: Scope) -> str:
    return _header(scope, b"content-type") or ""


def _announcement(scope: Scope) -> str | None:
    """The DAP-Taskprov header's one field line; None for none or several (several make a
    List, no Item: ignored, `services.aggregator.taskprov`)."""
    lines = [value for name, value in scope["headers"] if name == _TASKPROV_HEADER]
    return str(lines[0].decode("latin-1")) if len(lines) == 1 else None


async def _leader_task(agg: Aggregator, task_id: str, scope: Scope) -> Task:
    """The upload's task; with taskprov on, the one its DAP-Taskprov header announces, opted
    into if new (`services.aggregator.taskprov`). A task the caches know, announced by its own
    header or by none, costs no thread hop."""
    announced = _announcement(scope) if agg.taskprov is not None else None
    if announced is None:
        task = agg.cached_task(task_id, "leader")
    else:
        task = agg.cached_task_by_id_str(task_id)
        if task is None or task.role != "leader" or task.announcement != announced:
            task = None
    if task is not None:
        return task
    headers = {} if announced is None else {taskprov.HEADER: announced}
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(
        _validators, functools.partial(agg.task_for, task_id, "leader", headers, opt_in=True)
    )


class UploadGate:
    """The uploads admitted in one process; only touched on the event loop."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.pending = 0


def _settle(future: asyncio.Future[Answer | Exception], result: Answer | Exception) -> None:
    if not future.done():
        future.set_result(result)


async def _validate(agg: Aggregator, task_id: str, body: bytes, fetch: bool) -> Answer | Exception:
    loop = asyncio.get_running_loop()
    answer: asyncio.Future[Answer | Exception] = loop.create_future()

    def done(result: Answer | Exception) -> None:
        loop.call_soon_threadsafe(_settle, answer, result)

    def validate_and_store() -> None:
        try:
            agg.upload(task_id, body, done, wait=False, fetch=fetch)
        except Exception as exc:
            done(exc)

    # Fire and forget: `done` settles the answer once the writer has committed the report
    # (loop.run_in_executor would chain a second future per upload for nothing).
    _validators.submit(validate_and_store)
    return await answer


async def handle_upload(
    agg: Aggregator, gate: UploadGate, task_id: str, scope: Scope, receive: Receive, send: Send
) -> None:
    """Answer one request to the upload resource: PUT of one Report for a DAP-09 task, POST
    of an UploadRequest for a DAP-19 one (the task's version decides, never the body)."""
    if scope["method"] not in _UPLOAD_METHODS:
        await _not_allowed(", ".join(_UPLOAD_METHODS), task_id, scope, receive, send)
        return
    if gate.pending >= gate.limit:
        busy = HttpProblemError(
            503,
            "too many uploads in progress",
            task_id=task_id,
            retry_after=agg.settings.upload_retry_after_s,
        )
        await _respond(busy, scope, receive, send, close=True)
        return
    gate.pending += 1
    try:
        await _upload(agg, task_id, scope, receive, send)
    finally:
        gate.pending -= 1


async def _upload(
    agg: Aggregator, task_id: str, scope: Scope, receive: Receive, send: Send
) -> None:
    try:
        task = await _leader_task(agg, task_id, scope)
    except ServiceError as exc:
        await _respond(exc, scope, receive, send, close=True)
        return
    wire = task.wire
    if scope["method"] != wire.upload_method:
        await _not_allowed(wire.upload_method, task_id, scope, receive, send)
        return
    if not wire.is_upload_media_type(_content_type(scope)):
        problem = DapProblemError(
            ProblemType.INVALID_MESSAGE,
            f"expected Content-Type {wire.upload_media_type}",
            task_id=task_id,
            status=HTTP_UNSUPPORTED_MEDIA_TYPE,
        )
        await _respond(problem, scope, receive, send, close=True)
        return
    limit = task.max_upload_len(agg.settings.upload_max_reports)
    length, _ = declared_length(scope)
    read = None
    if length is None or length <= limit:
        read = await read_body(receive, limit)
        if read is None:  # the client went away
            return
    if read is None or len(read[0]) > limit:
        too_large = content_too_large(scope, limit, dap=True, task_id=task_id)
        await too_large(scope, receive, send)
        return
    body, _ = read
    result = await _validate(agg, task_id, body, fetch=True)
    if isinstance(result, IssuerKeysPendingError):
        # Off the pool: other tasks' uploads go on while this one's issuer answers.
        fetched = asyncio.shield(asyncio.wrap_future(result.future))
        try:
            await asyncio.wait_for(fetched, agg.settings.issuer_timeout_s)
        except TimeoutError:
            result = HttpProblemError(503, "the token issuer is unavailable", task_id=task_id)
        except IssuerUnavailableError:
            pass  # validated again below: the cache alone answers (503 without keys)
        if isinstance(result, IssuerKeysPendingError):
            result = await _validate(agg, task_id, body, fetch=False)
    await _respond(result, scope, receive, send)


async def _not_allowed(
    allow: str, task_id: str, scope: Scope, receive: Receive, send: Send
) -> None:
    not_allowed = ServiceError("Method Not Allowed", status=HTTP_METHOD_NOT_ALLOWED)
    not_allowed.task_id = task_id
    not_allowed.headers = {"Allow": allow, "Connection": "close"}
    response = not_allowed.response()
    await response(scope, receive, send)


async def _respond(
    result: Answer | Exception, scope: Scope, receive: Receive, send: Send, *, close: bool = False
) -> None:
    if isinstance(result, Answer):
        headers: list[tuple[bytes, bytes]] = [(b"content-length", b"%d" % len(result.body))]
        if result.body and result.media_type:
            headers.append((b"content-type", result.media_type.encode()))
        await send({"type": "http.response.start", "status": result.status, "headers": headers})
        await send({"type": "http.response.body", "body": result.body})
        return
    if not isinstance(result, ServiceError):
        # The exception text may quote request data; log only its type and the route.
        log.error("unhandled %s on %s %s", type(result).__name__, scope["method"], scope["path"])
        result = ServiceError()
    log_problem(scope["method"], scope["path"], result)
    response = result.response()
    if close:
        # Answered before the body was read: the rest of it is never read.
        response.headers["Connection"] = "close"
    await response(scope, receive, send)
