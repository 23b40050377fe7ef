"""`python -m services.aggregator`: serve with settings from SAGG_AGGREGATOR_* variables."""

from __future__ import annotations

import sys

from services.aggregator.server import serve
from services.aggregator.settings import AggregatorSettings
from services.common.entry import settings_from_env

__all__ = ["main"]


def main() -> int:
    """Exit 2 with one line on stderr for bad settings (a short admin token, say)."""
    settings = settings_from_env(AggregatorSettings, "SAGG_AGGREGATOR_", "aggregator")
    if settings is None:
        return 2
    serve(settings)
    return 0


if __name__ == "__main__":
    sys.exit(main())
