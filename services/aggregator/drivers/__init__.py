"""The leader's job drivers (DAP-09 §4.5.1.1, §4.6): loops that lease rows, do a bounded unit of
work and commit. Several processes may run them against one PostgreSQL store."""
