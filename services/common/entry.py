"""What every service's `python -m services.<name>` does: settings from the environment, logging,
uvicorn in the foreground until SIGINT/SIGTERM."""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import uvicorn
from pydantic import ValidationError

__all__ = ["run_service", "settings_from_env"]

_S = TypeVar("_S")


def run_service(app: Any, *, host: str, port: int, log_level: str) -> None:
    """Serve `app` until a signal; uvicorn finishes in-flight requests and runs lifespan exit."""
    logging.basicConfig(
        level=log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    # httpx logs every request at INFO: one line per poll or relay would drown the service's own.
    logging.getLogger("httpx").setLevel(logging.WARNING)
    # Access logs would only repeat request paths, and a path can carry task and job ids.
    uvicorn.run(app, host=host, port=port, log_level=log_level.lower(), access_log=False)


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
