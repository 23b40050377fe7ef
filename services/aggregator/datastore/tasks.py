"""Provisioned tasks (DAP-09 §4.2 task parameters), their secrets sealed by the crypter, each
with the number it is given at creation (`task_numbers`)."""

from __future__ import annotations

import json
from typing import Any

from services.aggregator.datastore.base import StoreBase
from services.aggregator.datastore.records import TaskRecord, opt_bytes
from services.aggregator.datastore.schema import TASK_TABLES
from services.aggregator.datastore.task_numbers import task_key
from services.common.db import Row, Tx


class TaskStore(StoreBase):
    def put_task(
        self,
        task_id: bytes,
        role: str,
        definition: dict[str, Any],
        aggregator_token_hash: bytes,
        collector_token_hash: bytes | None,
        helper_token: str | None,
        now: int,
    ) -> str:
        """'created', 'exists' (identical) or 'conflict' (a different definition).

        Absent and null optional members compare equal, so a definition stored before a
        member was added (e.g. `rate_validation`) is still identical to its re-sent copy."""
        stored = dict(definition)
        if "vdaf_verify_key" in stored:
            stored["vdaf_verify_key"] = self._crypter.seal_text(
                "tasks", "vdaf_verify_key", task_id, stored["vdaf_verify_key"]
            )
        sealed_helper_token = (
            None
            if helper_token is None
            else self._crypter.seal_text("tasks", "helper_token", task_id, helper_token)
        )

        def body(tx: Tx) -> str:
            row = tx.query_one("SELECT * FROM tasks WHERE task_id = :t", {"t": task_id})
            if row is not None:
                existing = self._task_record(row)
                same = (
                    _set_members(existing.definition) == _set_members(definition)
                    and existing.role == role
                    and existing.aggregator_token_hash == aggregator_token_hash
                    and existing.collector_token_hash == collector_token_hash
                    and existing.helper_token == helper_token
                )
                return "exists" if same else "conflict"
            tx.execute("UPDATE task_numbers SET last = last + 1")
            tx.execute(
                "INSERT INTO tasks (task_id, role, definition, aggregator_token_hash,"
                " collector_token_hash, helper_token, created_at, number)"
                " VALUES (:t, :r, :d, :ah, :ch, :ht, :now, (SELECT last FROM task_numbers))",
                {
                    "t": task_id,
                    "r": role,
                    "d": json.dumps(stored, sort_keys=True),
                    "ah": aggregator_token_hash,
                    "ch": collector_token_hash,
                    "ht": sealed_helper_token,
                    "now": now,
                },
            )
            return "created"

        return self.db.run("put_task", body)

    def get_task(self, task_id: bytes) -> TaskRecord | None:
        row = self.db.run(
            "get_task",
            lambda tx: tx.query_one("SELECT * FROM tasks WHERE task_id = :t", {"t": task_id}),
        )
        return None if row is None else self._task_record(row)

    def task_ids(self) -> frozenset[bytes]:
        """Every provisioned task's id (what an unknown id is checked against in memory)."""
        rows = self.db.run("task_ids", lambda tx: tx.query("SELECT task_id FROM tasks"))
        return frozenset(bytes(r["task_id"]) for r in rows)

    def leader_tasks_with_waiting_reports(self) -> list[bytes]:
        """The leader tasks with reports in no job yet: what the job creator looks at. One
        index probe per task in one statement (`Database.read`), so an idle pass costs one
        round trip however many tasks there are."""
        rows = self.db.read(
            "leader_tasks_with_waiting_reports",
            "SELECT task_id FROM tasks WHERE role = 'leader' AND EXISTS (SELECT 1 FROM"
            " client_reports c WHERE c.task_number = tasks.number AND c.aggregation_started = 0)",
        )
        return [bytes(r["task_id"]) for r in rows]

    def all_tasks(self) -> list[TaskRecord]:
        rows = self.db.run("all_tasks", lambda tx: tx.query("SELECT * FROM tasks"))
        return [self._task_record(r) for r in rows]

    def delete_task(self, task_id: bytes) -> bool:
        def body(tx: Tx) -> bool:
            for table in TASK_TABLES:
                tx.execute(f"DELETE FROM {table} WHERE {task_key(table)}", {"t": task_id})
            return tx.execute("DELETE FROM tasks WHERE task_id = :t", {"t": task_id}) > 0

        deleted = self.db.run("delete_task", body)
        if self._share_files is not None:
            self._share_files.remove_task(task_id)
        return deleted

    def _task_record(self, row: Row) -> TaskRecord:
        task_id = bytes(row["task_id"])
        definition = json.loads(row["definition"])
        if "vdaf_verify_key" in definition:
            definition["vdaf_verify_key"] = self._crypter.open_text(
                "tasks", "vdaf_verify_key", task_id, definition["vdaf_verify_key"]
            )
        helper_token = row["helper_token"]
        return TaskRecord(
            task_id,
            str(row["role"]),
            definition,
            bytes(row["aggregator_token_hash"]),
            opt_bytes(row["collector_token_hash"]),
            None
            if helper_token is None
            else self._crypter.open_text("tasks", "helper_token", task_id, helper_token),
        )


def _set_members(definition: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in definition.items() if v is not None}
