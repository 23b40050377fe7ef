"""RFC 9457 problem documents carrying DAP-09 error types (DAP-09 §3.2, digest §2).

Handlers raise `DapProblemError`; `install_problem_handlers` turns it into an
``application/problem+json`` response. The `taskid` member is set whenever the task id is known
from the path: divviup-ts fails with a TypeError on DAP problems without it.
"""

from __future__ import annotations

import logging
import re
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from shared.dap.problems import MEDIA_PROBLEM, ProblemType

log = logging.getLogger(__name__)


_TASK_PATH = re.compile(r"^/tasks/([A-Za-z0-9_-]+)(?:/|$)")


def path_task_id(path: str) -> str | None:
    """The task id of a DAP resource path, for problems the framework raises (405, 404)."""
    match = _TASK_PATH.match(path)
    return match.group(1) if match else None


class DapProblemError(Exception):
    """Abort the request with a DAP problem type."""

    def __init__(
        self,
        problem: ProblemType,
        detail: str,
        *,
        task_id: str | None = None,
        status: int | None = None,
    ) -> None:
        super().__init__(f"{problem.value}: {detail}")
        self.problem = problem
        self.detail = detail
        self.task_id = task_id
        self.status = status if status is not None else problem.http_status


def problem_response(
    *,
    type_: str,
    title: str,
    status: int,
    detail: str | None = None,
    task_id: str | None = None,
    headers: dict[str, str] | None = None,
) -> Response:
    body: dict[str, Any] = {"type": type_, "title": title, "status": status}
    if detail:
        body["detail"] = detail
    if task_id is not None:
        body["taskid"] = task_id
    return JSONResponse(body, status_code=status, media_type=MEDIA_PROBLEM, headers=headers)


def dap_problem_response(exc: DapProblemError) -> Response:
    return problem_response(
        type_=exc.problem.urn,
        title=_TITLES.get(exc.problem, exc.problem.value),
        status=exc.status,
        detail=exc.detail,
        task_id=exc.task_id,
    )


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
}


def install_problem_handlers(app: FastAPI) -> None:
    """Every error leaves as a problem document; nothing becomes a bare 500 page."""

    async def on_dap_problem(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, DapProblemError)
        log.info("%s %s -> %s", request.method, request.url.path, exc.problem.value)
        return dap_problem_response(exc)

    async def on_http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, StarletteHTTPException)
        return problem_response(
            type_="about:blank",
            title=str(exc.detail),
            status=exc.status_code,
            headers=dict(exc.headers) if exc.headers else None,
            task_id=path_task_id(request.url.path),
        )

    async def on_validation_error(request: Request, exc: Exception) -> Response:
        return problem_response(
            type_="about:blank",
            title="Bad Request",
            status=400,
            task_id=path_task_id(request.url.path),
        )

    async def on_unexpected(request: Request, exc: Exception) -> Response:
        # The exception text may quote request data; log only its type and the route.
        log.error("unhandled %s on %s %s", type(exc).__name__, request.method, request.url.path)
        return problem_response(type_="about:blank", title="Internal Server Error", status=500)

    app.add_exception_handler(DapProblemError, on_dap_problem)
    app.add_exception_handler(StarletteHTTPException, on_http_error)
    app.add_exception_handler(RequestValidationError, on_validation_error)
    app.add_exception_handler(Exception, on_unexpected)


class HttpProblemError(Exception):
    """Abort with a plain HTTP problem (no DAP type), e.g. 404 for an unknown collection job."""

    def __init__(
        self,
        status: int,
        title: str,
        *,
        task_id: str | None = None,
        retry_after: int | None = None,
    ) -> None:
        super().__init__(title)
        self.status = status
        self.title = title
        self.task_id = task_id
        #: Seconds after which the client may try again (a 503 of a full queue).
        self.retry_after = retry_after

    def response(self) -> Response:
        headers = None if self.retry_after is None else {"Retry-After": str(self.retry_after)}
        return problem_response(
            type_="about:blank",
            title=self.title,
            status=self.status,
            task_id=self.task_id,
            headers=headers,
        )


def install_http_problem_handler(app: FastAPI) -> None:
    async def on_http_problem(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HttpProblemError)
        return exc.response()

    app.add_exception_handler(HttpProblemError, on_http_problem)
