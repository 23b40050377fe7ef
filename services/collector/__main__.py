"""`python -m services.collector`: run the collector with `SAGG_COLLECTOR_*` settings."""

from __future__ import annotations

import sys
from functools import partial

from services.collector.app import create_app
from services.collector.settings import CollectorSettings
from services.common.entry import serve_app, service_main

__all__ = ["main", "serve"]


#: `sagg serve` runs `serve` with settings of its own; `main` reads them from the environment.
serve = partial(serve_app, create_app)
main = partial(service_main, CollectorSettings, "collector", serve)

if __name__ == "__main__":
    sys.exit(main())
