"""A DAP-19 task's id from its encoded TaskConfiguration (taskprov editor's copy after -03,
paired with DAP-19; digest §11).

DAP-19 itself agrees task ids out of band (DAP §4.2). Taskprov derives the id from the
configuration bytes, `task_id = SHA-256(SHA-256("dap-taskprov task id") || task_config)`, so
that a task provisioned from one blob has one id every party computes alone, and the URL's id
proves which configuration it names. sagg gives every DAP-19 task it creates this id, so the
same task could later be announced by taskprov's `DAP-Taskprov` header unchanged.
"""

from __future__ import annotations

import hashlib
from typing import Final

from shared.dap.ids import TaskId

#: The label hashed into the task id derivation (taskprov §"Deriving the task ID").
TASK_ID_LABEL: Final = b"dap-taskprov task id"

__all__ = ["TASK_ID_LABEL", "task_id_of"]


def task_id_of(task_configuration: bytes) -> TaskId:
    """The task id of an encoded TaskConfiguration (its exact bytes, never a re-encoding)."""
    prefix = hashlib.sha256(TASK_ID_LABEL).digest()
    return TaskId(hashlib.sha256(prefix + task_configuration).digest())
