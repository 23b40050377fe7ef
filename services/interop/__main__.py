"""``python -m services.interop aggregator|collector|client --port P``."""

import sys

from services.interop.cli import main

if __name__ == "__main__":
    sys.exit(main())
