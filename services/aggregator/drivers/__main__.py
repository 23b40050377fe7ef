"""`python -m services.aggregator.drivers`: only the leader's drivers, settings from
SAGG_AGGREGATOR_* variables (the HTTP ones are ignored)."""

from services.aggregator.server import drive
from services.aggregator.settings import AggregatorSettings

if __name__ == "__main__":
    drive(AggregatorSettings())
