"""Task numbers: a task's place in ``client_reports``, instead of its 32-byte id (migration 12).

The anti-replay key (task, report id) takes a B-tree insert at a random place for every report
on both aggregators, and each leaf a commit touches is written to the WAL and checkpointed
again. With a number in every entry instead of the id, a leaf holds more than twice as
many entries, so a commit writes fewer pages (#15, `bench.store`'s upload transaction on
SQLite: 16.2 -> 12.6 us a report with 20,000 stored, 22 -> 17.2 with 80,000). A task gets its
number when it is created, from `task_numbers`, which never issues one twice: no row of a
deleted task can be taken for a later task's.
"""

from __future__ import annotations

from typing import Final

from services.aggregator.datastore.records import TaskGoneError
from services.common.db import Tx

#: The number of the task whose id is the parameter ``:t``, inside a statement: for the
#: statements that run once in a while. NULL, which matches no row, once the task is deleted.
TASK_NUMBER_OF: Final = "(SELECT number FROM tasks WHERE task_id = :t)"
#: The tables keyed by task number; the other per-task tables are keyed by task id.
NUMBERED: Final = frozenset({"client_reports"})


def task_number(tx: Tx, task_id: bytes) -> int:
    """The task's number, read in this transaction (the hot paths read it once for all of a
    transaction's rows), so the reports of a task deleted meanwhile cannot be stored."""
    row = tx.query_one(f"SELECT {TASK_NUMBER_OF} AS number", {"t": task_id})
    if row is None or row["number"] is None:
        raise TaskGoneError("the task was deleted")
    return int(row["number"])


def task_key(table: str) -> str:
    """The condition that picks task ``:t``'s rows of a per-task table."""
    return f"task_number = {TASK_NUMBER_OF}" if table in NUMBERED else "task_id = :t"
