"""``sagg interop aggregator|collector|client --port P``: serve one interop test API role.

Each role answers ``POST /internal/test/*`` (draft-dcook-ppm-dap-interop-test-design-07 §4) on
``host:port`` and keeps its state in a SQLite store under ``--data-dir`` (a fresh temporary
directory by default). `interop` is the command (Typer) `deploy.cli` mounts;
``python -m deploy.interop`` runs it on its own.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Annotated

import typer
import uvicorn
from fastapi import FastAPI

from deploy.interop.aggregator import aggregator_settings, build_aggregator_app
from deploy.interop.client import build_client_app
from deploy.interop.collector import build_collector_app, collector_settings
from deploy.interop.common import Role, configure_logging, data_dir

__all__ = ["build_app", "interop", "main", "serve_role"]

log = logging.getLogger(__name__)


def build_app(role: Role, host: str, port: int, data: str | None) -> FastAPI:
    """The ASGI app of `role`."""
    if role == "aggregator":
        return build_aggregator_app(aggregator_settings(data_dir(role, data), host, port))
    if role == "collector":
        return build_collector_app(collector_settings(data_dir(role, data), host, port))
    return build_client_app()


def serve_role(role: Role, host: str, port: int, data: str | None) -> None:
    """Serve until SIGINT/SIGTERM; uvicorn runs the app's lifespan shutdown on the way out."""
    configure_logging(role, port)
    app = build_app(role, host, port, data)
    log.info("interop %s listening on %s:%d", role, host, port)
    # log_config=None: uvicorn's own lines go through the root handlers set up above, so
    # they reach /logs too instead of only uvicorn's private stderr handler.
    uvicorn.run(app, host=host, port=port, log_config=None, access_log=False)


def interop(
    role: Annotated[Role, typer.Argument()],
    port: Annotated[int, typer.Option(min=1, max=65535)],
    host: Annotated[str, typer.Option()] = "127.0.0.1",
    data_dir: Annotated[
        str | None, typer.Option(help="where the SQLite store goes (default: a temp dir)")
    ] = None,
) -> None:
    """Serve a DAP interop test API role (interop draft §4)."""
    serve_role(role, host, port, data_dir)


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m deploy.interop ROLE --port P`` reads as ``sagg interop ROLE --port P``
    (exits: 0 after a signal, 2 on a usage error)."""
    app = typer.Typer(add_completion=False)
    app.command()(interop)
    app(args=argv, prog_name="sagg interop")
