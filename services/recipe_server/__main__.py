"""`python -m services.recipe_server`: run the recipe server with `SAGG_RECIPE_SERVER_*`."""

from __future__ import annotations

import sys

from services.common.entry import run_service, settings_from_env
from services.recipe_server.app import create_app
from services.recipe_server.settings import RecipeServerSettings

__all__ = ["main", "serve"]


def serve(settings: RecipeServerSettings) -> None:
    """Run in the foreground until SIGINT/SIGTERM."""
    run_service(
        create_app(settings), host=settings.host, port=settings.port, log_level=settings.log_level
    )


def main() -> int:
    settings = settings_from_env(RecipeServerSettings, "SAGG_RECIPE_SERVER_", "recipe server")
    if settings is None:
        return 2
    serve(settings)
    return 0


if __name__ == "__main__":
    sys.exit(main())
