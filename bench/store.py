"""The leader's upload transaction as its store grows (#15): CPU per report of
`Datastore.put_reports`, the upload writer's group commit (which also makes the group's
aggregation jobs and keeps their shares, `job_shares`), into a store that already holds N
reports of the task, on SQLite and on PostgreSQL.

Each stored report adds a random 16-byte id to the task's anti-replay set, the primary key
(task_number, report_id) of ``client_reports``. Once that index has more leaf pages than a commit
has reports, every new id lands on a page of its own and the commit writes each such page whole
(SQLite: a WAL frame, later a checkpoint write; PostgreSQL: the page in its WAL after each
checkpoint), so the cost per report climbs with the store until then. `bench.deployment`'s
cases each start from empty stores and do not see it.

The groups are of `GROUP` reports, what the upload writer commits at a time under
`bench.deployment`'s DAP-19 load, with the shares of a Histogram(100) VDAF-20 report (sharded
here; the helper's with HPKE's encapsulated key and tag); the stores are filled beforehand with
reports of empty shares in jobs, as a leader's are once their jobs finish. Jobs are made with
the aggregator's default sizes. CPU is the process's, user and system: the write calls and
page copies are the point. Run alone with `python -m bench.store [--sizes 0,100000,500000]
[--stores sqlite,postgres] [--groups G]`.
"""

from __future__ import annotations

import argparse
import os
import secrets
import shutil
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path

from bench.common import Result, print_table
from bench.deployment import (
    POSTGRES_SERVER,
    machine_cpu_seconds,
    postgres_available,
    postgres_create,
    postgres_drop,
)
from bench.vdaf import CTX_20
from services.aggregator.batches import bucket_key
from services.aggregator.datastore import Datastore, JobSizes, NewReport
from services.aggregator.settings import AggregatorSettings
from services.common.db import Database
from shared.vdaf import prio3_20

#: Reports per upload transaction (`bench.deployment`'s "uploads per commit", DAP-19 case).
GROUP = 870
#: Reports per transaction while filling a store.
FILL_GROUP = 10_000
#: Stored reports before the measured groups, by default.
SIZES = (0, 100_000, 500_000)
#: Measured groups per store size.
GROUPS = 20
#: Bytes HPKE adds to a sealed share: the encapsulated X25519 key and the AES-GCM tag.
_HPKE_OVERHEAD = 32 + 16
_TIME_PRECISION = 3600


def _job_sizes() -> JobSizes:
    fields = AggregatorSettings.model_fields
    return JobSizes(
        int(fields["min_job_size"].default),
        int(fields["max_job_size"].default),
        int(fields["upload_job_group_min"].default),
    )


def _share_sizes() -> tuple[int, int, int]:
    """(public share, leader input share, sealed helper share) bytes of one Histogram(100)
    VDAF-20 report."""
    vdaf = prio3_20.prio3_histogram(100, 10)
    public, shares = vdaf.shard(
        7, secrets.token_bytes(16), secrets.token_bytes(vdaf.RAND_SIZE), CTX_20
    )
    return len(public), len(shares[0]), len(shares[1]) + _HPKE_OVERHEAD


def _reports(task_id: bytes, count: int, at: int, sizes: tuple[int, int, int]) -> list[NewReport]:
    key = bucket_key(at, _TIME_PRECISION)
    public, leader, helper = (secrets.token_bytes(n) for n in sizes)
    return [
        NewReport(task_id, secrets.token_bytes(16), at, public, leader, helper, key, at)
        for _ in range(count)
    ]


@contextmanager
def _store(kind: str) -> Iterator[Datastore]:
    """A fresh, migrated store of `kind`, dropped afterwards."""
    with ExitStack() as cleanup:
        if kind == "sqlite":
            work = Path(tempfile.mkdtemp(prefix="sagg-bench-store-"))
            cleanup.callback(shutil.rmtree, work, ignore_errors=True)
            url = f"sqlite:///{work / 'leader.db'}"
        else:
            name = f"sagg_bench_store_{os.getpid()}_{secrets.token_hex(4)}"
            postgres_create([name])
            cleanup.callback(postgres_drop, [name])
            url = f"{POSTGRES_SERVER}/{name}"
        db = Database.open(url)
        cleanup.callback(db.close)
        ds = Datastore(db, shards=1)
        ds.migrate()
        yield ds


def measure(
    kind: str, stored: int, groups: int, sizes: tuple[int, int, int]
) -> tuple[float, float]:
    """CPU seconds per report of `groups` upload transactions into a `kind` store holding
    `stored` reports of the task: this process's, and the whole machine's (PostgreSQL's
    server processes, the kernel's writeback)."""
    task_id = secrets.token_bytes(32)
    jobs = _job_sizes()
    at = 1_700_000_000
    with _store(kind) as ds:
        # The task's row: its number keys its reports (`task_numbers`).
        ds.put_task(task_id, "leader", {}, bytes(32), None, None, at)
        for start in range(0, stored, FILL_GROUP):
            count = min(FILL_GROUP, stored - start)
            ds.put_reports(_reports(task_id, count, at, (0, 0, 0)), (), jobs)
        batches = [_reports(task_id, GROUP, at, sizes) for _ in range(groups)]
        cpu, machine = time.process_time(), machine_cpu_seconds()
        for batch in batches:
            outcomes = ds.put_reports(batch, (), jobs)
            if outcomes != ["stored"] * len(batch):
                raise RuntimeError(f"an upload was not stored: {set(outcomes)}")
        reports = groups * GROUP
        held = ds.count_rows("client_reports", task_id)
        if held != stored + reports:
            raise RuntimeError(f"the store holds {held} reports, not {stored + reports}")
        return (time.process_time() - cpu) / reports, (machine_cpu_seconds() - machine) / reports


def run(
    stores: Sequence[str] = ("sqlite", "postgres"),
    store_sizes: Sequence[int] = SIZES,
    groups: int = GROUPS,
) -> list[Result]:
    sizes = _share_sizes()
    results: list[Result] = []
    for kind in stores:
        if kind == "postgres" and not postgres_available():
            print(f"bench.store: no PostgreSQL at {POSTGRES_SERVER}, skipped")
            continue
        first = None
        for stored in store_sizes:
            cpu, machine = measure(kind, stored, groups, sizes)
            first = cpu if first is None else first
            case = f"{kind}, {stored:,} stored"
            results += [
                Result("store", case, "upload transaction, CPU", cpu * 1e6, "µs/report"),
                Result("store", case, f"against {store_sizes[0]:,} stored", cpu / first, "x"),
                Result("store", case, "whole machine, CPU", machine * 1e6, "µs/report"),
            ]
    return results


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--stores", default="sqlite,postgres")
    parser.add_argument("--sizes", default=",".join(str(n) for n in SIZES))
    parser.add_argument("--groups", type=int, default=GROUPS)
    args = parser.parse_args(argv)
    results = run(args.stores.split(","), [int(n) for n in args.sizes.split(",")], args.groups)
    print_table(
        results,
        f"The leader's upload transaction: {GROUP} reports a commit, {args.groups} commits a size",
    )


if __name__ == "__main__":
    main()
