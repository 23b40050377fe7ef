"""`python -m services.recipe_server`: run the recipe server with `SAGG_RECIPE_SERVER_*`."""

from __future__ import annotations

import sys
from functools import partial

from services.common.entry import serve_app, service_main
from services.recipe_server.app import create_app
from services.recipe_server.settings import RecipeServerSettings

__all__ = ["main", "serve"]


#: `sagg serve` runs `serve` with settings of its own; `main` reads them from the environment.
serve = partial(serve_app, create_app)
main = partial(service_main, RecipeServerSettings, "recipe server", serve)

if __name__ == "__main__":
    sys.exit(main())
