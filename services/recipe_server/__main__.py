"""`python -m services.recipe_server`: run the recipe server with `SAGG_RECIPE_SERVER_*`."""

from __future__ import annotations

import logging
import sys

import uvicorn
from pydantic import ValidationError

from services.recipe_server.app import create_app
from services.recipe_server.settings import RecipeServerSettings

__all__ = ["main", "serve"]


def serve(settings: RecipeServerSettings) -> None:
    """Run in the foreground until SIGINT/SIGTERM."""
    logging.basicConfig(
        level=settings.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    uvicorn.run(
        create_app(settings),
        host=settings.host,
        port=settings.port,
        log_level=settings.log_level.lower(),
        access_log=False,
    )


def main() -> int:
    try:
        settings = RecipeServerSettings()
    except ValidationError as exc:
        problems = "; ".join(
            ("SAGG_RECIPE_SERVER_" + str(e["loc"][0]).upper() + ": " if e["loc"] else "")
            + str(e["msg"])
            for e in exc.errors()
        )
        print(f"recipe server: invalid settings: {problems}", file=sys.stderr)
        return 2
    serve(settings)
    return 0


if __name__ == "__main__":
    sys.exit(main())
