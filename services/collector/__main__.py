"""`python -m services.collector`: run the collector with `SAGG_COLLECTOR_*` settings."""

from __future__ import annotations

import sys

from services.collector.app import create_app
from services.collector.settings import CollectorSettings
from services.common.entry import run_service, settings_from_env

__all__ = ["main", "serve"]


def serve(settings: CollectorSettings) -> None:
    """Run in the foreground until SIGINT/SIGTERM."""
    run_service(
        create_app(settings), host=settings.host, port=settings.port, log_level=settings.log_level
    )


def main() -> int:
    # Every field comes from the environment, which the type checker cannot see.
    settings = settings_from_env(
        CollectorSettings,  # type: ignore[arg-type]
        "SAGG_COLLECTOR_",
        "collector",
    )
    if settings is None:
        return 2
    serve(settings)
    return 0


if __name__ == "__main__":
    sys.exit(main())
