"""What the three interop roles share: the JSON envelope, VDAF and value codecs, the app shell.

Conventions of draft-dcook-ppm-dap-interop-test-design-07 §4 (digest §11):
- every command is ``POST /internal/test/<command>`` with a JSON object body; a command that
  parsed answers 200 with ``{"status": "success" | "error", "error"?: ...}``;
- unknown ``/internal/test/*`` paths are 404;
- binary values are unpadded base64url; VDAF parameters, measurements and results are
  base-10 strings, while times, sizes and query types are JSON numbers.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import os
import secrets
import sys
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import httpx
from fastapi import Body, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, SecretStr, ValidationError

from deploy.errors import DeployError
from services.common.logs import JsonFormatter
from services.common.routing import InvalidRequest, answers_invalid, api_router
from shared.vdaf.spec import VdafSpec

__all__ = [
    "Command",
    "InteropError",
    "InteropVdaf",
    "Lifespan",
    "Role",
    "SUPPORTED_VDAFS",
    "CommandBody",
    "configure_logging",
    "data_dir",
    "error_body",
    "format_result",
    "interop_app",
    "no_lifespan",
    "parse_measurement",
    "problem_detail",
    "service_settings",
    "validation_message",
]

log = logging.getLogger(__name__)

Role = Literal["aggregator", "collector", "client"]
#: A command handler: the request's JSON object in, the success fields out (InteropError or a
#: pydantic ValidationError for an "error" answer).
Lifespan = Callable[[FastAPI], contextlib.AbstractAsyncContextManager[None]]

#: The VDAF types this implementation accepts over the interop API (interop draft §4.2.1);
#: Poplar1 and Janus's private Prio3 variants have no counterpart here.
SUPPORTED_VDAFS = ("Prio3Count", "Prio3Sum", "Prio3SumVec", "Prio3Histogram")


@dataclass(frozen=True)
class Command:
    """A test API command: its body's model, and what it does with a valid body (the success
    answer's fields; InteropError or a pydantic ValidationError for an "error" answer)."""

    body: type[CommandBody]
    run: Callable[[Any], Awaitable[dict[str, Any]]]


class InteropError(DeployError):
    """A command that parsed but failed: answered 200 ``{"status": "error", "error": msg}``."""


class CommandBody(BaseModel):
    """Base of the command bodies: the runner may send fields a role does not use (the
    aggregator's add_task carries both tokens, say), so unknown fields are ignored."""

    model_config = ConfigDict(extra="ignore", frozen=True)


def _decimal(value: object, name: str) -> int:
    """A base-10 string (interop draft §4.2.1); a JSON integer is taken too, for leniency."""
    if isinstance(value, bool):
        raise InteropError(f"{name} must be a base-10 string")
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.isascii() and value.isdigit():
        return int(value)
    raise InteropError(f"{name} must be a base-10 string, not {value!r}")


class InteropVdaf(CommandBody):
    """The interop VDAF object, e.g. ``{"type": "Prio3Sum", "bits": "8"}`` (§4.2.1)."""

    type: str
    bits: str | int | None = None
    length: str | int | None = None
    chunk_length: str | int | None = None

    def spec(self) -> VdafSpec:
        """The project's `VdafSpec`; InteropError for an unsupported type or bad parameters."""
        if self.type not in SUPPORTED_VDAFS:
            raise InteropError(f"unsupported VDAF type {self.type!r}")
        params: dict[str, Any] = {"type": self.type}
        wanted = {
            "Prio3Count": (),
            "Prio3Sum": ("bits",),
            "Prio3SumVec": ("bits", "length", "chunk_length"),
            "Prio3Histogram": ("length", "chunk_length"),
        }[self.type]
        for name in wanted:
            value = getattr(self, name)
            if value is None:
                raise InteropError(f"{self.type} needs the parameter {name!r}")
            params[name] = _decimal(value, f"vdaf.{name}")
        try:
            return VdafSpec.model_validate(params)
        except ValidationError as exc:
            message = validation_message(exc.errors(include_input=False, include_url=False))
            raise InteropError(f"invalid VDAF: {message}") from None


def parse_measurement(vdaf: VdafSpec, value: object) -> int | list[int]:
    """An interop measurement (§4.3.1): a base-10 string, or an array of them for SumVec."""
    if vdaf.type == "Prio3SumVec":
        if not isinstance(value, list):
            raise InteropError("a Prio3SumVec measurement is an array of base-10 strings")
        return [_decimal(v, "measurement") for v in value]
    return _decimal(value, "measurement")


def format_result(value: object) -> str | list[str]:
    """An aggregate as the interop API reports it (§4.5.3): base-10 string(s)."""
    if isinstance(value, list):
        return [str(int(v)) for v in value]
    if isinstance(value, int):
        return str(value)
    raise InteropError(f"unexpected aggregate {value!r}")


def validation_message(errors: Sequence[Mapping[str, Any]]) -> str:
    """Locations and messages of pydantic's `errors` only: inputs may hold tokens and keys."""
    parts = []
    for e in errors:
        where = ".".join(str(p) for p in e["loc"])
        msg = str(e["msg"]).removeprefix("Value error, ")
        parts.append(f"{where}: {msg}" if where else msg)
    return "; ".join(parts)


