"""`python -m services.aggregator.drivers`: only the leader's drivers, settings from
SAGG_AGGREGATOR_* variables (the HTTP ones are ignored)."""

from __future__ import annotations

import sys

from services.aggregator.server import drive
from services.aggregator.settings import AggregatorSettings
from services.common.entry import service_main

__all__ = ["main"]


def main() -> int:
    """Exit 2 with one line on stderr for bad settings, as the API process does."""
    return service_main(AggregatorSettings, "aggregator drivers", drive)


if __name__ == "__main__":
    sys.exit(main())
