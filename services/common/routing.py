"""How every service declares its routes to FastAPI, so that its OpenAPI description is right.

- Every error is an RFC 9457 problem document (``application/problem+json``, `Problem`); the
  routers (`api_router`) declare it as every route's ``default`` response, which also keeps
  FastAPI from documenting a 422 the services never send for bad input.
- JSON bodies are typed (pydantic models as endpoint parameters), but a service answers an
  invalid one in its own words: an endpoint marked `answers_invalid` gets the
  `RequestValidationError` (FastAPI's generic answer is the app's 400 otherwise). That answer
  checks the route's credentials first: FastAPI parses a JSON body before the dependencies
  run, and an unauthenticated caller must learn nothing about what it sent.
- Binary DAP bodies are read raw; `binary_body` declares their media type.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import Any, Final, TypeVar

from fastapi import APIRouter, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from fastapi.routing import APIRoute
from pydantic import BaseModel, ConfigDict, Field
from starlette.exceptions import HTTPException

from shared.dap.problems import MEDIA_PROBLEM

__all__ = [
    "PROBLEM_RESPONSES",
    "InvalidRequest",
    "Problem",
    "ProblemRoute",
    "answers_invalid",
    "api_router",
    "binary_body",
    "binary_response",
    "created_or_found",
]


class Problem(BaseModel):
    """An RFC 9457 problem document; DAP problems carry the task id (DAP-09 §3.2)."""

    model_config = ConfigDict(extra="allow")

    type: str
    title: str
    status: int = Field(ge=400, le=599)
    detail: str | None = None
    taskid: str | None = None


PROBLEM_RESPONSES: Final[dict[int | str, dict[str, Any]]] = {
    "default": {
        "description": "an RFC 9457 problem document",
        "content": {MEDIA_PROBLEM: {"schema": Problem.model_json_schema()}},
    }
}

_BINARY: Final = {"type": "string", "format": "binary"}

#: An endpoint's own answer to a request FastAPI could not validate.
InvalidRequest = Callable[[Request, RequestValidationError], Awaitable[Response]]
_Endpoint = TypeVar("_Endpoint", bound=Callable[..., Any])
_ANSWER = "sagg_answers_invalid"
HTTP_BAD_REQUEST = 400
_UNPARSABLE: Final = {"type": "json_invalid", "loc": ("body",), "msg": "the body is not JSON"}


def answers_invalid(answer: InvalidRequest) -> Callable[[_Endpoint], _Endpoint]:
    """Mark an endpoint: `answer` answers its requests that fail validation."""

    def mark(endpoint: _Endpoint) -> _Endpoint:
        setattr(endpoint, _ANSWER, answer)
        return endpoint

    return mark


class ProblemRoute(APIRoute):
    """An `APIRoute` that hands its validation errors to the endpoint's `answers_invalid`."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()
        answer: InvalidRequest | None = getattr(self.endpoint, _ANSWER, None)
        if answer is None:
            return handler

        async def handle(request: Request) -> Response:
            try:
                return await handler(request)
            except RequestValidationError as exc:
                return await answer(request, exc)
            except HTTPException as exc:
                # FastAPI's 400 for a body its JSON parser gave up on (nesting beyond the
                # recursion limit), raised from the parser's error: an unparsable body too.
                if exc.status_code != HTTP_BAD_REQUEST or exc.__cause__ is None:
                    raise
                return await answer(request, RequestValidationError([_UNPARSABLE]))

        return handle


def api_router(
    tag: str, dependencies: Sequence[Any] = (), response_class: type[Response] = JSONResponse
) -> APIRouter:
    """The routes of one audience (DAP, admin, devices...), `dependencies` their credentials,
    `response_class` their answers' (`Response`: binary ones, declared by `binary_response`).

    A JSON body without a Content-Type is taken as JSON, as the services always did."""
    return APIRouter(
        tags=[tag],
        dependencies=list(dependencies),
        default_response_class=response_class,
        responses=PROBLEM_RESPONSES,
        route_class=ProblemRoute,
        strict_content_type=False,
    )


def created_or_found(model: type[BaseModel]) -> dict[str, Any]:
    """The route arguments of an idempotent creation: `model` answered 201 when created, 200
    when it was there already."""
    return {"response_model": model, "responses": {201: {"model": model, "description": "created"}}}


def binary_body(media_type: str) -> dict[str, Any]:
    """The `openapi_extra` of a route that reads a binary body of `media_type` raw."""
    return {"requestBody": {"required": True, "content": {media_type: {"schema": _BINARY}}}}


def binary_response(media_type: str, *statuses: int) -> dict[int | str, dict[str, Any]]:
    """The `responses` of a route answering a binary body of `media_type`."""
    return {
        status: {"description": "success", "content": {media_type: {"schema": _BINARY}}}
        for status in statuses or (200,)
    }
