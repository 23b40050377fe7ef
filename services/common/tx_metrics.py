"""Metrics of named database transactions, after Janus's ``run_tx`` metrics.

Process-wide, on prometheus_client's default `REGISTRY` (the services' ``GET /metrics`` exposes
it beside their per-app collectors). Per transaction name (label ``tx``: `Database.run`'s first
argument):

- ``sagg_db_transactions_total{tx, outcome}``: finished runs; ``committed``, ``rolled_back``
  (the body raised, e.g. a lost lease, and the transaction was rolled back) or ``error`` (the
  database failed it: retries exhausted or a non-transient engine error);
- ``sagg_db_transaction_retries_total{tx}``: attempts retried after a transient failure
  (busy store, serialization failure, lost connection);
- ``sagg_db_transaction_duration_seconds{tx}``: wall time of a run, retries included;
- ``sagg_db_transaction_cpu_seconds_total{tx}``: CPU time of the thread that ran them, retries
  included (on SQLite the store's own work runs there too: its statements, the commit's WAL
  writes and checkpoints; on PostgreSQL that runs in the server's processes).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Final

from prometheus_client import Counter, Histogram

from services.common.metric_children import child

COMMITTED: Final = "committed"
ROLLED_BACK: Final = "rolled_back"
ERROR: Final = "error"

TRANSACTIONS: Final = Counter(
    "sagg_db_transactions",
    "Named database transactions run, by outcome.",
    ("tx", "outcome"),
)
RETRIES: Final = Counter(
    "sagg_db_transaction_retries",
    "Attempts of named database transactions retried after a transient failure.",
    ("tx",),
)
DURATION: Final = Histogram(
    "sagg_db_transaction_duration_seconds",
    "Wall time of named database transactions, retries included.",
    ("tx",),
)

CPU: Final = Counter(
    "sagg_db_transaction_cpu_seconds",
    "CPU seconds of the threads running named database transactions, retries included.",
    ("tx",),
)


def retried(name: str) -> None:
    child(RETRIES, name).inc()


@contextmanager
def observe(name: str, database_errors: tuple[type[BaseException], ...]) -> Iterator[None]:
    """Time one run of transaction `name` and count how it ended: committed when the block
    returns, error when it raises one of `database_errors`, rolled back otherwise."""
    start = time.perf_counter()
    cpu = time.thread_time()
    try:
        yield
    except database_errors:
        child(TRANSACTIONS, name, ERROR).inc()
        raise
    except BaseException:
        child(TRANSACTIONS, name, ROLLED_BACK).inc()
        raise
    else:
        child(TRANSACTIONS, name, COMMITTED).inc()
    finally:
        child(DURATION, name).observe(time.perf_counter() - start)
        child(CPU, name).inc(time.thread_time() - cpu)
