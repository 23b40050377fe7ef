"""The DAP-09 aggregator service: one process serving many tasks as leader or helper.

`serve(settings)` runs it (what `python -m services.aggregator` and the CLI call);
`create_app(settings)` builds the ASGI app alone.
"""

from services.aggregator.app import create_app
from services.aggregator.server import serve
from services.aggregator.settings import AggregatorSettings

__all__ = ["AggregatorSettings", "create_app", "serve"]
