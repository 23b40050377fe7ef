"""A SQLite leader's job shares in files beside its store (#15): the value `job_shares` encodes
for a job the upload writer makes, kept in a file of its own instead of in its
``leader_job_shares`` row, whose value is then empty (`IN_FILE`).

Why: a Histogram(100) job of 1,000 reports holds ~3 MiB of shares. In the store that value
went through the WAL page by page, was copied again by the checkpoint, and its overflow chain
was read back page by page to free it when the job finished: 8-12 ms to store it and 4-6 ms
to delete it on this 2-core host, 12-18 us a report of the leader's CPU. As a file it is one
write and a sync (~1 ms) and one unlink (~0.2 ms).

Crash safety: the file is written and synced, and its directory synced after the rename,
inside the transaction that makes the job and before it commits, so a committed row never
names a file a crash could lose. A transaction that does not commit leaves a file no row
names; a finished job's file is unlinked after the commit that deleted its row. `sweep`
removes the files no row names once they are older than any transaction can last
(`SWEEP_AFTER_S`), so the file of a transaction still under way is never taken for one.

PostgreSQL stores keep the value in the row: their leaders may run on several hosts, and only
the database is shared.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Final

from shared.files import private_dir, read_private, write_private

__all__ = ["IN_FILE", "SWEEP_AFTER_S", "JobShareFiles"]

#: A ``leader_job_shares`` value saying the job's shares are in its file (no job is empty, so
#: no encoded value is).
IN_FILE: Final = b""
#: Age after which a file no row names is an orphan: far past the longest transaction (its
#: retries on a busy store take about a minute).
SWEEP_AFTER_S: Final = 600.0


class JobShareFiles:
    """The job share files of one store, in a 0700 directory of their own."""

    def __init__(self, directory: Path) -> None:
        self._dir = private_dir(directory)

    @classmethod
    def beside(cls, store: Path) -> JobShareFiles:
        """The files of the SQLite store at `store`."""
        return cls(store.with_name(f"{store.name}.job-shares"))

    def _path(self, task_id: bytes, job_id: bytes) -> Path:
        return self._dir / f"{task_id.hex()}.{job_id.hex()}"

    def write(self, task_id: bytes, job_id: bytes, value: bytes) -> None:
        """Store a job's value durably (synced, and its name too) before returning."""
        write_private(self._path(task_id, job_id), value)
        fd = os.open(self._dir, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def read(self, task_id: bytes, job_id: bytes) -> bytes:
        """A job's value; FileNotFoundError if it has none."""
        return read_private(self._path(task_id, job_id))

    def remove(self, task_id: bytes, job_id: bytes) -> None:
        """Forget a job's value (nothing if it has none)."""
        self._path(task_id, job_id).unlink(missing_ok=True)

    def remove_task(self, task_id: bytes) -> None:
        """Forget the values of every job of a task."""
        for path in self._dir.glob(f"{task_id.hex()}.*"):
            path.unlink(missing_ok=True)

    def sweep(self, named: Iterable[tuple[bytes, bytes]]) -> int:
        """Unlink the files older than `SWEEP_AFTER_S` (by the file system's clock: file times
        are its) whose (task id, job id) `named` lacks, and the temporary files of writes a
        crash cut short; how many."""
        cutoff = time.time() - SWEEP_AFTER_S
        old: list[Path] = []
        for path in self._dir.iterdir():
            with contextlib.suppress(FileNotFoundError):
                if path.stat().st_mtime < cutoff:
                    old.append(path)
        keep = {f"{task_id.hex()}.{job_id.hex()}" for task_id, job_id in named}
        removed = 0
        for path in old:
            if path.name not in keep:
                path.unlink(missing_ok=True)
                removed += 1
        return removed
