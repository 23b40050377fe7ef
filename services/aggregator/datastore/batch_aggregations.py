"""Batches and their running aggregates (DAP-09 §4.5-§4.6): the shard rows of
``batch_aggregations``, the collected flags of ``batches`` and the per-bucket counts of
``batch_bucket_counts``, read and written inside the callers' transactions.

A report's output share is added here in the same transaction that finishes its report
aggregation, so a restart at any point neither loses nor double-counts it. Transactions are
serializable (`services.common.db`), so the collection of a batch and a late commit into it
are ordered one way or the other, never interleaved.

Rate validation (001 §4.8) counts a batch's reports per `time_precision` bucket in one grouped
query: for time_interval tasks the bucket is the batch key (``batch_aggregations``); for
fixed_size tasks the buckets are those of the client times in the batch, each counted over
every batch of the task (``batch_bucket_counts``). The policy (`RatePolicy`) decides in the
transaction that would release the share, so a refused batch is left as it was.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from services.aggregator.batches import EMPTY_CHECKSUM, report_checksum, xor_bytes
from services.aggregator.datastore.base import StoreBase
from services.aggregator.datastore.records import (
    BatchTotals,
    BucketCount,
    RatePolicy,
    Refusal,
    ReportOutcome,
    ShareSum,
)
from services.aggregator.datastore.stats import REFUSAL_RATE_EXCEEDED, count_batch_refusal
from services.common.db import Tx
from shared.dap.messages import PrepareError


def is_collected(tx: Tx, task_id: bytes, batch_key: bytes) -> bool:
    row = tx.query_one(
        "SELECT collected FROM batches WHERE task_id = :t AND batch_key = :k",
        {"t": task_id, "k": batch_key},
    )
    return bool(row and row["collected"])


def add_outcomes(
    tx: Tx,
    task_id: bytes,
    outcomes: Sequence[ReportOutcome],
    shares: ShareSum,
    shard: int,
    *,
    check_saturation: int | None,
    bucket_precision: int | None,
) -> list[ReportOutcome]:
    """Add the successful reports' output shares to their batches, per batch key, and with
    `bucket_precision` their counts per time bucket (`batch_bucket_counts`).

    Reports into collected batches (and, with `check_saturation`, beyond that many reports
    in a batch) become failures instead. Returns the outcomes as committed."""
    final = [o.copy() for o in outcomes]
    by_key: dict[bytes, list[ReportOutcome]] = {}
    for o in final:
        if o.error is None:
            by_key.setdefault(o.batch_key, []).append(o)
    for key, members in by_key.items():
        if is_collected(tx, task_id, key):
            for o in members:
                o.error = PrepareError.BATCH_COLLECTED
            continue
        if check_saturation is not None:
            room = max(0, check_saturation - batch_totals(tx, task_id, key).report_count)
            for o in members[room:]:
                o.error = PrepareError.BATCH_SATURATED
            members = members[:room]
        if not members:
            continue
        share = shares.of_reports([o.out_index for o in members if o.out_index is not None])
        _add_to_batch(tx, task_id, key, shares, share, members, shard)
        if bucket_precision is not None:
            _count_buckets(tx, task_id, key, members, bucket_precision, shard)
    return final


def _count_buckets(
    tx: Tx, task_id: bytes, key: bytes, members: list[ReportOutcome], precision: int, shard: int
) -> None:
    counts = Counter(o.client_time - o.client_time % precision for o in members)
    tx.execute_many(
        "INSERT INTO batch_bucket_counts (task_id, batch_key, bucket, shard, report_count)"
        " VALUES (:t, :k, :b, :sh, :n) ON CONFLICT (task_id, batch_key, bucket, shard)"
        " DO UPDATE SET report_count = batch_bucket_counts.report_count + :n",
        [{"t": task_id, "k": key, "b": b, "sh": shard, "n": n} for b, n in sorted(counts.items())],
    )


def _add_to_batch(
    tx: Tx,
    task_id: bytes,
    key: bytes,
    shares: ShareSum,
    share: bytes,
    members: list[ReportOutcome],
    shard: int,
) -> None:
    params = {"t": task_id, "k": key, "ap": b"", "sh": shard}
    checksum = report_checksum(o.report_id for o in members)
    tmin = min(o.client_time for o in members)
    tmax = max(o.client_time for o in members)
    row = tx.query_one(
        "SELECT aggregate_share, report_count, checksum, time_min, time_max"
        " FROM batch_aggregations"
        " WHERE task_id = :t AND batch_key = :k AND agg_param = :ap AND shard = :sh",
        params,
    )
    if row is None:
        tx.execute(
            "INSERT INTO batch_aggregations (task_id, batch_key, agg_param, shard,"
            " aggregate_share, report_count, checksum, time_min, time_max)"
            " VALUES (:t, :k, :ap, :sh, :s, :c, :cs, :tmin, :tmax)",
            {**params, "s": share, "c": len(members), "cs": checksum, "tmin": tmin, "tmax": tmax},
        )
        return
    tx.execute(
        "UPDATE batch_aggregations SET aggregate_share = :s, report_count = :c,"
        " checksum = :cs, time_min = :tmin, time_max = :tmax"
        " WHERE task_id = :t AND batch_key = :k AND agg_param = :ap AND shard = :sh",
        {
            **params,
            "s": shares.merge([bytes(row["aggregate_share"]), share]),
            "c": int(row["report_count"]) + len(members),
            "cs": xor_bytes(bytes(row["checksum"]), checksum),
            "tmin": min(int(row["time_min"]), tmin),
            "tmax": max(int(row["time_max"]), tmax),
        },
    )


def batch_totals(tx: Tx, task_id: bytes, lo: bytes, hi: bytes | None = None) -> BatchTotals:
    """The shard rows of batch keys in [lo, hi) (just `lo` when hi is None), summed up but
    for the shares, which stay encoded."""
    if hi is None:
        rows = tx.query(
            "SELECT aggregate_share, report_count, checksum, time_min, time_max"
            " FROM batch_aggregations WHERE task_id = :t AND batch_key = :lo",
            {"t": task_id, "lo": lo},
        )
    else:
        rows = tx.query(
            "SELECT aggregate_share, report_count, checksum, time_min, time_max"
            " FROM batch_aggregations"
            " WHERE task_id = :t AND batch_key >= :lo AND batch_key < :hi",
            {"t": task_id, "lo": lo, "hi": hi},
        )
    checksum = EMPTY_CHECKSUM
    for r in rows:
        checksum = xor_bytes(checksum, bytes(r["checksum"]))
    return BatchTotals(
        tuple(bytes(r["aggregate_share"]) for r in rows),
        sum(int(r["report_count"]) for r in rows),
        checksum,
        min((int(r["time_min"]) for r in rows), default=None),
        max((int(r["time_max"]) for r in rows), default=None),
    )


def busiest_bucket(
    tx: Tx, task_id: bytes, lo: bytes, hi: bytes, fixed_size: bool
) -> BucketCount | None:
    """The fullest time bucket the batch [lo, hi) has reports in, or None for an empty batch
    (module docstring). A fixed_size batch is `lo`, its counts are in `batch_bucket_counts`."""
    if not fixed_size:
        row = tx.query_one(
            "SELECT batch_key, SUM(report_count) AS n FROM batch_aggregations"
            " WHERE task_id = :t AND batch_key >= :lo AND batch_key < :hi"
            " GROUP BY batch_key ORDER BY n DESC, batch_key LIMIT 1",
            {"t": task_id, "lo": lo, "hi": hi},
        )
        if row is None:
            return None
        return BucketCount(int.from_bytes(bytes(row["batch_key"]), "big"), int(row["n"]))
    row = tx.query_one(
        "SELECT bucket, SUM(report_count) AS n FROM batch_bucket_counts"
        " WHERE task_id = :t AND bucket IN (SELECT bucket FROM batch_bucket_counts"
        " WHERE task_id = :t AND batch_key = :k)"
        " GROUP BY bucket ORDER BY n DESC, bucket LIMIT 1",
        {"t": task_id, "k": lo},
    )
    return None if row is None else BucketCount(int(row["bucket"]), int(row["n"]))


def rate_refusal(
    tx: Tx, task_id: bytes, lo: bytes, hi: bytes, fixed_size: bool, rate: RatePolicy | None
) -> Refusal | None:
    """The `rate` policy's refusal of the batch [lo, hi), counted; None to release it."""
    if rate is None:
        return None
    busiest = busiest_bucket(tx, task_id, lo, hi, fixed_size)
    refusal = None if busiest is None else rate.refusal(busiest)
    if refusal is not None:
        count_batch_refusal(tx, task_id, REFUSAL_RATE_EXCEEDED)
    return refusal


def mark_collected(tx: Tx, task_id: bytes, lo: bytes, hi: bytes, now: int) -> None:
    """Mark every batch key in [lo, hi) that holds reports, plus `lo` itself, collected."""
    keys = {lo}
    keys |= {
        bytes(r["batch_key"])
        for r in tx.query(
            "SELECT DISTINCT batch_key FROM batch_aggregations"
            " WHERE task_id = :t AND batch_key >= :lo AND batch_key < :hi",
            {"t": task_id, "lo": lo, "hi": hi},
        )
    }
    for key in keys:
        tx.execute(
            "INSERT INTO batches (task_id, batch_key, collected, assigned, filled, created_at)"
            " VALUES (:t, :k, 1, 0, 1, :now)"
            " ON CONFLICT (task_id, batch_key) DO UPDATE SET collected = 1, filled = 1",
            {"t": task_id, "k": key, "now": now},
        )


class BatchStore(StoreBase):
    def batch_totals(self, task_id: bytes, lo: bytes, hi: bytes) -> BatchTotals:
        return self.db.run("batch_totals", lambda tx: batch_totals(tx, task_id, lo, hi))
