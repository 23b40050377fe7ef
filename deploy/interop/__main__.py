"""``python -m deploy.interop aggregator|collector|client --port P``."""

import sys

from deploy.interop.cli import main

if __name__ == "__main__":
    sys.exit(main())
