"""``sagg interop aggregator|collector|client --port P``: serve one interop test API role.

Each role answers ``POST /internal/test/*`` (draft-dcook-ppm-dap-interop-test-design-07 §4) on
``host:port`` and keeps its state in a SQLite store under ``--data-dir`` (a fresh temporary
directory by default). `add_interop_parser` plugs the command into `deploy.cli`;
``python -m deploy.interop`` runs the same parser on its own.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from typing import Any

import uvicorn
from fastapi import FastAPI

from deploy.interop.aggregator import aggregator_settings, build_aggregator_app
from deploy.interop.client import build_client_app
from deploy.interop.collector import build_collector_app, collector_settings
from deploy.interop.common import Role, configure_logging, data_dir

__all__ = ["add_interop_parser", "build_app", "cmd_interop", "main"]

log = logging.getLogger(__name__)

ROLES: tuple[Role, ...] = ("aggregator", "collector", "client")


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 0 < value < 65536:
        raise argparse.ArgumentTypeError(f"port out of range: {text!r}")
    return value


def add_interop_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``interop ROLE --port P [--host H] [--data-dir D]`` to `subparsers` (the object
    ``ArgumentParser.add_subparsers`` returns); the handler is `cmd_interop`."""
    interop: argparse.ArgumentParser = subparsers.add_parser(
        "interop", help="serve a DAP interop test API role (interop draft §4)"
    )
    interop.add_argument("role", choices=ROLES)
    interop.add_argument("--port", type=_port, required=True)
    interop.add_argument("--host", default="127.0.0.1")
    interop.add_argument("--data-dir", help="where the SQLite store goes (default: a temp dir)")
    interop.set_defaults(func=cmd_interop)
    return interop


def build_app(role: Role, host: str, port: int, data: str | None) -> FastAPI:
    """The ASGI app of `role`."""
    if role == "aggregator":
        return build_aggregator_app(aggregator_settings(data_dir(role, data), host, port))
    if role == "collector":
        return build_collector_app(collector_settings(data_dir(role, data), host, port))
    return build_client_app()


def cmd_interop(args: argparse.Namespace) -> int:
    """Serve until SIGINT/SIGTERM; uvicorn runs the app's lifespan shutdown on the way out."""
    role: Role = args.role
    configure_logging(role, args.port)
    app = build_app(role, args.host, args.port, args.data_dir)
    log.info("interop %s listening on %s:%d", role, args.host, args.port)
    # log_config=None: uvicorn's own lines go through the root handlers set up above, so
    # they reach /logs too instead of only uvicorn's private stderr handler.
    uvicorn.run(app, host=args.host, port=args.port, log_config=None, access_log=False)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="sagg")  # usage reads as `sagg interop ...`
    sub = parser.add_subparsers(dest="command", required=True)
    add_interop_parser(sub)
    # `python -m deploy.interop ROLE ...` reads as `sagg interop ROLE ...`.
    args = parser.parse_args(["interop", *(sys.argv[1:] if argv is None else argv)])
    code: int = args.func(args)
    return code
