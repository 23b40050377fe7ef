"""`python -m services.aggregator`: serve with settings from SAGG_AGGREGATOR_* variables."""

from services.aggregator.server import serve
from services.aggregator.settings import AggregatorSettings

if __name__ == "__main__":
    serve(AggregatorSettings())
