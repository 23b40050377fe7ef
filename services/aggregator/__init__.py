"""The DAP-09 aggregator service: one process serving many tasks as leader or helper."""
