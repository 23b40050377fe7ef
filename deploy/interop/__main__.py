"""``python -m deploy.interop aggregator|collector|client --port P``."""

from deploy.interop.cli import main

if __name__ == "__main__":
    main()
