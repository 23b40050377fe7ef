"""``python -m deploy.cli``: the `sagg` command."""

import sys

from deploy.cli import main

if __name__ == "__main__":
    sys.exit(main())
