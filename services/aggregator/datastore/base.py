"""What every part of the `Datastore` holds: the database, the shard count, the crypter, the
reports of the leader jobs this process just committed (`fresh_jobs`), a SQLite store's job
share files (`job_share_files`) and the doorbells that tell this process's drivers it
committed jobs for them (`services.common.doorbell`)."""

from __future__ import annotations

import secrets

from services.aggregator.datastore.fresh_jobs import FreshJobs
from services.aggregator.datastore.job_share_files import JobShareFiles
from services.common.crypter import Crypter
from services.common.db import Database, Params, Row
from services.common.doorbell import Doorbell


class StoreBase:
    """The state the datastore's parts share; each public method is one named transaction."""

    def __init__(
        self,
        db: Database,
        *,
        shards: int = 8,
        crypter: Crypter | None = None,
        fresh_job_bytes: int = 0,
    ) -> None:
        self.db = db
        self._shards = shards
        #: For this process's own aggregation driver (0: it runs none here).
        self._fresh = FreshJobs(fresh_job_bytes)
        #: Where a SQLite store keeps the shares of the jobs its upload writer makes.
        store = db.file_path
        self._share_files = None if store is None else JobShareFiles.beside(store)
        #: Seals the secret columns: VDAF verify keys, the leader's helper token, HPKE keys.
        self._crypter = crypter or Crypter()
        #: Rung once a transaction that made leader aggregation jobs, or a collection job,
        #: has committed.
        self.aggregation_jobs_made = Doorbell()
        self.collection_jobs_made = Doorbell()

    def _shard(self) -> int:
        """A random shard row of the sharded counters: concurrent writers rarely meet."""
        return secrets.randbelow(self._shards)

    def _statement(self, name: str, sql: str, params: Params) -> int:
        """One statement as transaction `name`; the number of rows it changed."""
        return self.db.run(name, lambda tx: tx.execute(sql, params))

    def _job_row(self, name: str, table: str, task_id: bytes, job_id: bytes) -> Row | None:
        """A job's row (aggregation or collection job), read in transaction `name`."""
        return self.db.run(
            name,
            lambda tx: tx.query_one(
                f"SELECT * FROM {table} WHERE task_id = :t AND job_id = :j",
                {"t": task_id, "j": job_id},
            ),
        )
