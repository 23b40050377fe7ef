"""The aggregator's schema: its migrations (``migrations/NNNN_name.sql``, applied in order by
`Database.migrate`) and the list of per-task tables.

Tables (one store serves many tasks, in either role):
- ``tasks``: the provisioned definition (secrets sealed) and the auth token hashes. The leader
  also keeps its outgoing helper token: it has to present it, so it cannot be a hash. Each task
  has a number, issued once from ``task_numbers`` (`task_numbers`).
- ``hpke_keys``: the aggregator's HPKE keys, newest first; every stored key still decrypts.
- ``client_reports``: one row per report id per task (keyed by the task's number), the
  anti-replay set (DAP-09 §4.5.1.4), kept until the task's `report_expiry_age` has passed
  (`drivers.garbage`). The leader stores the report there at upload (its decrypted input
  share, the helper's ciphertext) until it goes into a job made later, and scrubs the payload
  columns once the report is aggregated;
  the helper inserts payload-less rows as it aggregates. `received_at` is the upload time, or
  for a report the helper found too early, when it may go into a job again.
- ``aggregation_jobs``: jobs with a lease and their reports' ids and times (leader), or the
  stored request hash and response (helper, for idempotent re-sends, DAP-09 §4.5.1.2), with
  how many of the job's reports finished and failed. ``report_aggregations`` holds a row per
  report only for leader jobs made before migration 11, until they finish.
- ``leader_job_shares`` (leader): the shares of the reports of a job made at upload, in one
  row per job (`job_shares`; in a SQLite store the row's value is empty and the shares are in
  the job's file beside the store, `job_share_files`), deleted when the job finishes; its
  reports' ``client_reports`` rows carry no payload.
- ``batch_aggregations``: running aggregate shares per (task, batch key, agg param), spread
  over a few shard rows so concurrent jobs rarely write the same row; the sum over shards is
  the batch's share, its count, and the XOR checksum of its report ids.
- ``batches``: per batch key: collected flag, and for the leader's fixed_size tasks the
  outstanding batches being filled (`assigned`, `filled`).
- ``collection_jobs`` (leader) and ``aggregate_share_jobs`` (helper, the stored answer per
  batch: idempotency and the query count of DAP-09 §4.6.5.3).
- ``leader_noised_shares`` (leader, tasks with aggregator noise, 004 §5): the leader's noised
  aggregate share per batch, drawn once; every collection job of that batch reuses it, so
  repeated jobs cannot be averaged to remove the noise.
- ``spent_tokens``: the Privacy Pass token nonces this aggregator accepted, unique per (issuer
  key, redemption context); each aggregator keeps its own, so a leader cannot spend a token
  twice at the helper.
- ``rejection_counts``: per task, stage (upload or aggregation) and reason, how many reports
  were refused; spread over shard rows like the batch aggregations.
- ``batch_refusals``: per task and reason, how many collection requests were refused although
  the batch passed DAP's checks (001 §4.8 rate validation); rare, so one row each.
- ``batch_bucket_counts`` (fixed_size tasks with rate validation): reports added to each
  batch per `time_precision` bucket of their client times, in shard rows like the batch
  aggregations and written in the same transaction.
"""

from __future__ import annotations

import re
from importlib import resources
from typing import Final

from services.common.db import Migration

#: Every table holding rows of one task besides ``tasks`` itself (deleting a task empties
#: them; `Datastore.count_rows` reads them).
TASK_TABLES: Final = (
    "client_reports",
    "aggregation_jobs",
    "report_aggregations",
    "leader_job_shares",
    "batch_aggregations",
    "batches",
    "collection_jobs",
    "aggregate_share_jobs",
    "leader_noised_shares",
    "spent_tokens",
    "rejection_counts",
    "batch_refusals",
    "batch_bucket_counts",
    "deferred_aggregation_jobs",
    "aggregate_share_resources",
)

_FILE = re.compile(r"(\d{4})_[a-z0-9_]+\.sql")


def _load() -> tuple[Migration, ...]:
    """Each file is one step: its first line a ``-- name`` comment (recorded in
    ``schema_migrations``), then statements ended by ``;``."""
    steps = []
    for entry in resources.files(__package__).joinpath("migrations").iterdir():
        match = _FILE.fullmatch(entry.name)
        if match is None:
            continue
        header, _, body = entry.read_text(encoding="utf-8").partition("\n")
        statements = tuple(s.strip() for s in body.split(";") if s.strip())
        steps.append(Migration(int(match[1]), header.removeprefix("--").strip(), statements))
    return tuple(sorted(steps, key=lambda m: m.version))


MIGRATIONS: Final = _load()
