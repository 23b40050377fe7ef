"""The device's audit log: every query answered or refused (with the reason) and every report
sent, with what left the device (000 §4: the user can inspect what was shared).

Entries never hold raw data: for a sent report, the task, report id, time, sizes and the
randomized measurement (the VDAF measurement, already locally differentially private).
Entries are written inside the transaction of the action they describe, so the log and the
state cannot disagree.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass
from typing import Any, Literal

from client_sdk.storage import StateDb

__all__ = ["AuditEntry", "AuditKind", "AuditLog"]

AuditKind = Literal["answered", "not_sampled", "refused", "sent", "failed"]


@dataclass(frozen=True, slots=True)
class AuditEntry:
    time: int
    kind: str
    recipe_id: str | None
    version: int | None
    task_id: str | None
    report_id: str | None
    detail: dict[str, Any]


class AuditLog:
    def __init__(self, db: StateDb) -> None:
        self._db = db

    @staticmethod
    def write(
        conn: sqlite3.Connection,
        device: int,
        time: int,
        kind: AuditKind,
        *,
        recipe_id: str | None = None,
        version: int | None = None,
        task_id: str | None = None,
        report_id: str | None = None,
        **detail: Any,
    ) -> None:
        """Append an entry of `device` (`StateDb.device`) on `conn` (inside the caller's
        transaction)."""
        conn.execute(
            "INSERT INTO audit (device, time, kind, recipe_id, version, task_id, report_id, "
            "detail) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (device, time, kind, recipe_id, version, task_id, report_id, json.dumps(detail)),
        )

    def record(self, time: int, kind: AuditKind, **fields: Any) -> None:
        with self._db.transaction() as conn:
            self.write(conn, self._db.device, time, kind, **fields)

    def entries(self, kind: AuditKind | None = None) -> list[AuditEntry]:
        query = (
            "SELECT time, kind, recipe_id, version, task_id, report_id, detail FROM audit "
            "WHERE device = ?"
        )
        args: tuple[Any, ...] = (self._db.device,)
        if kind is not None:
            query += " AND kind = ?"
            args += (kind,)
        with self._db.lock:
            rows = self._db.conn.execute(query + " ORDER BY id", args).fetchall()
        return [AuditEntry(r[0], r[1], r[2], r[3], r[4], r[5], json.loads(r[6])) for r in rows]
