"""RFC 9457 problem documents carrying DAP-09 error types (DAP-09 §3.2, digest §2).

`ServiceError` is the base of every error a service answers over HTTP: each subclass carries
its status and its problem type (a DAP-09 one, `DapProblemError`) or title (`about:blank`,
`HttpProblemError` and the services' own refusals), and `install_problem_handlers` (on every
app) turns it, and whatever the framework raises, into an ``application/problem+json``
response here and nowhere else. The `taskid` member is set whenever the task id is known from
the path: divviup-ts fails with a TypeError on DAP problems without it.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from shared.dap.problems import MEDIA_PROBLEM, ProblemType

log = logging.getLogger(__name__)

HTTP_SERVER_ERROR = 500


_TASK_PATH = re.compile(r"^/tasks/([A-Za-z0-9_-]+)(?:/|$)")


def path_task_id(path: str) -> str | None:
    """The task id of a DAP resource path, for problems the framework raises (405, 404)."""
    match = _TASK_PATH.match(path)
    return match.group(1) if match else None


class ServiceError(Exception):
    """Abort the request with a problem document: `status` (a class default for subclasses
    that always answer the same) and `title`, `type_` about:blank unless a DAP problem type,
    `members` extension members (RFC 9457 §3.2)."""

    status: int = 500

    def __init__(
        self,
        title: str = "Internal Server Error",
        *,
        detail: str | None = None,
        status: int | None = None,
        type_: str = "about:blank",
        task_id: str | None = None,
        headers: Mapping[str, str] | None = None,
        members: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(title if detail is None else detail)
        self.status = self.status if status is None else status
        self.title, self.detail, self.type_ = title, detail, type_
        self.task_id, self.headers, self.members = task_id, headers, members

    def response(self) -> Response:
        """The problem document (RFC 9457 §3; `taskid` and `members` as extension members)."""
        body: dict[str, Any] = {"type": self.type_, "title": self.title, "status": self.status}
        if self.detail:
            body["detail"] = self.detail
        if self.task_id is not None:
            body["taskid"] = self.task_id
        body.update(self.members or {})
        headers = None if self.headers is None else dict(self.headers)
        return JSONResponse(body, self.status, headers, media_type=MEDIA_PROBLEM)


class InternalError(ServiceError):
    """A failure inside a service that the request did not cause or cannot fix: the services'
    internal signals (a lost lease, a transient database error, a full queue ...) derive from
    it, so the layer has one base. Caught where it is expected; one that escapes answers a bare
    500 with the generic title. Its message may quote data, so it stays in the exception and
    is neither sent nor logged."""

    def __init__(self, message: str = "") -> None:
        super().__init__()
        self.args = (message,) if message else ()


class DapProblemError(ServiceError):
    """Abort the request with a DAP problem type (its status unless `status` overrides it)."""

    def __init__(
        self,
        problem: ProblemType,
        detail: str,
        *,
        task_id: str | None = None,
        status: int | None = None,
    ) -> None:
        super().__init__(
            _TITLES.get(problem, problem.value),
            detail=detail,
            status=problem.http_status if status is None else status,
            type_=problem.urn,
            task_id=task_id,
        )
        self.problem = problem
        self.args = (f"{problem.value}: {detail}",)


class HttpProblemError(ServiceError):
    """Abort with a plain HTTP problem (no DAP type), e.g. 404 for an unknown collection job;
    `retry_after` seconds after which the client may try again (a 503 of a full queue)."""

    def __init__(
        self,
        status: int,
        title: str,
        *,
        task_id: str | None = None,
        retry_after: int | None = None,
    ) -> None:
        headers = None if retry_after is None else {"Retry-After": str(retry_after)}
        super().__init__(title, status=status, task_id=task_id, headers=headers)


_TITLES: dict[ProblemType, str] = {
    ProblemType.INVALID_MESSAGE: "The message type for a response was incorrect or the payload "
    "was malformed.",
    ProblemType.UNRECOGNIZED_TASK: "An endpoint received a message with an unknown task ID.",
    ProblemType.UNRECOGNIZED_AGGREGATION_JOB: "An endpoint received a message with an unknown "
    "aggregation job ID.",
    ProblemType.OUTDATED_CONFIG: "The message was generated using an outdated configuration.",
    ProblemType.REPORT_REJECTED: "Report could not be processed.",
    ProblemType.REPORT_TOO_EARLY: "Report could not be processed because it arrived too early.",
    ProblemType.BATCH_INVALID: "The batch implied by the query is invalid.",
    ProblemType.INVALID_BATCH_SIZE: "The number of reports included in the batch is invalid.",
    ProblemType.BATCH_QUERIED_TOO_MANY_TIMES: "The batch described by the query has been "
    "queried too many times.",
    ProblemType.BATCH_MISMATCH: "Leader and helper disagree on reports aggregated in a batch.",
    ProblemType.UNAUTHORIZED_REQUEST: "The request's authorization is not valid.",
    ProblemType.MISSING_TASK_ID: "HPKE configuration was requested without specifying a task ID.",
    ProblemType.STEP_MISMATCH: "The leader and helper are not on the same step of VDAF "
    "preparation.",
    ProblemType.BATCH_OVERLAP: "The queried batch overlaps with a previously queried batch.",
    ProblemType.INVALID_AGGREGATION_PARAMETER: "The aggregation parameter is invalid.",
    ProblemType.UNSUPPORTED_EXTENSION: "The message carries an unsupported extension.",
    ProblemType.INVALID_EXTENSION: "The message's extensions are invalid.",
}


def log_problem(method: str, path: str, exc: ServiceError) -> None:
    """A DAP refusal at info (its type), a server-side failure that another exception caused
    at error (the cause's type: a driver's message can quote statement parameters); never the
    detail."""
    if isinstance(exc, DapProblemError):
        log.info("%s %s -> %s", method, path, exc.problem.value)
    elif isinstance(exc, InternalError):
        log.error("unhandled %s on %s %s", type(exc).__name__, method, path)
    elif exc.status >= HTTP_SERVER_ERROR and exc.__cause__ is not None:
        log.error("%s on %s %s: %s", exc.title, method, path, type(exc.__cause__).__name__)


def install_problem_handlers(app: FastAPI) -> None:
    """Every error leaves as a problem document; nothing becomes a bare 500 page."""

    async def on_service_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, ServiceError)
        log_problem(request.method, request.url.path, exc)
        if exc.task_id is None:
            exc.task_id = path_task_id(request.url.path)
        return exc.response()

    async def on_http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, StarletteHTTPException)
        task_id = path_task_id(request.url.path)
        headers = exc.headers or None
        return ServiceError(
            str(exc.detail), status=exc.status_code, task_id=task_id, headers=headers
        ).response()

    async def on_validation_error(request: Request, exc: Exception) -> Response:
        return ServiceError(
            "Bad Request", status=400, task_id=path_task_id(request.url.path)
        ).response()

    async def on_unexpected(request: Request, exc: Exception) -> Response:
        # The exception text may quote request data; log only its type and the route.
        log.error("unhandled %s on %s %s", type(exc).__name__, request.method, request.url.path)
        return ServiceError(task_id=path_task_id(request.url.path)).response()

    app.add_exception_handler(ServiceError, on_service_error)
    app.add_exception_handler(StarletteHTTPException, on_http_error)
    app.add_exception_handler(RequestValidationError, on_validation_error)
    app.add_exception_handler(Exception, on_unexpected)
