"""What every `sagg` command shares: the global options, the deployment file, URLs, the admin
token, the HTTP client under the transport policy, and option parsers.

The global options (`sagg --deployment F --ca-file PEM --allow-insecure-http COMMAND`) are kept
in a context variable for the invocation, so a command reads them through these helpers.
"""

from __future__ import annotations

import math
import os
import ssl
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import datetime

import httpx
import typer
from pydantic import ValidationError

from client_sdk.http import http_client
from deploy.config import Deployment, load_deployment
from shared.transport import TransportPolicy

__all__ = [
    "GLOBAL_OPTIONS",
    "POSITIVE",
    "SECONDS",
    "CliError",
    "GlobalOptions",
    "admin_token",
    "deployment",
    "epoch",
    "finite",
    "http",
    "transport",
    "url",
    "validation_message",
]


class CliError(Exception):
    """A user-facing failure of a command: printed as one line, exit status 1."""


@dataclass(frozen=True)
class GlobalOptions:
    deployment: str | None = None
    ca_file: str | None = None
    allow_insecure_http: bool = False


#: This invocation's global options, set by the `sagg` callback before any command runs.
GLOBAL_OPTIONS: ContextVar[GlobalOptions | None] = ContextVar("GLOBAL_OPTIONS", default=None)


def _options() -> GlobalOptions:
    return GLOBAL_OPTIONS.get() or GlobalOptions()


def deployment() -> Deployment | None:
    """The deployment file (`--deployment`, `SAGG_DEPLOYMENT`, `.data/deployment.json`), if any."""
    return load_deployment(_options().deployment)


def admin_token(deployment: Deployment | None, service: str) -> str:
    """The operator's token of `service`: SAGG_ADMIN_TOKEN, else the deployment file's."""
    token = os.environ.get("SAGG_ADMIN_TOKEN") or (
        deployment.admin_token(service) if deployment else None
    )
    if not token:
        raise CliError(f"no {service} admin token: set SAGG_ADMIN_TOKEN or run `sagg up` first")
    return token


def transport(deployment: Deployment | None) -> TransportPolicy:
    """The CAs this command trusts (`--ca-file`, `SAGG_CA_FILE`, the deployment file's
    `tls_ca_file`, else the system's) and whether plain http:// off the host is allowed
    (`--allow-insecure-http`, `SAGG_ALLOW_INSECURE_HTTP=1`)."""
    options = _options()
    ca_file = (
        options.ca_file
        or os.environ.get("SAGG_CA_FILE")
        or (deployment.tls_ca_file if deployment else None)
    )
    insecure = options.allow_insecure_http or os.environ.get(
        "SAGG_ALLOW_INSECURE_HTTP", ""
    ).lower() in ("1", "true", "yes")
    policy = TransportPolicy(ca_file, insecure)
    try:
        policy.ssl_context  # noqa: B018 - load the bundle now, for a one-line error
    except (OSError, ssl.SSLError) as exc:
        raise CliError(f"cannot load the CA bundle {ca_file}: {exc}") from None
    return policy


def http(deployment: Deployment | None, timeout: float) -> httpx.Client:
    return http_client(transport(deployment), timeout=timeout)


def url(flag: str | None, env: str, deployment: Deployment | None, role: str) -> str | None:
    """A service URL: the flag, else the environment variable, else the deployment file's."""
    if flag:
        return flag
    if os.environ.get(env):
        return os.environ[env]
    return getattr(deployment, role) if deployment else None


def validation_message(exc: ValidationError) -> str:
    """The first problem of a pydantic error, as `where: what`."""
    first = exc.errors()[0]
    where = ".".join(str(p) for p in first.get("loc", ()) if p not in ("function-after",))
    msg = str(first.get("msg", "invalid value")).removeprefix("Value error, ")
    return f"{where}: {msg}" if where else msg


# --- option parsers (a ValueError's message becomes the usage error) ---------------------------


def epoch(text: str) -> int:
    """Seconds since the epoch, or an ISO 8601 time with a zone (e.g. 2026-11-22T00:00:00Z)."""
    if text.isdigit():
        return int(text)
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise typer.BadParameter(f"not a time: {text!r}") from None
    if when.tzinfo is None:
        raise typer.BadParameter(f"time needs a zone (e.g. Z): {text!r}")
    return int(when.timestamp())


def finite(
    low: float, high: float, *, low_open: bool, high_open: bool, what: str
) -> Callable[[str], float]:
    """A parser of a finite float in the interval; the message names the interval (NaN, which
    compares false with every bound, is refused too)."""
    left, right = "(" if low_open else "[", ")" if high_open else "]"

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise typer.BadParameter(f"not a number: {text!r}") from None
        too_low = value <= low if low_open else value < low
        too_high = value >= high if high_open else value > high
        if math.isnan(value) or too_low or too_high:
            bound = f"{left}{low:g}, {high:g}{right}"
            raise typer.BadParameter(f"{what} must be in {bound}: {text!r}")
        return value

    return parse


POSITIVE = finite(0.0, float("inf"), low_open=True, high_open=True, what="value")
SECONDS = finite(0.0, float("inf"), low_open=False, high_open=True, what="seconds")
