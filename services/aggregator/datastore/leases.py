"""Leases on leader jobs (aggregation and collection), shared by any number of driver
processes on one store: a lease is a token and an expiry; a worker whose lease was taken over
finds its token gone and drops the work (`LeaseLostError`)."""

from __future__ import annotations

import secrets

from services.aggregator.datastore.base import StoreBase
from services.aggregator.datastore.records import Lease, LeaseLostError
from services.aggregator.datastore.states import CollectionState, JobState
from services.common.db import Row, Tx


def leased_row(tx: Tx, table: str, lease: Lease, columns: str = "*") -> Row:
    """The job's row (those `columns` of it) while `lease` still holds it, else
    `LeaseLostError`."""
    row = tx.query_one(
        f"SELECT {columns}, lease_token FROM {table} WHERE task_id = :t AND job_id = :j",
        {"t": lease.task_id, "j": lease.job_id},
    )
    if row is None or row["lease_token"] is None or bytes(row["lease_token"]) != lease.token:
        raise LeaseLostError(table)
    return row


def check_lease(tx: Tx, table: str, lease: Lease) -> None:
    leased_row(tx, table, lease, "job_id")


class LeaseStore(StoreBase):
    def acquire_aggregation_jobs(self, now: int, lease_duration: int, limit: int) -> list[Lease]:
        return self._acquire(
            "aggregation_jobs",
            "role = 'leader' AND state = :s",
            {"s": JobState.IN_PROGRESS},
            now,
            lease_duration,
            limit,
        )

    def acquire_collection_jobs(self, now: int, lease_duration: int, limit: int) -> list[Lease]:
        return self._acquire(
            "collection_jobs",
            "state IN (:pending, :collecting)",
            {"pending": CollectionState.PENDING, "collecting": CollectionState.COLLECTING},
            now,
            lease_duration,
            limit,
        )

    def _acquire(
        self,
        table: str,
        where: str,
        states: dict[str, str],
        now: int,
        lease_duration: int,
        limit: int,
    ) -> list[Lease]:
        # Most looks find nothing due: a plain read says so for a fraction of the claiming
        # transaction's cost (`Database.read`).
        due = self.db.read(
            f"due_{table}",
            f"SELECT 1 AS due FROM {table} WHERE {where} AND lease_expiry <= :now LIMIT 1",
            {"now": now, **states},
        )
        if not due:
            return []
        token = secrets.token_bytes(16)
        sql = (
            f"UPDATE {table} SET lease_expiry = :exp, lease_token = :tok,"
            " lease_attempts = lease_attempts + 1"
            f" WHERE (task_id, job_id) IN (SELECT task_id, job_id FROM {table}"
            f" WHERE {where} AND lease_expiry <= :now ORDER BY lease_expiry LIMIT :n"
            f" {self.db.dialect.skip_locked})"
            " RETURNING task_id, job_id, lease_attempts"
        )
        rows = self.db.run(
            f"acquire_{table}",
            lambda tx: tx.query(
                sql,
                {
                    "exp": now + lease_duration,
                    "tok": token,
                    "now": now,
                    "n": limit,
                    **states,
                },
            ),
        )
        return [
            Lease(bytes(r["task_id"]), bytes(r["job_id"]), token, int(r["lease_attempts"]))
            for r in rows
        ]

    def release_aggregation_job(
        self, lease: Lease, retry_at: int, *, count_attempt: bool = True
    ) -> None:
        """Give the job back for a later attempt (the helper was unreachable, say); without
        `count_attempt` the attempt does not count towards abandoning the job."""
        self._release("aggregation_jobs", lease, retry_at, refund=not count_attempt)

    def release_collection_job(self, lease: Lease, retry_at: int, *, count_attempt: bool) -> None:
        self._release("collection_jobs", lease, retry_at, refund=not count_attempt)

    def _release(self, table: str, lease: Lease, retry_at: int, refund: bool = False) -> None:
        def body(tx: Tx) -> None:
            check_lease(tx, table, lease)
            tx.execute(
                f"UPDATE {table} SET lease_expiry = :at, lease_token = NULL,"
                " lease_attempts = lease_attempts - :refund WHERE task_id = :t AND job_id = :j",
                {"at": retry_at, "t": lease.task_id, "j": lease.job_id, "refund": int(refund)},
            )

        self.db.run(f"release_{table}", body)
