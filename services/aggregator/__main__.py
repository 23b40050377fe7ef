"""`python -m services.aggregator`: serve with settings from SAGG_AGGREGATOR_* variables."""

from __future__ import annotations

import sys

from services.aggregator.server import serve
from services.aggregator.settings import AggregatorSettings
from services.common.entry import service_main

__all__ = ["main", "serve"]


def main() -> int:
    """Exit 2 with one line on stderr for bad settings (a short admin token, say)."""
    return service_main(AggregatorSettings, "aggregator", serve)


if __name__ == "__main__":
    sys.exit(main())
