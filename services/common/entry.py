"""What every service's `python -m services.<name>` and `sagg serve <name>` do: settings from
`sagg serve`'s flags, the environment and secret files (`services.common.settings`), JSON-line
logs (`services.common.logs`), uvicorn in the foreground until SIGINT/SIGTERM."""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import signal
import socket
import sys
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

import uvicorn
from pydantic import ValidationError
from pydantic_settings import BaseSettings, SettingsError

from services.common.limits import ServerLimits
from services.common.logs import configure_logging
from services.common.serving import server_options

__all__ = ["load_settings", "run_service", "serve_app", "service_main"]

_S = TypeVar("_S", bound=BaseSettings)
#: prctl(2) option: the signal a process gets when its parent ends (Linux).
_PR_SET_PDEATHSIG = 1


def run_service(
    app: Any,
    *,
    host: str,
    port: int,
    log_level: str,
    tls_cert_file: str | None = None,
    tls_key_file: str | None = None,
    limits: ServerLimits | None = None,
    sock: socket.socket | None = None,
) -> None:
    """Serve `app` until a signal; uvicorn finishes in-flight requests and runs lifespan exit.

    With a certificate and key, HTTPS only (DAP-09 §3). `sock`: a listening socket to accept
    on instead of binding `host`:`port` (`serve_app`'s worker processes share one)."""
    configure_logging(log_level)
    # Access logs would only repeat request paths, and a path can carry task and job ids.
    # log_config=None: uvicorn's own lines go through the JSON handler instead of its format.
    config = uvicorn.Config(
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
    server = uvicorn.Server(config)
    with contextlib.suppress(KeyboardInterrupt):
        server.run(sockets=None if sock is None else [sock])
    if not server.started:
        # As `uvicorn.run`: the port was taken, or the app's startup failed.
        sys.exit(3)


def load_settings(settings_cls: type[_S], service: str, **overrides: Any) -> _S | None:
    """`settings_cls` from `overrides` (`sagg serve`'s flags), the environment and secret files,
    or None after one line on stderr naming what is wrong.

    Only variable names and messages are printed: the offending values may be secrets.
    """
    prefix = str(settings_cls.model_config.get("env_prefix", ""))
    try:
        return settings_cls(**overrides)
    except ValidationError as exc:
        problems = "; ".join(
            (f"{prefix}{str(e['loc'][0]).upper()}: " if e["loc"] else "")
            + str(e["msg"]).removeprefix("Value error, ")
            for e in exc.errors()
        )
    except SettingsError as exc:  # a secret file unreadable, a list that is not JSON
        problems = str(exc)
    print(f"{service}: invalid settings: {problems}", file=sys.stderr)
    return None


def service_main(
    settings_cls: type[_S], service: str, run: Callable[[_S], None], **overrides: Any
) -> int:
    """A service's main: exit 2 on bad settings, else `run` them (serve until a signal)."""
    settings = load_settings(settings_cls, service, **overrides)
    if settings is None:
        return 2
    run(settings)
    return 0


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


def serve_app(create_app: Callable[[_L], Any], settings: _L, workers: int = 1) -> None:
    """Serve the app `create_app` makes of `settings` until a signal, in `workers` processes
    accepting on one socket (the kernel spreads connections over them). Each worker builds
    its own app, so the stores must be shared between processes: SQLite files (WAL, and
    BEGIN IMMEDIATE write transactions serialize the processes) or PostgreSQL."""
    # Before the app is built: a failure opening its stores is logged, and scrubbed, too.
    configure_logging(settings.log_level)
    sock = None if workers <= 1 else _listen(settings.host, settings.port)
    if sock is not None:
        parent = os.getpid()
        # Forked before any app, store connection or thread exists in this process.
        for _ in range(workers - 1):
            if os.fork() == 0:
                code = 1
                try:
                    _die_with(parent)
                    _serve(create_app, settings, sock)
                    code = 0
                finally:
                    os._exit(code)
    _serve(create_app, settings, sock)


def _die_with(parent: int) -> None:
    """SIGTERM this worker when `parent` ends, however it ends: uvicorn re-raises the signal
    that stopped it, so the parent never runs code after its server."""
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG)")
    if os.getppid() != parent:  # it ended before prctl
        os._exit(0)


def _serve(create_app: Callable[[_L], Any], settings: _L, sock: socket.socket | None) -> None:
    run_service(
        create_app(settings),
        host=settings.host,
        port=settings.port,
        log_level=settings.log_level,
        tls_cert_file=settings.tls_cert_file,
        tls_key_file=settings.tls_key_file,
        limits=ServerLimits.model_validate(settings, from_attributes=True),
        sock=sock,
    )


def _listen(host: str, port: int) -> socket.socket:
    family, kind, proto, _, address = socket.getaddrinfo(
        host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )[0]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(address)
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock
