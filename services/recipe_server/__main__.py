"""`python -m services.recipe_server`: run the recipe server with `SAGG_RECIPE_SERVER_*`."""

from __future__ import annotations

import sys
from functools import partial

from services.common.entry import serve_app, service_main
from services.recipe_server.app import create_app
from services.recipe_server.settings import RecipeServerSettings

__all__ = ["main", "serve"]


#: Serve until SIGINT/SIGTERM (`sagg serve` calls it with settings of its own).
serve = partial(serve_app, create_app)


def main() -> int:
    return service_main(RecipeServerSettings, "recipe server", serve)


if __name__ == "__main__":
    sys.exit(main())
