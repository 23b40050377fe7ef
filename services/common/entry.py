"""What every service's `python -m services.<name>` does: settings from the environment, JSON-line
logs (`services.common.logs`), uvicorn in the foreground until SIGINT/SIGTERM."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

import uvicorn
from pydantic import ValidationError

from services.common.limits import ServerLimits
from services.common.logs import configure_logging
from services.common.serving import server_options

__all__ = ["run_service", "service_main", "settings_from_env"]

_S = TypeVar("_S")


def run_service(
    app: Any,
    *,
    host: str,
    port: int,
    log_level: str,
    tls_cert_file: str | None = None,
    tls_key_file: str | None = None,
    limits: ServerLimits | None = None,
) -> None:
    """Serve `app` until a signal; uvicorn finishes in-flight requests and runs lifespan exit.

    With a certificate and key, HTTPS only (DAP-09 §3)."""
    configure_logging(log_level)
    # Access logs would only repeat request paths, and a path can carry task and job ids.
    # log_config=None: uvicorn's own lines go through the JSON handler instead of its format.
    uvicorn.run(
        app,
        host=host,
        port=port,
        log_level=log_level.lower(),
        access_log=False,
        log_config=None,
        ssl_certfile=tls_cert_file,
        ssl_keyfile=tls_key_file,
        **server_options(limits or ServerLimits()),
    )


def settings_from_env(load: Callable[[], _S], env_prefix: str, service: str) -> _S | None:
    """The service's settings, or None after one line on stderr naming what is wrong.

    Only variable names and messages are printed: the offending values may be secrets.
    """
    try:
        return load()
    except ValidationError as exc:
        problems = "; ".join(
            (f"{env_prefix}{str(e['loc'][0]).upper()}: " if e["loc"] else "")
            + str(e["msg"]).removeprefix("Value error, ")
            for e in exc.errors()
        )
        print(f"{service}: invalid settings: {problems}", file=sys.stderr)
        return None


class _Listening(Protocol):
    host: str
    port: int
    log_level: str
    tls_cert_file: str | None
    tls_key_file: str | None
    max_request_body_bytes: int
    limit_concurrency: int
    header_timeout_s: float
    body_timeout_s: float


_L = TypeVar("_L", bound=_Listening)


def service_main(
    load: Callable[[], _L], env_prefix: str, service: str, create_app: Callable[[_L], Any]
) -> int:
    """A `python -m services.<name>` main: exit 2 on bad settings, else serve until a signal."""
    settings = settings_from_env(load, env_prefix, service)
    if settings is None:
        return 2
    # Before the app is built: a failure opening its stores is logged, and scrubbed, too.
    configure_logging(settings.log_level)
    run_service(
        create_app(settings),
        host=settings.host,
        port=settings.port,
        log_level=settings.log_level,
        tls_cert_file=settings.tls_cert_file,
        tls_key_file=settings.tls_key_file,
        limits=ServerLimits.model_validate(settings, from_attributes=True),
    )
    return 0
