"""`python -m services.aggregator.drivers`: only the leader's drivers, settings from
SAGG_AGGREGATOR_* variables (the HTTP ones are ignored)."""

from __future__ import annotations

import sys

from services.aggregator.server import drive
from services.aggregator.settings import AggregatorSettings
from services.common.entry import settings_from_env

__all__ = ["main"]


def main() -> int:
    """Exit 2 with one line on stderr for bad settings, as the API process does."""
    settings = settings_from_env(AggregatorSettings, "SAGG_AGGREGATOR_", "aggregator drivers")
    if settings is None:
        return 2
    drive(settings)
    return 0


if __name__ == "__main__":
    sys.exit(main())
