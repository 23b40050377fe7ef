"""`python -m services.collector`: run the collector with `SAGG_COLLECTOR_*` settings."""

from __future__ import annotations

import sys

from services.collector.app import create_app
from services.collector.settings import CollectorSettings
from services.common.entry import service_main

__all__ = ["main"]


def main() -> int:
    return service_main(CollectorSettings, "SAGG_COLLECTOR_", "collector", create_app)  # type: ignore[arg-type]


if __name__ == "__main__":
    sys.exit(main())