def problem_detail(response: httpx.Response) -> str:
    """The gist of an RFC 9457 problem answer from one of the wrapped services."""
    try:
        problem = response.json()
    except ValueError:
        return response.text[:200]
    if isinstance(problem, dict):
        return str(problem.get("detail") or problem.get("title") or problem)
    return str(problem)[:200]


def service_settings(store: Path, host: str, port: int) -> dict[str, Any]:
    """The settings every wrapped service gets in an interop run: a private SQLite store at
    `store`, a fresh admin token, and plain HTTP (the harness connects the parties by plain
    HTTP on a private network)."""
    return {
        "database_url": f"sqlite:///{store}",
        "admin_token": SecretStr(secrets.token_urlsafe(32)),
        "host": host,
        "port": port,
        "allow_insecure_http": True,
    }


def error_body(message: str) -> dict[str, Any]:
    return {"status": "error", "error": message}


class CommandAnswer(BaseModel):
    """Every command's answer (§4): the outcome, what failed, and the command's own fields."""

    model_config = ConfigDict(extra="allow")

    status: Literal["success", "error"]
    error: str | None = None


def _invalid_answer(name: str) -> InvalidRequest:
    async def answer(_: Request, exc: RequestValidationError) -> Response:
        errors = exc.errors()
        if errors and errors[0].get("type") == "json_invalid":
            return JSONResponse(error_body("request body is not JSON"))
        # [1:]: FastAPI's "body"
        message = validation_message([{**e, "loc": tuple(e["loc"])[1:]} for e in errors])
        log.info("%s: invalid request: %s", name, message)
        return JSONResponse(error_body(f"invalid request: {message}"))

    return answer


def interop_app(role: Role, commands: Mapping[str, Command], lifespan: Lifespan) -> FastAPI:
    """A FastAPI app answering ``POST /internal/test/<name>`` for each command (and ``ready``).

    A body the command's model refuses, or a command that fails, still answers 200 with
    status "error" (§4: the status carries the outcome); an empty body is an empty object;
    any other path under /internal/test is a plain 404 from the router.
    """
    app = FastAPI(
        title=f"sagg interop {role}",
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
    )
    router = api_router("interop")

    async def ready(_: CommandBody) -> dict[str, Any]:
        # The lifespan has run before the first request is served, so answering is readiness.
        return {}

    def route(name: str, command: Command) -> None:
        async def endpoint(body: CommandBody | None = None) -> JSONResponse:
            try:
                parsed = body if body is not None else command.body.model_validate({})
                fields = await command.run(parsed)
            except InteropError as exc:
                log.info("%s: %s", name, exc)
                return JSONResponse(error_body(str(exc)))
            except ValidationError as exc:
                message = validation_message(exc.errors(include_input=False, include_url=False))
                log.info("%s: invalid request: %s", name, message)
                return JSONResponse(error_body(f"invalid request: {message}"))
            except Exception as exc:  # a bug or an outage: still an answer the runner can read
                log.exception("%s failed", name)
                return JSONResponse(error_body(f"internal error: {type(exc).__name__}"))
            return JSONResponse({"status": "success", **fields})

        # The body's model is the command's: FastAPI reads the signature.
        body = inspect.Parameter(
            "body",
            inspect.Parameter.POSITIONAL_OR_KEYWORD,
            default=None,
            annotation=Annotated[command.body | None, Body()],
        )
        endpoint.__signature__ = inspect.Signature([body])  # type: ignore[attr-defined]
        router.add_api_route(
            f"/internal/test/{name}",
            answers_invalid(_invalid_answer(name))(endpoint),
            methods=["POST"],
            name=name,
            response_model=CommandAnswer,
        )

    route("ready", Command(CommandBody, ready))
    for name, command in commands.items():
        route(name, command)
    app.include_router(router)
    return app


def configure_logging(
    role: Role, port: int, level: int = logging.INFO, logs: Path = Path("/logs")
) -> None:
    """JSON lines to stderr, and to /logs when that directory exists and is writable (interop
    draft §4: the runner collects /logs from each container)."""
    root = logging.getLogger()
    root.setLevel(level)
    handlers: list[logging.Handler] = [logging.StreamHandler(sys.stderr)]
    if logs.is_dir() and os.access(logs, os.W_OK):
        with contextlib.suppress(OSError):
            handlers.append(logging.FileHandler(logs / f"sagg-interop-{role}-{port}.log"))

    def tag(record: logging.LogRecord) -> bool:
        record.role = role
        return True

    for handler in handlers:
        # The JSON lines of every sagg service, each tagged with the interop role.
        handler.setFormatter(JsonFormatter())
        handler.addFilter(tag)
        root.addHandler(handler)
    # One line per HTTP request (httpx) drowns the interesting lines.
    logging.getLogger("httpx").setLevel(logging.WARNING)


def data_dir(role: Role, given: str | None) -> Path:
    """Where the role keeps its SQLite store: `given`, or a fresh temporary directory (each
    interop container starts from nothing, so a throwaway store matches the draft's model)."""
    if given:
        path = Path(given)
        path.mkdir(parents=True, exist_ok=True)
        return path
    return Path(tempfile.mkdtemp(prefix=f"sagg-interop-{role}-"))


@contextlib.asynccontextmanager
async def no_lifespan(_: FastAPI) -> AsyncIterator[None]:
    yield
