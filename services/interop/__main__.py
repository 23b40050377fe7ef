"""``python -m services.interop aggregator|collector|client --port P``."""

from services.interop.cli import main

if __name__ == "__main__":
    main()
