"""`python -m services.recipe_server`: run the recipe server with `SAGG_RECIPE_SERVER_*`."""

from __future__ import annotations

import sys

from services.common.entry import service_main
from services.recipe_server.app import create_app
from services.recipe_server.settings import RecipeServerSettings

__all__ = ["main"]


def main() -> int:
    return service_main(RecipeServerSettings, "SAGG_RECIPE_SERVER_", "recipe server", create_app)


if __name__ == "__main__":
    sys.exit(main())
