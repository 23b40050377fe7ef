"""`python -m services.collector`: run the collector with `SAGG_COLLECTOR_*` settings."""

from __future__ import annotations

import logging
import sys

import uvicorn
from pydantic import ValidationError

from services.collector.app import create_app
from services.collector.settings import CollectorSettings

__all__ = ["main", "serve"]


def serve(settings: CollectorSettings) -> None:
    """Run the collector in the foreground until SIGINT/SIGTERM (uvicorn stops gracefully:
    in-flight requests finish and the poller's lifespan shutdown releases its work)."""
    logging.basicConfig(
        level=settings.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    # httpx logs every request at INFO; one line per poll drowns the job transitions.
    logging.getLogger("httpx").setLevel(logging.WARNING)
    app = create_app(settings)
    uvicorn.run(
        app,
        host=settings.host,
        port=settings.port,
        log_level=settings.log_level.lower(),
        # Access logs would record request paths only, but they are noise at this level.
        access_log=False,
    )


def main() -> int:
    try:
        settings = CollectorSettings()  # type: ignore[call-arg]  # fields come from the env
    except ValidationError as exc:
        # Names and messages only: the offending values may be secrets.
        problems = "; ".join(
            (f"SAGG_COLLECTOR_{str(e['loc'][0]).upper()}: " if e["loc"] else "")
            + str(e["msg"]).removeprefix("Value error, ")
            for e in exc.errors()
        )
        print(f"collector: invalid settings: {problems}", file=sys.stderr)
        return 2
    serve(settings)
    return 0


if __name__ == "__main__":
    sys.exit(main())
