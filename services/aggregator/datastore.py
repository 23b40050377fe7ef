"""Every SQL statement of the aggregator (DAP-09 §4.4-§4.6 state, digest §7.5).

Tables (one store serves many tasks, in either role):
- ``tasks``: the provisioned definition (secrets removed) and the auth token hashes. The leader
  also keeps its outgoing helper token: it has to present it, so it cannot be a hash.
- ``hpke_keys``: the aggregator's HPKE keys, newest first; every stored key still decrypts.
- ``client_reports``: one row per report id per task, the anti-replay set (DAP-09 §4.5.1.4),
  kept until the task's `report_expiry_age` has passed (`drivers.garbage`). The leader
  stores the report there at upload (its decrypted input share, the helper's ciphertext) and
  scrubs the payload columns once the report is aggregated; the helper inserts payload-less
  rows as it aggregates. `received_at` is the upload time, or for
  a report the helper found too early, when it may go into a job again.
- ``aggregation_jobs`` / ``report_aggregations``: jobs with a lease (leader) or the stored
  request hash and response (helper, for idempotent re-sends, DAP-09 §4.5.1.2).
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
  twice at the helper. A token is spent in the transaction that stores the report (leader, at
  upload) or that finishes it (helper), so a crash neither loses a spend nor counts one twice.
- ``rejection_counts``: per task, stage (upload or aggregation) and reason, how many reports
  were refused; spread over shard rows like the batch aggregations, so that rejections do not
  all serialize on one row.
- ``batch_refusals``: per task and reason, how many collection requests were refused although
  the batch passed DAP's checks (001 §4.8 rate validation); rare, so one row each.
- ``batch_bucket_counts`` (fixed_size tasks with rate validation): reports added to each
  batch per `time_precision` bucket of their client times, in shard rows like the batch
  aggregations and written in the same transaction; kept like them (garbage collection of
  old reports and jobs leaves the counts).

Rate validation (001 §4.8, `shared.dap.task.RateValidation`) counts a batch's reports per
`time_precision` bucket in one grouped query: for time_interval tasks the bucket is the batch
key (`batch_aggregations`); for fixed_size tasks the buckets are those of the client times in
the batch, each counted over every batch of the task (`batch_bucket_counts`). It runs in the
transaction that would release the share, so a refused batch is left as it was: not
collected, no query spent, no report dropped.

Crash safety: a report's output share is added to ``batch_aggregations`` in the same
transaction that finishes its report aggregation, and jobs are created in the same transaction
that marks their reports started, so a restart at any point neither loses nor double-counts a
report. Transactions are serializable (see services.common.db), so the collection of a batch
and a late commit into it are ordered one way or the other, never interleaved.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import secrets
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from services.aggregator.batches import (
    EMPTY_CHECKSUM,
    MAX_STORED_TIME,
    report_checksum,
    xor_bytes,
)
from services.common.crypter import Crypter
from services.common.db import Database, Migration, Row, Tx
from shared import hpke
from shared.dap.messages import PrepareError
from shared.dap.problems import ProblemType
from shared.vdaf.field import FieldArray
from shared.vdaf.prio3 import Prio3

# --- schema ---------------------------------------------------------------------------------

MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        1,
        "initial aggregator schema",
        (
            """CREATE TABLE tasks (
                task_id {blob} PRIMARY KEY,
                role {text} NOT NULL,
                definition {text} NOT NULL,
                aggregator_token_hash {blob} NOT NULL,
                collector_token_hash {blob},
                helper_token {text},
                created_at {bigint} NOT NULL)""",
            """CREATE TABLE hpke_keys (
                config_id {bigint} PRIMARY KEY,
                kem_id {bigint} NOT NULL, kdf_id {bigint} NOT NULL, aead_id {bigint} NOT NULL,
                public_key {blob} NOT NULL,
                private_key {blob} NOT NULL,
                state {text} NOT NULL,
                generation {bigint} NOT NULL,
                created_at {bigint} NOT NULL)""",
            """CREATE TABLE client_reports (
                task_id {blob} NOT NULL,
                report_id {blob} NOT NULL,
                client_time {bigint} NOT NULL,
                public_share {blob},
                leader_input_share {blob},
                helper_encrypted_share {blob},
                aggregation_started {bigint} NOT NULL,
                received_at {bigint} NOT NULL,
                PRIMARY KEY (task_id, report_id))""",
            """CREATE INDEX client_reports_unaggregated
                ON client_reports (task_id, aggregation_started, client_time)""",
            """CREATE TABLE aggregation_jobs (
                task_id {blob} NOT NULL,
                job_id {blob} NOT NULL,
                role {text} NOT NULL,
                agg_param {blob} NOT NULL,
                batch_id {blob},
                time_min {bigint} NOT NULL,
                time_max {bigint} NOT NULL,
                state {text} NOT NULL,
                step {bigint} NOT NULL,
                lease_expiry {bigint} NOT NULL,
                lease_token {blob},
                lease_attempts {bigint} NOT NULL,
                request_hash {blob},
                response {blob},
                created_at {bigint} NOT NULL,
                PRIMARY KEY (task_id, job_id))""",
            """CREATE INDEX aggregation_jobs_lease
                ON aggregation_jobs (role, state, lease_expiry)""",
            """CREATE TABLE report_aggregations (
                task_id {blob} NOT NULL,
                job_id {blob} NOT NULL,
                ord {bigint} NOT NULL,
                report_id {blob} NOT NULL,
                client_time {bigint} NOT NULL,
                state {text} NOT NULL,
                error {bigint},
                PRIMARY KEY (task_id, job_id, ord))""",
            """CREATE TABLE batch_aggregations (
                task_id {blob} NOT NULL,
                batch_key {blob} NOT NULL,
                agg_param {blob} NOT NULL,
                shard {bigint} NOT NULL,
                aggregate_share {blob} NOT NULL,
                report_count {bigint} NOT NULL,
                checksum {blob} NOT NULL,
                time_min {bigint} NOT NULL,
                time_max {bigint} NOT NULL,
                PRIMARY KEY (task_id, batch_key, agg_param, shard))""",
            """CREATE TABLE batches (
                task_id {blob} NOT NULL,
                batch_key {blob} NOT NULL,
                collected {bigint} NOT NULL,
                assigned {bigint} NOT NULL,
                filled {bigint} NOT NULL,
                created_at {bigint} NOT NULL,
                PRIMARY KEY (task_id, batch_key))""",
            """CREATE TABLE collection_jobs (
                task_id {blob} NOT NULL,
                job_id {blob} NOT NULL,
                request_hash {blob} NOT NULL,
                query_type {bigint} NOT NULL,
                current_batch {bigint} NOT NULL,
                agg_param {blob} NOT NULL,
                batch_key {blob},
                interval_start {bigint},
                interval_duration {bigint},
                state {text} NOT NULL,
                report_count {bigint},
                checksum {blob},
                leader_share {blob},
                time_min {bigint},
                time_max {bigint},
                result {blob},
                error {text},
                lease_expiry {bigint} NOT NULL,
                lease_token {blob},
                lease_attempts {bigint} NOT NULL,
                created_at {bigint} NOT NULL,
                PRIMARY KEY (task_id, job_id))""",
            """CREATE INDEX collection_jobs_lease ON collection_jobs (state, lease_expiry)""",
            """CREATE TABLE aggregate_share_jobs (
                task_id {blob} NOT NULL,
                batch_selector {blob} NOT NULL,
                agg_param {blob} NOT NULL,
                key_lo {blob} NOT NULL,
                key_hi {blob} NOT NULL,
                report_count {bigint} NOT NULL,
                checksum {blob} NOT NULL,
                response {blob} NOT NULL,
                created_at {bigint} NOT NULL,
                PRIMARY KEY (task_id, batch_selector, agg_param))""",
        ),
    ),
    Migration(
        2,
        "spent tokens and rejection counters",
        (
            """CREATE TABLE spent_tokens (
                token_key_id {blob} NOT NULL,
                context {blob} NOT NULL,
                nonce {blob} NOT NULL,
                task_id {blob} NOT NULL,
                report_id {blob} NOT NULL,
                spent_at {bigint} NOT NULL,
                PRIMARY KEY (token_key_id, context, nonce))""",
            """CREATE INDEX spent_tokens_task ON spent_tokens (task_id)""",
            """CREATE TABLE rejection_counts (
                task_id {blob} NOT NULL,
                stage {text} NOT NULL,
                reason {text} NOT NULL,
                shard {bigint} NOT NULL,
                count {bigint} NOT NULL,
                PRIMARY KEY (task_id, stage, reason, shard))""",
        ),
    ),
    Migration(
        3,
        "leader noised aggregate shares",
        (
            """CREATE TABLE leader_noised_shares (
                task_id {blob} NOT NULL,
                key_lo {blob} NOT NULL,
                key_hi {blob} NOT NULL,
                agg_param {blob} NOT NULL,
                report_count {bigint} NOT NULL,
                checksum {blob} NOT NULL,
                share {blob} NOT NULL,
                created_at {bigint} NOT NULL,
                PRIMARY KEY (task_id, key_lo, key_hi, agg_param))""",
        ),
    ),
    Migration(
        4,
        "spent tokens by spend time, for garbage collection",
        (
            "DROP INDEX spent_tokens_task",
            "CREATE INDEX spent_tokens_spent ON spent_tokens (task_id, spent_at)",
        ),
    ),
    Migration(
        5,
        "batch refusal counters (rate validation)",
        (
            """CREATE TABLE batch_refusals (
                task_id {blob} NOT NULL,
                reason {text} NOT NULL,
                count {bigint} NOT NULL,
                PRIMARY KEY (task_id, reason))""",
            """CREATE TABLE batch_bucket_counts (
                task_id {blob} NOT NULL,
                batch_key {blob} NOT NULL,
                bucket {bigint} NOT NULL,
                shard {bigint} NOT NULL,
                report_count {bigint} NOT NULL,
                PRIMARY KEY (task_id, batch_key, bucket, shard))""",
            """CREATE INDEX batch_bucket_counts_bucket ON batch_bucket_counts (task_id, bucket)""",
        ),
    ),
)

#: Stages of `rejection_counts`.
STAGE_UPLOAD = "upload"
STAGE_AGGREGATION = "aggregation"
#: Reasons of `rejection_counts` the datastore itself decides.
REASON_TOKEN_SPENT = "token_spent"
#: Reason of `batch_refusals`: a time bucket of the batch is above the rate limit.
REFUSAL_RATE_EXCEEDED = "rate_exceeded"
# What `put_reports` says of each upload, and the counter reason of each refusal.
UPLOAD_STORED = "stored"
UPLOAD_REPLAYED = "replayed"
UPLOAD_COLLECTED = "collected"
UPLOAD_TOKEN_SPENT = "token_spent"
_UPLOAD_REASONS = {
    UPLOAD_REPLAYED: "report_replayed",
    UPLOAD_COLLECTED: "batch_collected",
    UPLOAD_TOKEN_SPENT: REASON_TOKEN_SPENT,
}

# Job and report-aggregation states.
JOB_IN_PROGRESS = "in_progress"
JOB_FINISHED = "finished"
JOB_ABANDONED = "abandoned"
RA_START = "start"
RA_FINISHED = "finished"
RA_FAILED = "failed"
COLLECTION_PENDING = "pending"
COLLECTION_COLLECTING = "collecting"
COLLECTION_FINISHED = "finished"
COLLECTION_FAILED = "failed"
COLLECTION_DELETED = "deleted"


# --- records ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TaskRecord:
    task_id: bytes
    role: str
    definition: dict[str, Any] = field(repr=False)
    aggregator_token_hash: bytes
    collector_token_hash: bytes | None
    helper_token: str | None = field(repr=False)


@dataclass(frozen=True)
class HpkeKeyRecord:
    keypair: hpke.HpkeKeyPair
    state: str


@dataclass(frozen=True)
class Lease:
    task_id: bytes
    job_id: bytes
    token: bytes = field(repr=False)
    attempts: int


@dataclass(frozen=True)
class LeaderReport:
    """One report of a leader aggregation job, with what preparation needs."""

    ord: int
    report_id: bytes
    client_time: int
    public_share: bytes | None
    leader_input_share: bytes | None = field(repr=False)
    helper_encrypted_share: bytes | None = field(repr=False)


@dataclass(frozen=True)
class TokenSpend:
    """A verified token to record as spent: unique per (issuer key, redemption context)."""

    token_key_id: bytes
    context: bytes
    nonce: bytes = field(repr=False)


@dataclass(frozen=True)
class NewReport:
    """A validated upload to store (leader): its decrypted input share, the helper's
    ciphertext, its time bucket (time_interval tasks) and the token it spends, if any."""

    task_id: bytes
    report_id: bytes
    client_time: int
    public_share: bytes = field(repr=False)
    leader_input_share: bytes = field(repr=False)
    helper_encrypted_share: bytes = field(repr=False)
    batch_key: bytes | None
    received_at: int
    spend: TokenSpend | None = None


@dataclass
class ReportOutcome:
    """How one report of a job ended; `out_index` points into the job's output-share array.

    `spend` is the report's token, spent when the report is accepted; `reason` refines `error`
    for the rejection counters (e.g. which check gave invalid_message)."""

    report_id: bytes
    client_time: int
    batch_key: bytes
    error: PrepareError | None
    out_index: int | None = None
    spend: TokenSpend | None = None
    reason: str | None = None

    @property
    def rejection_reason(self) -> str | None:
        if self.error is None:
            return None
        return self.reason or self.error.name.lower()


@dataclass(frozen=True)
class BatchTotals:
    aggregate_share: FieldArray | None
    report_count: int
    checksum: bytes
    time_min: int | None
    time_max: int | None


@dataclass(frozen=True)
class Garbage:
    """Rows one garbage-collection pass deleted."""

    reports: int = 0
    aggregation_jobs: int = 0
    spent_tokens: int = 0

    def __add__(self, other: Garbage) -> Garbage:
        return Garbage(
            self.reports + other.reports,
            self.aggregation_jobs + other.aggregation_jobs,
            self.spent_tokens + other.spent_tokens,
        )

    @property
    def total(self) -> int:
        return self.reports + self.aggregation_jobs + self.spent_tokens


@dataclass(frozen=True)
class RateLimit:
    """What rate validation needs from the task: the bucket width and the most reports a
    bucket may hold (`RateValidation.max_reports_per_bucket`)."""

    time_precision: int
    max_reports_per_bucket: int


@dataclass(frozen=True)
class Refusal:
    """Why a batch's aggregate share is not released: the DAP problem and a detail for it."""

    problem: ProblemType
    detail: str = "batch check failed"


def _rate_refusal(limit: RateLimit, bucket: int, count: int) -> Refusal:
    return Refusal(
        ProblemType.INVALID_BATCH_SIZE,
        f"the time bucket starting at {bucket} holds {count} reports, more than the"
        f" {limit.max_reports_per_bucket} the task's rate validation allows (001 §4.8)",
    )


class LeaseLostError(Exception):
    """The job's lease expired and was taken by another worker; drop the work."""


def _hash(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


class Datastore:
    """The aggregator's persistent state; methods are units of work, each one transaction."""

    def __init__(self, db: Database, *, shards: int = 8, crypter: Crypter | None = None) -> None:
        self.db = db
        self._shards = shards
        #: Seals the secret columns: VDAF verify keys, the leader's helper token, HPKE keys.
        self._crypter = crypter or Crypter()

    def migrate(self) -> int:
        return self.db.migrate(MIGRATIONS)

    def is_migrated(self) -> bool:
        return self.db.schema_version() >= MIGRATIONS[-1].version

    # --- tasks -----------------------------------------------------------------------------

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
            tx.execute(
                "INSERT INTO tasks (task_id, role, definition, aggregator_token_hash,"
                " collector_token_hash, helper_token, created_at)"
                " VALUES (:t, :r, :d, :ah, :ch, :ht, :now)",
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

    def leader_tasks(self) -> list[TaskRecord]:
        rows = self.db.run(
            "leader_tasks", lambda tx: tx.query("SELECT * FROM tasks WHERE role = 'leader'")
        )
        return [self._task_record(r) for r in rows]

    def all_tasks(self) -> list[TaskRecord]:
        rows = self.db.run("all_tasks", lambda tx: tx.query("SELECT * FROM tasks"))
        return [self._task_record(r) for r in rows]

    def delete_task(self, task_id: bytes) -> bool:
        def body(tx: Tx) -> bool:
            for table in (
                "client_reports",
                "aggregation_jobs",
                "report_aggregations",
                "batch_aggregations",
                "batches",
                "collection_jobs",
                "aggregate_share_jobs",
                "leader_noised_shares",
                "spent_tokens",
                "rejection_counts",
                "batch_refusals",
                "batch_bucket_counts",
            ):
                tx.execute(f"DELETE FROM {table} WHERE task_id = :t", {"t": task_id})
            return tx.execute("DELETE FROM tasks WHERE task_id = :t", {"t": task_id}) > 0

        return self.db.run("delete_task", body)

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
            _opt_bytes(row["collector_token_hash"]),
            None
            if helper_token is None
            else self._crypter.open_text("tasks", "helper_token", task_id, helper_token),
        )

    def collect_garbage(
        self, task_id: bytes, *, report_horizon: int | None, token_horizon: int, limit: int
    ) -> Garbage:
        """Delete up to `limit` rows of each kind that can no longer matter (`drivers.garbage`).

        - reports timestamped before `report_horizon` (no horizon: kept forever), unless a
          leader job in progress still needs their payload; their ids leave the replay set,
          which is safe because both aggregators refuse reports that old;
        - aggregation jobs whose every report is that old, with their report aggregations,
          except leader jobs in progress;
        - spent tokens spent before `token_horizon`, which no aggregator would accept again.
        """

        def body(tx: Tx) -> Garbage:
            reports = jobs = 0
            if report_horizon is not None:
                horizon = {"t": task_id, "h": report_horizon, "n": limit}
                # `aggregation_started IN (0, 1)` lets the (task, started, time) index serve.
                reports = tx.execute(
                    "DELETE FROM client_reports WHERE task_id = :t AND report_id IN ("
                    " SELECT report_id FROM client_reports WHERE task_id = :t"
                    " AND aggregation_started IN (0, 1) AND client_time < :h"
                    " AND (aggregation_started = 0 OR leader_input_share IS NULL) LIMIT :n)",
                    horizon,
                )
                expired_jobs = (
                    "SELECT job_id FROM aggregation_jobs WHERE task_id = :t AND time_max < :h"
                    f" AND NOT (role = 'leader' AND state = '{JOB_IN_PROGRESS}') LIMIT :n"
                )
                job_ids = [r["job_id"] for r in tx.query(expired_jobs, horizon)]
                rows = [{"t": task_id, "j": job_id} for job_id in job_ids]
                tx.execute_many(
                    "DELETE FROM report_aggregations WHERE task_id = :t AND job_id = :j", rows
                )
                tx.execute_many(
                    "DELETE FROM aggregation_jobs WHERE task_id = :t AND job_id = :j", rows
                )
                jobs = len(job_ids)
            tokens = tx.execute(
                "DELETE FROM spent_tokens WHERE task_id = :t AND spent_at < :h AND nonce IN ("
                " SELECT nonce FROM spent_tokens WHERE task_id = :t AND spent_at < :h LIMIT :n)",
                {"t": task_id, "h": token_horizon, "n": limit},
            )
            return Garbage(reports, jobs, tokens)

        return self.db.run("collect_garbage", body)

    # --- HPKE keys ---------------------------------------------------------------------------

    def hpke_keys(self) -> list[HpkeKeyRecord]:
        """Every stored key, newest first."""
        rows = self.db.run(
            "hpke_keys",
            lambda tx: tx.query("SELECT * FROM hpke_keys ORDER BY generation DESC"),
        )
        return [
            HpkeKeyRecord(
                hpke.from_private_bytes(
                    int(r["config_id"]),
                    self._crypter.open(
                        "hpke_keys",
                        "private_key",
                        _config_row(r["config_id"]),
                        bytes(r["private_key"]),
                    ),
                    kem_id=int(r["kem_id"]),
                    kdf_id=int(r["kdf_id"]),
                    aead_id=int(r["aead_id"]),
                ),
                str(r["state"]),
            )
            for r in rows
        ]

    def add_hpke_key(self, now: int, *, only_if_none: bool = False) -> hpke.HpkeKeyPair | None:
        """Generate and store a key under an unused config id; it becomes the first one.

        With `only_if_none`, do nothing when a key exists (first start of a service)."""

        def body(tx: Tx) -> hpke.HpkeKeyPair | None:
            rows = tx.query("SELECT config_id, generation FROM hpke_keys")
            if only_if_none and rows:
                return None
            used = {int(r["config_id"]) for r in rows}
            if len(used) >= 256:
                # Config ids are a u8; reuse the oldest one's id.
                oldest = min(rows, key=lambda r: int(r["generation"]))
                tx.execute("DELETE FROM hpke_keys WHERE config_id = :c", {"c": oldest["config_id"]})
                used.discard(int(oldest["config_id"]))
            generation = max((int(r["generation"]) for r in rows), default=0) + 1
            config_id = (
                next(
                    c
                    for c in range(generation % 256, generation % 256 + 256)
                    if c % 256 not in used
                )
                % 256
            )
            keypair = hpke.generate_keypair(config_id)
            tx.execute(
                "INSERT INTO hpke_keys (config_id, kem_id, kdf_id, aead_id, public_key,"
                " private_key, state, generation, created_at)"
                " VALUES (:c, :kem, :kdf, :aead, :pk, :sk, 'active', :g, :now)",
                {
                    "c": config_id,
                    "kem": keypair.kem_id,
                    "kdf": keypair.kdf_id,
                    "aead": keypair.aead_id,
                    "pk": keypair.public_key,
                    "sk": self._crypter.seal(
                        "hpke_keys",
                        "private_key",
                        _config_row(config_id),
                        keypair.private_key_bytes(),
                    ),
                    "g": generation,
                    "now": now,
                },
            )
            return keypair

        return self.db.run("add_hpke_key", body)

    def expire_hpke_key(self, config_id: int) -> bool:
        """Stop advertising a key; it still decrypts reports sealed to it."""
        return (
            self.db.run(
                "expire_hpke_key",
                lambda tx: tx.execute(
                    "UPDATE hpke_keys SET state = 'expired' WHERE config_id = :c",
                    {"c": config_id},
                ),
            )
            > 0
        )

    # --- upload (leader) ---------------------------------------------------------------------

    def put_reports(
        self, reports: Sequence[NewReport], refusals: Sequence[tuple[bytes, str]] = ()
    ) -> list[str]:
        """Store a group of uploads in one transaction (the upload writer's group commit).

        Per report, in order: 'stored'; 'collected' (its time bucket was collected);
        'replayed' (its id was seen before, also earlier in this group); or 'token_spent' (its
        token was spent before, also earlier in this group; the id stays unused). Those
        refusals and `refusals` (task id, reason: uploads refused before the store) are
        counted in the same transaction."""

        def body(tx: Tx) -> list[str]:
            by_task: dict[bytes, list[bytes]] = {}
            for r in reports:
                by_task.setdefault(r.task_id, []).append(r.report_id)
            seen = {t: self._known_report_ids(tx, t, ids) for t, ids in by_task.items()}
            collected: dict[tuple[bytes, bytes], bool] = {}
            rejected: dict[bytes, list[str]] = {}
            for task_id, reason in refusals:
                rejected.setdefault(task_id, []).append(reason)
            outcomes: list[str] = []
            rows: list[dict[str, Any]] = []
            for r in reports:
                outcome = UPLOAD_STORED
                if r.batch_key is not None:
                    key = (r.task_id, r.batch_key)
                    if key not in collected:
                        collected[key] = self._is_collected(tx, r.task_id, r.batch_key)
                    if collected[key]:
                        outcome = UPLOAD_COLLECTED
                if outcome == UPLOAD_STORED and r.report_id in seen[r.task_id]:
                    outcome = UPLOAD_REPLAYED
                if (
                    outcome == UPLOAD_STORED
                    and r.spend is not None
                    and not self._spend(tx, r.task_id, r.report_id, r.spend, r.received_at)
                ):
                    outcome = UPLOAD_TOKEN_SPENT
                outcomes.append(outcome)
                if outcome != UPLOAD_STORED:
                    rejected.setdefault(r.task_id, []).append(_UPLOAD_REASONS[outcome])
                    continue
                seen[r.task_id].add(r.report_id)
                rows.append(
                    {
                        "t": r.task_id,
                        "r": r.report_id,
                        "time": r.client_time,
                        "ps": r.public_share,
                        "ls": r.leader_input_share,
                        "hs": r.helper_encrypted_share,
                        "now": r.received_at,
                    }
                )
            # The ids were checked above under the transaction's isolation: a concurrent
            # insert of one of them makes this conflict, and the retry finds it replayed.
            tx.execute_many(
                "INSERT INTO client_reports (task_id, report_id, client_time, public_share,"
                " leader_input_share, helper_encrypted_share, aggregation_started, received_at)"
                " VALUES (:t, :r, :time, :ps, :ls, :hs, 0, :now)",
                rows,
            )
            for task_id, reasons in rejected.items():
                self._count_rejections(tx, task_id, STAGE_UPLOAD, reasons)
            return outcomes

        return self.db.run("put_reports", body)

    def _spend(self, tx: Tx, task_id: bytes, report_id: bytes, spend: TokenSpend, now: int) -> bool:
        """Record a token as spent; False when it already was (the unique key decides, so two
        racing transactions cannot both spend it)."""
        return (
            tx.execute(
                "INSERT INTO spent_tokens (token_key_id, context, nonce, task_id, report_id,"
                " spent_at) VALUES (:k, :c, :n, :t, :r, :now)"
                " ON CONFLICT (token_key_id, context, nonce) DO NOTHING",
                {
                    "k": spend.token_key_id,
                    "c": spend.context,
                    "n": spend.nonce,
                    "t": task_id,
                    "r": report_id,
                    "now": now,
                },
            )
            > 0
        )

    def _count_rejections(self, tx: Tx, task_id: bytes, stage: str, reasons: list[str]) -> None:
        counts: dict[str, int] = {}
        for reason in reasons:
            counts[reason] = counts.get(reason, 0) + 1
        shard = secrets.randbelow(self._shards)
        for reason, n in sorted(counts.items()):
            tx.execute(
                "INSERT INTO rejection_counts (task_id, stage, reason, shard, count)"
                " VALUES (:t, :st, :r, :sh, :n) ON CONFLICT (task_id, stage, reason, shard)"
                " DO UPDATE SET count = rejection_counts.count + :n",
                {"t": task_id, "st": stage, "r": reason, "sh": shard, "n": n},
            )

    def _is_collected(self, tx: Tx, task_id: bytes, batch_key: bytes) -> bool:
        row = tx.query_one(
            "SELECT collected FROM batches WHERE task_id = :t AND batch_key = :k",
            {"t": task_id, "k": batch_key},
        )
        return bool(row and row["collected"])

    # --- aggregation job creation (leader) ---------------------------------------------------

    def create_aggregation_jobs(
        self,
        task_id: bytes,
        *,
        fixed_size_target: int | None,
        min_job_size: int,
        max_job_size: int,
        flush_before: int,
        now: int,
        scan_limit: int = 5000,
    ) -> int:
        """Group unaggregated reports into new jobs; the number of jobs created.

        Reports left over below `min_job_size` wait, unless the oldest was received before
        `flush_before`: small deployments must not wait forever. For fixed_size tasks
        (`fixed_size_target` = reports per batch), reports go into outstanding batches in order
        until each holds the target, and a job never spans two batches.
        """

        def body(tx: Tx) -> int:
            rows = tx.query(
                "SELECT report_id, client_time, received_at FROM client_reports"
                " WHERE task_id = :t AND aggregation_started = 0 AND received_at <= :now"
                " ORDER BY client_time, report_id LIMIT :n",
                {"t": task_id, "n": scan_limit, "now": now},
            )
            if not rows:
                return 0
            flush = min(int(r["received_at"]) for r in rows) < flush_before
            groups: list[tuple[bytes | None, list[Row]]]
            if fixed_size_target is None:
                groups = [(None, rows)]
            else:
                groups = self._assign_to_batches(tx, task_id, rows, fixed_size_target, flush, now)
            created = 0
            for batch_id, members in groups:
                for start in range(0, len(members), max_job_size):
                    chunk = members[start : start + max_job_size]
                    if len(chunk) < min_job_size and not flush:
                        self._unassign(tx, task_id, batch_id, len(chunk))
                        continue
                    self._insert_leader_job(tx, task_id, batch_id, chunk, now)
                    created += 1
            return created

        return self.db.run("create_aggregation_jobs", body)

    def _assign_to_batches(
        self,
        tx: Tx,
        task_id: bytes,
        rows: list[Row],
        target: int,
        flush: bool,
        now: int,
    ) -> list[tuple[bytes | None, list[Row]]]:
        outstanding = tx.query(
            "SELECT batch_key, assigned FROM batches WHERE task_id = :t AND filled = 0"
            " AND collected = 0 ORDER BY created_at, batch_key",
            {"t": task_id},
        )
        groups: list[tuple[bytes | None, list[Row]]] = []
        pending = list(rows)
        while pending:
            if outstanding:
                batch = outstanding.pop(0)
                key, assigned = bytes(batch["batch_key"]), int(batch["assigned"])
            else:
                key, assigned = secrets.token_bytes(32), 0
                tx.execute(
                    "INSERT INTO batches (task_id, batch_key, collected, assigned, filled,"
                    " created_at) VALUES (:t, :k, 0, 0, 0, :now)",
                    {"t": task_id, "k": key, "now": now},
                )
            take = pending[: max(0, target - assigned)]
            pending = pending[len(take) :]
            if not take:
                tx.execute(
                    "UPDATE batches SET filled = 1 WHERE task_id = :t AND batch_key = :k",
                    {"t": task_id, "k": key},
                )
                continue
            tx.execute(
                "UPDATE batches SET assigned = assigned + :n, filled = :f"
                " WHERE task_id = :t AND batch_key = :k",
                {"t": task_id, "k": key, "n": len(take), "f": int(assigned + len(take) >= target)},
            )
            groups.append((key, take))
        return groups

    def _unassign(self, tx: Tx, task_id: bytes, batch_id: bytes | None, count: int) -> None:
        if batch_id is None or count == 0:
            return
        tx.execute(
            "UPDATE batches SET assigned = assigned - :n, filled = 0"
            " WHERE task_id = :t AND batch_key = :k",
            {"t": task_id, "k": batch_id, "n": count},
        )

    def _insert_leader_job(
        self, tx: Tx, task_id: bytes, batch_id: bytes | None, chunk: list[Row], now: int
    ) -> None:
        job_id = secrets.token_bytes(16)
        times = [int(r["client_time"]) for r in chunk]
        tx.execute(
            "INSERT INTO aggregation_jobs (task_id, job_id, role, agg_param, batch_id, time_min,"
            " time_max, state, step, lease_expiry, lease_token, lease_attempts, created_at)"
            " VALUES (:t, :j, 'leader', :ap, :b, :tmin, :tmax, :s, 0, 0, NULL, 0, :now)",
            {
                "t": task_id,
                "j": job_id,
                "ap": b"",
                "b": batch_id,
                "tmin": min(times),
                "tmax": max(times),
                "s": JOB_IN_PROGRESS,
                "now": now,
            },
        )
        tx.execute_many(
            "INSERT INTO report_aggregations (task_id, job_id, ord, report_id, client_time,"
            " state, error) VALUES (:t, :j, :o, :r, :time, :s, NULL)",
            [
                {
                    "t": task_id,
                    "j": job_id,
                    "o": ord_,
                    "r": r["report_id"],
                    "time": r["client_time"],
                    "s": RA_START,
                }
                for ord_, r in enumerate(chunk)
            ],
        )
        tx.execute_many(
            "UPDATE client_reports SET aggregation_started = 1"
            " WHERE task_id = :t AND report_id = :r",
            [{"t": task_id, "r": r["report_id"]} for r in chunk],
        )

    # --- leases ------------------------------------------------------------------------------

    def acquire_aggregation_jobs(self, now: int, lease_duration: int, limit: int) -> list[Lease]:
        return self._acquire(
            "aggregation_jobs",
            "role = 'leader' AND state = :s",
            JOB_IN_PROGRESS,
            now,
            lease_duration,
            limit,
        )

    def acquire_collection_jobs(self, now: int, lease_duration: int, limit: int) -> list[Lease]:
        return self._acquire(
            "collection_jobs",
            "state IN (:s, 'collecting')",
            COLLECTION_PENDING,
            now,
            lease_duration,
            limit,
        )

    def _acquire(
        self, table: str, where: str, state: str, now: int, lease_duration: int, limit: int
    ) -> list[Lease]:
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
                sql, {"exp": now + lease_duration, "tok": token, "now": now, "n": limit, "s": state}
            ),
        )
        return [
            Lease(bytes(r["task_id"]), bytes(r["job_id"]), token, int(r["lease_attempts"]))
            for r in rows
        ]

    def _check_lease(self, tx: Tx, table: str, lease: Lease) -> None:
        row = tx.query_one(
            f"SELECT lease_token FROM {table} WHERE task_id = :t AND job_id = :j",
            {"t": lease.task_id, "j": lease.job_id},
        )
        if row is None or row["lease_token"] is None or bytes(row["lease_token"]) != lease.token:
            raise LeaseLostError(table)

    def release_aggregation_job(self, lease: Lease, retry_at: int) -> None:
        """Give the job back for a later attempt (the helper was unreachable, say)."""
        self._release("aggregation_jobs", lease, retry_at)

    def release_collection_job(self, lease: Lease, retry_at: int, *, count_attempt: bool) -> None:
        self._release("collection_jobs", lease, retry_at, refund=not count_attempt)

    def _release(self, table: str, lease: Lease, retry_at: int, refund: bool = False) -> None:
        def body(tx: Tx) -> None:
            self._check_lease(tx, table, lease)
            tx.execute(
                f"UPDATE {table} SET lease_expiry = :at, lease_token = NULL,"
                " lease_attempts = lease_attempts - :refund WHERE task_id = :t AND job_id = :j",
                {"at": retry_at, "t": lease.task_id, "j": lease.job_id, "refund": int(refund)},
            )

        self.db.run(f"release_{table}", body)

    # --- leader aggregation ------------------------------------------------------------------

    def leader_job(self, lease: Lease) -> tuple[Row, list[LeaderReport]]:
        """The job row and its reports (with their stored shares), in job order."""

        def body(tx: Tx) -> tuple[Row, list[LeaderReport]]:
            self._check_lease(tx, "aggregation_jobs", lease)
            job = tx.query_one(
                "SELECT * FROM aggregation_jobs WHERE task_id = :t AND job_id = :j",
                {"t": lease.task_id, "j": lease.job_id},
            )
            assert job is not None
            rows = tx.query(
                "SELECT ra.ord, ra.report_id, ra.client_time, cr.public_share,"
                " cr.leader_input_share, cr.helper_encrypted_share"
                " FROM report_aggregations ra LEFT JOIN client_reports cr"
                " ON cr.task_id = ra.task_id AND cr.report_id = ra.report_id"
                " WHERE ra.task_id = :t AND ra.job_id = :j ORDER BY ra.ord",
                {"t": lease.task_id, "j": lease.job_id},
            )
            return job, [
                LeaderReport(
                    int(r["ord"]),
                    bytes(r["report_id"]),
                    int(r["client_time"]),
                    _opt_bytes(r["public_share"]),
                    _opt_bytes(r["leader_input_share"]),
                    _opt_bytes(r["helper_encrypted_share"]),
                )
                for r in rows
            ]

        return self.db.run("leader_job", body)

    def finish_leader_job(
        self,
        lease: Lease,
        vdaf: Prio3,
        outcomes: Sequence[ReportOutcome],
        out_shares: FieldArray,
        *,
        abandoned: bool = False,
        requeue_at: int | None = None,
        bucket_precision: int | None = None,
    ) -> list[ReportOutcome]:
        """Commit a leader job: output shares into batches, report states, job done.

        Reports whose batch got collected meanwhile are failed with batch_collected rather
        than added. With `requeue_at`, reports the helper found too early keep their shares
        and become available to a new job from that time on (DAP-09 §4.5.1.1 allows exactly
        this one retry); every other report is scrubbed. Returns the outcomes as committed."""

        def body(tx: Tx) -> list[ReportOutcome]:
            self._check_lease(tx, "aggregation_jobs", lease)
            job = tx.query_one(
                "SELECT batch_id FROM aggregation_jobs WHERE task_id = :t AND job_id = :j",
                {"t": lease.task_id, "j": lease.job_id},
            )
            assert job is not None
            final = self._add_outcomes(
                tx,
                lease.task_id,
                vdaf,
                outcomes,
                out_shares,
                check_saturation=None,
                bucket_precision=bucket_precision,
            )
            self._count_rejections(
                tx,
                lease.task_id,
                STAGE_AGGREGATION,
                [r for r in (o.rejection_reason for o in final) if r is not None],
            )
            failed_in_batch = sum(1 for o in final if o.error is not None)
            if job["batch_id"] is not None and failed_in_batch:
                self._unassign(tx, lease.task_id, bytes(job["batch_id"]), failed_in_batch)
            tx.execute_many(
                "UPDATE report_aggregations SET state = :s, error = :e"
                " WHERE task_id = :t AND job_id = :j AND ord = :o",
                [
                    {
                        "s": RA_FAILED if o.error is not None else RA_FINISHED,
                        "e": None if o.error is None else int(o.error),
                        "t": lease.task_id,
                        "j": lease.job_id,
                        "o": ord_,
                    }
                    for ord_, o in enumerate(final)
                ],
            )
            requeue = {
                o.report_id
                for o in final
                if requeue_at is not None and o.error == PrepareError.REPORT_TOO_EARLY
            }
            tx.execute_many(
                "UPDATE client_reports SET public_share = NULL, leader_input_share = NULL,"
                " helper_encrypted_share = NULL WHERE task_id = :t AND report_id = :r",
                [
                    {"t": lease.task_id, "r": o.report_id}
                    for o in final
                    if o.report_id not in requeue
                ],
            )
            tx.execute_many(
                "UPDATE client_reports SET aggregation_started = 0, received_at = :at"
                " WHERE task_id = :t AND report_id = :r",
                [{"t": lease.task_id, "r": rid, "at": requeue_at} for rid in requeue],
            )
            tx.execute(
                "UPDATE aggregation_jobs SET state = :s, lease_token = NULL, step = 1"
                " WHERE task_id = :t AND job_id = :j",
                {
                    "s": JOB_ABANDONED if abandoned else JOB_FINISHED,
                    "t": lease.task_id,
                    "j": lease.job_id,
                },
            )
            return final

        return self.db.run("finish_leader_job", body)

    def _add_outcomes(
        self,
        tx: Tx,
        task_id: bytes,
        vdaf: Prio3,
        outcomes: Sequence[ReportOutcome],
        out_shares: FieldArray,
        *,
        check_saturation: int | None,
        bucket_precision: int | None,
    ) -> list[ReportOutcome]:
        """Add the successful reports' output shares to their batches, per batch key, and
        with `bucket_precision` their counts per time bucket (`batch_bucket_counts`).

        Reports into collected batches (and, with `check_saturation`, beyond that many reports
        in a batch) become failures instead."""
        final = [dataclasses.replace(o) for o in outcomes]
        by_key: dict[bytes, list[ReportOutcome]] = {}
        for o in final:
            if o.error is None:
                by_key.setdefault(o.batch_key, []).append(o)
        for key, members in by_key.items():
            if self._is_collected(tx, task_id, key):
                for o in members:
                    o.error = PrepareError.BATCH_COLLECTED
                continue
            if check_saturation is not None:
                room = check_saturation - self._batch_totals(tx, task_id, key, None).report_count
                for o in members[max(0, room) :]:
                    o.error = PrepareError.BATCH_SATURATED
                members = members[: max(0, room)]
            if not members:
                continue
            idx = np.array([o.out_index for o in members], dtype=np.int64)
            share = vdaf.aggregate(out_shares[idx])
            self._add_to_batch(
                tx,
                vdaf,
                task_id,
                key,
                share,
                len(members),
                report_checksum(o.report_id for o in members),
                min(o.client_time for o in members),
                max(o.client_time for o in members),
            )
            if bucket_precision is not None:
                self._count_buckets(tx, task_id, key, members, bucket_precision)
        return final

    def _count_buckets(
        self,
        tx: Tx,
        task_id: bytes,
        key: bytes,
        members: list[ReportOutcome],
        precision: int,
    ) -> None:
        counts: dict[int, int] = {}
        for o in members:
            bucket = o.client_time - o.client_time % precision
            counts[bucket] = counts.get(bucket, 0) + 1
        shard = secrets.randbelow(self._shards)
        tx.execute_many(
            "INSERT INTO batch_bucket_counts (task_id, batch_key, bucket, shard, report_count)"
            " VALUES (:t, :k, :b, :sh, :n) ON CONFLICT (task_id, batch_key, bucket, shard)"
            " DO UPDATE SET report_count = batch_bucket_counts.report_count + :n",
            [
                {"t": task_id, "k": key, "b": b, "sh": shard, "n": n}
                for b, n in sorted(counts.items())
            ],
        )

    def _add_to_batch(
        self,
        tx: Tx,
        vdaf: Prio3,
        task_id: bytes,
        key: bytes,
        share: FieldArray,
        count: int,
        checksum: bytes,
        tmin: int,
        tmax: int,
    ) -> None:
        shard = secrets.randbelow(self._shards)
        params = {"t": task_id, "k": key, "ap": b"", "sh": shard}
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
                {
                    **params,
                    "s": vdaf.encode_agg_share(share),
                    "c": count,
                    "cs": checksum,
                    "tmin": tmin,
                    "tmax": tmax,
                },
            )
            return
        total = vdaf.field.add(vdaf.decode_agg_share(bytes(row["aggregate_share"])), share)
        tx.execute(
            "UPDATE batch_aggregations SET aggregate_share = :s, report_count = :c,"
            " checksum = :cs, time_min = :tmin, time_max = :tmax"
            " WHERE task_id = :t AND batch_key = :k AND agg_param = :ap AND shard = :sh",
            {
                **params,
                "s": vdaf.encode_agg_share(total),
                "c": int(row["report_count"]) + count,
                "cs": xor_bytes(bytes(row["checksum"]), checksum),
                "tmin": min(int(row["time_min"]), tmin),
                "tmax": max(int(row["time_max"]), tmax),
            },
        )

    def _batch_totals(
        self, tx: Tx, task_id: bytes, lo: bytes, vdaf: Prio3 | None, hi: bytes | None = None
    ) -> BatchTotals:
        """Sum of the shards of batch keys in [lo, hi) (just `lo` when hi is None)."""
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
        share = None
        if vdaf is not None:
            share = vdaf.merge([vdaf.decode_agg_share(bytes(r["aggregate_share"])) for r in rows])
        return BatchTotals(
            share,
            sum(int(r["report_count"]) for r in rows),
            checksum,
            min((int(r["time_min"]) for r in rows), default=None),
            max((int(r["time_max"]) for r in rows), default=None),
        )

    def _busiest_bucket(
        self, tx: Tx, task_id: bytes, lo: bytes, hi: bytes, fixed_size: bool, precision: int
    ) -> tuple[int, int] | None:
        """(bucket start, aggregated reports) of the fullest time bucket the batch [lo, hi)
        has reports in, or None for an empty batch (rate validation, module docstring).
        A fixed_size batch is `lo`, its counts are in `batch_bucket_counts`."""
        if not fixed_size:
            row = tx.query_one(
                "SELECT batch_key, SUM(report_count) AS n FROM batch_aggregations"
                " WHERE task_id = :t AND batch_key >= :lo AND batch_key < :hi"
                " GROUP BY batch_key ORDER BY n DESC, batch_key LIMIT 1",
                {"t": task_id, "lo": lo, "hi": hi},
            )
            if row is None:
                return None
            return int.from_bytes(bytes(row["batch_key"]), "big"), int(row["n"])
        row = tx.query_one(
            "SELECT bucket, SUM(report_count) AS n FROM batch_bucket_counts"
            " WHERE task_id = :t AND bucket IN (SELECT bucket FROM batch_bucket_counts"
            " WHERE task_id = :t AND batch_key = :k)"
            " GROUP BY bucket ORDER BY n DESC, bucket LIMIT 1",
            {"t": task_id, "k": lo},
        )
        return None if row is None else (int(row["bucket"]), int(row["n"]))

    def _rate_refusal(
        self,
        tx: Tx,
        task_id: bytes,
        lo: bytes,
        hi: bytes,
        fixed_size: bool,
        limit: RateLimit | None,
    ) -> Refusal | None:
        """The refusal of a batch with a bucket above the rate limit, counted; else None."""
        if limit is None:
            return None
        busiest = self._busiest_bucket(tx, task_id, lo, hi, fixed_size, limit.time_precision)
        if busiest is None or busiest[1] <= limit.max_reports_per_bucket:
            return None
        tx.execute(
            "INSERT INTO batch_refusals (task_id, reason, count) VALUES (:t, :r, 1)"
            " ON CONFLICT (task_id, reason) DO UPDATE SET count = batch_refusals.count + 1",
            {"t": task_id, "r": REFUSAL_RATE_EXCEEDED},
        )
        return _rate_refusal(limit, *busiest)

    # --- helper aggregation ------------------------------------------------------------------

    def aggregation_job(self, task_id: bytes, job_id: bytes) -> Row | None:
        return self.db.run(
            "aggregation_job",
            lambda tx: tx.query_one(
                "SELECT * FROM aggregation_jobs WHERE task_id = :t AND job_id = :j",
                {"t": task_id, "j": job_id},
            ),
        )

    def report_aggregations(self, task_id: bytes, job_id: bytes) -> list[Row]:
        return self.db.run(
            "report_aggregations",
            lambda tx: tx.query(
                "SELECT * FROM report_aggregations WHERE task_id = :t AND job_id = :j ORDER BY ord",
                {"t": task_id, "j": job_id},
            ),
        )

    def helper_init_job(
        self,
        task_id: bytes,
        job_id: bytes,
        request: bytes,
        batch_id: bytes | None,
        vdaf: Prio3,
        outcomes: Sequence[ReportOutcome],
        out_shares: FieldArray,
        max_batch_size: int | None,
        build_response: Callable[[list[ReportOutcome]], bytes],
        now: int,
        bucket_precision: int | None = None,
    ) -> tuple[str, bytes | None]:
        """Record a helper aggregation job and its output shares, once (with
        `bucket_precision`, also their counts per time bucket, `batch_bucket_counts`).

        Returns ('created', response), ('same', stored response) for an identical re-send, or
        ('conflict', None) when the id is taken by a different request (DAP-09 §4.5.1.2).
        Reports seen before in this task become report_replayed, those whose token (`spend`)
        was spent before invalid_message, those into collected batches batch_collected, and for
        fixed_size those beyond `max_batch_size` batch_saturated. Tokens are spent and refusals
        counted in the same transaction.
        """
        request_hash = _hash(request)

        def body(tx: Tx) -> tuple[str, bytes | None]:
            existing = tx.query_one(
                "SELECT request_hash, response, step, state FROM aggregation_jobs"
                " WHERE task_id = :t AND job_id = :j",
                {"t": task_id, "j": job_id},
            )
            if existing is not None:
                if (
                    existing["request_hash"] is not None
                    and bytes(existing["request_hash"]) == request_hash
                    and int(existing["step"]) == 0
                    and existing["state"] != JOB_ABANDONED
                ):
                    return "same", bytes(existing["response"])
                return "conflict", None
            if batch_id is not None:
                tx.execute(
                    "INSERT INTO batches (task_id, batch_key, collected, assigned, filled,"
                    " created_at) VALUES (:t, :k, 0, 0, 0, :now)"
                    " ON CONFLICT (task_id, batch_key) DO NOTHING",
                    {"t": task_id, "k": batch_id, "now": now},
                )
            # The leader may offer a too-early report again later (DAP-09 §4.5.1.1): it is not
            # recorded, so that is not a replay.
            remembered = [o for o in outcomes if o.error != PrepareError.REPORT_TOO_EARLY]
            seen = self._known_report_ids(tx, task_id, [o.report_id for o in remembered])
            tx.execute_many(
                "INSERT INTO client_reports (task_id, report_id, client_time,"
                " aggregation_started, received_at) VALUES (:t, :r, :time, 1, :now)"
                " ON CONFLICT (task_id, report_id) DO NOTHING",
                [
                    {
                        "t": task_id,
                        "r": o.report_id,
                        "time": min(o.client_time, MAX_STORED_TIME),
                        "now": now,
                    }
                    for o in remembered
                    if o.report_id not in seen
                ],
            )
            checked = [dataclasses.replace(o) for o in outcomes]
            for o in checked:
                if o.error is None and o.report_id in seen:
                    o.error = PrepareError.REPORT_REPLAYED
                elif (
                    o.error is None
                    and o.spend is not None
                    and not self._spend(tx, task_id, o.report_id, o.spend, now)
                ):
                    # A token spent before (in this job or an earlier one, whatever the report
                    # id): the leader is replaying it, or a client reused it.
                    o.error, o.reason = PrepareError.INVALID_MESSAGE, REASON_TOKEN_SPENT
            final = self._add_outcomes(
                tx,
                task_id,
                vdaf,
                checked,
                out_shares,
                check_saturation=max_batch_size if batch_id is not None else None,
                bucket_precision=bucket_precision,
            )
            response = build_response(final)
            self._count_rejections(
                tx,
                task_id,
                STAGE_AGGREGATION,
                [r for r in (o.rejection_reason for o in final) if r is not None],
            )
            # Times beyond the signed 64-bit range only occur on reports refused as too early;
            # they are clamped so the record of the refusal fits the database.
            for o in final:
                o.client_time = min(o.client_time, MAX_STORED_TIME)
            times = [o.client_time for o in final]
            tx.execute(
                "INSERT INTO aggregation_jobs (task_id, job_id, role, agg_param, batch_id,"
                " time_min, time_max, state, step, lease_expiry, lease_token, lease_attempts,"
                " request_hash, response, created_at) VALUES (:t, :j, 'helper', :ap, :b,"
                " :tmin, :tmax, :s, 0, 0, NULL, 0, :rh, :resp, :now)",
                {
                    "t": task_id,
                    "j": job_id,
                    "ap": b"",
                    "b": batch_id,
                    "tmin": min(times),
                    "tmax": max(times),
                    "s": JOB_FINISHED,
                    "rh": request_hash,
                    "resp": response,
                    "now": now,
                },
            )
            tx.execute_many(
                "INSERT INTO report_aggregations (task_id, job_id, ord, report_id,"
                " client_time, state, error) VALUES (:t, :j, :o, :r, :time, :s, :e)",
                [
                    {
                        "t": task_id,
                        "j": job_id,
                        "o": ord_,
                        "r": o.report_id,
                        "time": o.client_time,
                        "s": RA_FAILED if o.error is not None else RA_FINISHED,
                        "e": None if o.error is None else int(o.error),
                    }
                    for ord_, o in enumerate(final)
                ],
            )
            return "created", response

        return self.db.run("helper_init_job", body)

    def _known_report_ids(self, tx: Tx, task_id: bytes, report_ids: list[bytes]) -> set[bytes]:
        """Which of these report ids the task has seen (the anti-replay set)."""
        known: set[bytes] = set()
        for start in range(0, len(report_ids), 500):
            chunk = report_ids[start : start + 500]
            names = {f"r{i}": rid for i, rid in enumerate(chunk)}
            placeholders = ", ".join(f":{name}" for name in names)
            rows = tx.query(
                "SELECT report_id FROM client_reports WHERE task_id = :t"
                f" AND report_id IN ({placeholders})",
                {"t": task_id, **names},
            )
            known |= {bytes(r["report_id"]) for r in rows}
        return known

    def abandon_helper_job(self, task_id: bytes, job_id: bytes) -> bool:
        """DELETE from the leader (DAP-09 §4.5.2.2): the job is gone for further requests.

        Output shares already added stay: they cannot be told apart inside the batch, and the
        batch checksum then makes any disagreement visible as batchMismatch."""
        return (
            self.db.run(
                "abandon_helper_job",
                lambda tx: tx.execute(
                    "UPDATE aggregation_jobs SET state = :s"
                    " WHERE task_id = :t AND job_id = :j AND role = 'helper'",
                    {"s": JOB_ABANDONED, "t": task_id, "j": job_id},
                ),
            )
            > 0
        )

    # --- helper aggregate shares -------------------------------------------------------------

    def helper_aggregate_share(
        self,
        task_id: bytes,
        selector: bytes,
        agg_param: bytes,
        key_lo: bytes,
        key_hi: bytes,
        is_fixed_size: bool,
        report_count: int,
        checksum: bytes,
        min_batch_size: int,
        max_batch_size: int | None,
        max_batch_query_count: int,
        vdaf: Prio3,
        build_response: Callable[[FieldArray], bytes],
        now: int,
        rate: RateLimit | None = None,
    ) -> tuple[Refusal | None, bytes | None]:
        """Answer an AggregateShareReq once (DAP-09 §4.6.2, §4.6.5); later identical
        requests get the stored answer. (refusal, None) when a batch check fails, including
        `rate` validation (001 §4.8), which is a batch size check run after DAP's."""

        def body(tx: Tx) -> tuple[Refusal | None, bytes | None]:
            stored = tx.query_one(
                "SELECT report_count, checksum, response FROM aggregate_share_jobs"
                " WHERE task_id = :t AND batch_selector = :bs AND agg_param = :ap",
                {"t": task_id, "bs": selector, "ap": agg_param},
            )
            if stored is not None:
                if (
                    int(stored["report_count"]) == report_count
                    and bytes(stored["checksum"]) == checksum
                ):
                    return None, bytes(stored["response"])
                return Refusal(ProblemType.BATCH_MISMATCH), None
            if is_fixed_size and not tx.query_one(
                "SELECT 1 AS known FROM batches WHERE task_id = :t AND batch_key = :k",
                {"t": task_id, "k": key_lo},
            ):
                return Refusal(ProblemType.BATCH_INVALID), None
            previous = tx.query(
                "SELECT batch_selector, agg_param FROM aggregate_share_jobs"
                " WHERE task_id = :t AND key_lo < :hi AND key_hi > :lo",
                {"t": task_id, "lo": key_lo, "hi": key_hi},
            )
            if any(bytes(p["batch_selector"]) != selector for p in previous):
                return Refusal(ProblemType.BATCH_OVERLAP), None
            if len({bytes(p["agg_param"]) for p in previous}) >= max_batch_query_count:
                return Refusal(ProblemType.BATCH_QUERIED_TOO_MANY_TIMES), None
            if agg_param != b"":
                # The batch checks come first (DAP-09 §4.6.5); then the VDAF's own: Prio3 has
                # no aggregation parameter.
                return Refusal(ProblemType.INVALID_MESSAGE), None
            totals = self._batch_totals(tx, task_id, key_lo, vdaf, key_hi)
            if totals.report_count < min_batch_size or (
                max_batch_size is not None and totals.report_count > max_batch_size
            ):
                return Refusal(ProblemType.INVALID_BATCH_SIZE), None
            refused = self._rate_refusal(tx, task_id, key_lo, key_hi, is_fixed_size, rate)
            if refused is not None:
                return refused, None
            if totals.report_count != report_count or totals.checksum != checksum:
                return Refusal(ProblemType.BATCH_MISMATCH), None
            assert totals.aggregate_share is not None
            response = build_response(totals.aggregate_share)
            self._mark_collected(tx, task_id, key_lo, key_hi, now)
            tx.execute(
                "INSERT INTO aggregate_share_jobs (task_id, batch_selector, agg_param, key_lo,"
                " key_hi, report_count, checksum, response, created_at)"
                " VALUES (:t, :bs, :ap, :lo, :hi, :c, :cs, :resp, :now)",
                {
                    "t": task_id,
                    "bs": selector,
                    "ap": agg_param,
                    "lo": key_lo,
                    "hi": key_hi,
                    "c": report_count,
                    "cs": checksum,
                    "resp": response,
                    "now": now,
                },
            )
            return None, response

        return self.db.run("helper_aggregate_share", body)

    def _mark_collected(self, tx: Tx, task_id: bytes, lo: bytes, hi: bytes, now: int) -> None:
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

    # --- collection jobs (leader) ------------------------------------------------------------

    def put_collection_job(
        self,
        task_id: bytes,
        job_id: bytes,
        request: bytes,
        query_type: int,
        current_batch: bool,
        agg_param: bytes,
        batch_key: bytes | None,
        interval: tuple[int, int] | None,
        max_batch_query_count: int,
        now: int,
    ) -> tuple[str, ProblemType | None]:
        """Create a collection job after the checks DAP-09 §4.6.5 allows up front.

        Deleted jobs still count for overlap and query counts: deleting discards a result,
        not the fact that the batch was queried. Jobs failed with invalidBatchSize do not:
        neither aggregator released anything of their batch (the leader refuses before
        freezing it, the helper before answering), so a collector whose interval was refused
        for a surging bucket (001 §4.8) may still collect the other buckets.
        ('created'|'exists'|'conflict', None) or ('rejected', problem)."""
        request_hash = _hash(request)

        def body(tx: Tx) -> tuple[str, ProblemType | None]:
            existing = tx.query_one(
                "SELECT request_hash FROM collection_jobs WHERE task_id = :t AND job_id = :j",
                {"t": task_id, "j": job_id},
            )
            if existing is not None:
                same = bytes(existing["request_hash"]) == request_hash
                return ("exists" if same else "conflict"), None
            if interval is not None:
                start, duration = interval
                previous = tx.query(
                    "SELECT interval_start, interval_duration, agg_param FROM collection_jobs"
                    " WHERE task_id = :t AND interval_start < :e"
                    " AND interval_start + interval_duration > :s"
                    " AND NOT (state = :failed AND error = :refused)",
                    {
                        "t": task_id,
                        "s": start,
                        "e": start + duration,
                        "failed": COLLECTION_FAILED,
                        "refused": ProblemType.INVALID_BATCH_SIZE.value,
                    },
                )
                if any(
                    (int(p["interval_start"]), int(p["interval_duration"])) != interval
                    for p in previous
                ):
                    return "rejected", ProblemType.BATCH_OVERLAP
                params = {bytes(p["agg_param"]) for p in previous}
            elif batch_key is not None:
                if not tx.query_one(
                    "SELECT 1 AS known FROM batches WHERE task_id = :t AND batch_key = :k",
                    {"t": task_id, "k": batch_key},
                ):
                    return "rejected", ProblemType.BATCH_INVALID
                params = {
                    bytes(p["agg_param"])
                    for p in tx.query(
                        "SELECT agg_param FROM collection_jobs WHERE task_id = :t"
                        " AND batch_key = :k",
                        {"t": task_id, "k": batch_key},
                    )
                }
            else:
                params = set()
            if agg_param not in params and len(params) >= max_batch_query_count:
                return "rejected", ProblemType.BATCH_QUERIED_TOO_MANY_TIMES
            if agg_param != b"":
                return "rejected", ProblemType.INVALID_MESSAGE
            tx.execute(
                "INSERT INTO collection_jobs (task_id, job_id, request_hash, query_type,"
                " current_batch, agg_param, batch_key, interval_start, interval_duration, state,"
                " lease_expiry, lease_token, lease_attempts, created_at) VALUES (:t, :j, :rh,"
                " :qt, :cb, :ap, :k, :is, :id, :s, 0, NULL, 0, :now)",
                {
                    "t": task_id,
                    "j": job_id,
                    "rh": request_hash,
                    "qt": query_type,
                    "cb": int(current_batch),
                    "ap": agg_param,
                    "k": batch_key,
                    "is": None if interval is None else interval[0],
                    "id": None if interval is None else interval[1],
                    "s": COLLECTION_PENDING,
                    "now": now,
                },
            )
            return "created", None

        return self.db.run("put_collection_job", body)

    def collection_job(self, task_id: bytes, job_id: bytes) -> Row | None:
        return self.db.run(
            "collection_job",
            lambda tx: tx.query_one(
                "SELECT * FROM collection_jobs WHERE task_id = :t AND job_id = :j",
                {"t": task_id, "j": job_id},
            ),
        )

    def delete_collection_job(self, task_id: bytes, job_id: bytes) -> bool:
        return (
            self.db.run(
                "delete_collection_job",
                lambda tx: tx.execute(
                    "UPDATE collection_jobs SET state = :s, result = NULL, leader_share = NULL"
                    " WHERE task_id = :t AND job_id = :j",
                    {"s": COLLECTION_DELETED, "t": task_id, "j": job_id},
                ),
            )
            > 0
        )

    def leased_collection_job(self, lease: Lease) -> Row:
        def body(tx: Tx) -> Row:
            self._check_lease(tx, "collection_jobs", lease)
            row = tx.query_one(
                "SELECT * FROM collection_jobs WHERE task_id = :t AND job_id = :j",
                {"t": lease.task_id, "j": lease.job_id},
            )
            assert row is not None
            return row

        return self.db.run("leased_collection_job", body)

    def start_collection(
        self,
        lease: Lease,
        vdaf: Prio3,
        min_batch_size: int,
        now: int,
        noise: Callable[[FieldArray], FieldArray] | None = None,
        rate: RateLimit | None = None,
    ) -> str:
        """Fix the batch of a pending collection job and freeze it.

        Returns 'waiting' (aggregation still running or too few reports: DAP-09 §4.6.5.2
        says the leader waits), 'no_batch' (current_batch with no batch ready), 'refused'
        or 'started'. On 'started' the batch is marked collected and the job holds the
        leader's aggregate share, count and checksum, all in this transaction, so later
        reports are refused and the request to the helper is the same however often it is
        retried. On 'refused' (a time bucket above the `rate` limit, 001 §4.8) the job has
        failed with invalidBatchSize and the batch is untouched; a current_batch job keeps
        the batch it picked, so the next one does not pick the refused batch again.

        `noise` (tasks with aggregator noise, 004 §5): the share frozen into the job is
        noise(share), drawn once per batch and kept in ``leader_noised_shares`` so that a
        retried or repeated collection of the batch carries the same noise."""

        def body(tx: Tx) -> str:
            self._check_lease(tx, "collection_jobs", lease)
            job = tx.query_one(
                "SELECT * FROM collection_jobs WHERE task_id = :t AND job_id = :j",
                {"t": lease.task_id, "j": lease.job_id},
            )
            assert job is not None
            if job["state"] != COLLECTION_PENDING:
                return "started"
            t = lease.task_id
            key = _opt_bytes(job["batch_key"])
            if job["current_batch"] and key is None:
                key = self._pick_current_batch(tx, t, min_batch_size)
                if key is None:
                    return "no_batch"
                tx.execute(
                    "UPDATE collection_jobs SET batch_key = :k WHERE task_id = :t AND job_id = :j",
                    {"k": key, "t": t, "j": lease.job_id},
                )
            if key is not None:
                lo, hi = key, key + b"\x00"
                busy = tx.query_one(
                    "SELECT 1 AS busy FROM aggregation_jobs WHERE task_id = :t AND role = 'leader'"
                    " AND state = :s AND batch_id = :k LIMIT 1",
                    {"t": t, "s": JOB_IN_PROGRESS, "k": key},
                )
            else:
                start = int(job["interval_start"])
                end = start + int(job["interval_duration"])
                lo, hi = start.to_bytes(8, "big"), end.to_bytes(8, "big")
                busy = tx.query_one(
                    "SELECT 1 AS busy FROM aggregation_jobs WHERE task_id = :t AND role = 'leader'"
                    " AND state = :s AND time_min < :e AND time_max >= :st LIMIT 1",
                    {"t": t, "s": JOB_IN_PROGRESS, "st": start, "e": end},
                ) or tx.query_one(
                    "SELECT 1 AS busy FROM client_reports WHERE task_id = :t"
                    " AND aggregation_started = 0 AND client_time >= :st AND client_time < :e"
                    " LIMIT 1",
                    {"t": t, "st": start, "e": end},
                )
            if busy:
                return "waiting"
            totals = self._batch_totals(tx, t, lo, vdaf, hi)
            if totals.report_count < min_batch_size:
                return "waiting"
            if self._rate_refusal(tx, t, lo, hi, key is not None, rate) is not None:
                tx.execute(
                    "UPDATE collection_jobs SET state = :s, error = :e, lease_token = NULL"
                    " WHERE task_id = :t AND job_id = :j",
                    {
                        "s": COLLECTION_FAILED,
                        "e": ProblemType.INVALID_BATCH_SIZE.value,
                        "t": t,
                        "j": lease.job_id,
                    },
                )
                return "refused"
            assert totals.aggregate_share is not None
            share = totals.aggregate_share
            if noise is not None:
                share = self._noised_leader_share(
                    tx, t, lo, hi, bytes(job["agg_param"]), totals, vdaf, noise, now
                )
            self._mark_collected(tx, t, lo, hi, now)
            tx.execute(
                "UPDATE collection_jobs SET state = :s, report_count = :c, checksum = :cs,"
                " leader_share = :ls, time_min = :tmin, time_max = :tmax"
                " WHERE task_id = :t AND job_id = :j",
                {
                    "s": COLLECTION_COLLECTING,
                    "c": totals.report_count,
                    "cs": totals.checksum,
                    "ls": vdaf.encode_agg_share(share),
                    "tmin": totals.time_min,
                    "tmax": totals.time_max,
                    "t": t,
                    "j": lease.job_id,
                },
            )
            return "started"

        return self.db.run("start_collection", body)

    def _noised_leader_share(
        self,
        tx: Tx,
        task_id: bytes,
        lo: bytes,
        hi: bytes,
        agg_param: bytes,
        totals: BatchTotals,
        vdaf: Prio3,
        noise: Callable[[FieldArray], FieldArray],
        now: int,
    ) -> FieldArray:
        """The batch's stored noised share, or a fresh one stored now (004 §5).

        Reused only for the same report count and checksum; the batch is collected, so they
        cannot change in practice, and a share of other reports needs its own noise anyway."""
        key = {"t": task_id, "lo": lo, "hi": hi, "ap": agg_param}
        stored = tx.query_one(
            "SELECT report_count, checksum, share FROM leader_noised_shares"
            " WHERE task_id = :t AND key_lo = :lo AND key_hi = :hi AND agg_param = :ap",
            key,
        )
        if (
            stored is not None
            and int(stored["report_count"]) == totals.report_count
            and bytes(stored["checksum"]) == totals.checksum
        ):
            return vdaf.decode_agg_share(bytes(stored["share"]))
        assert totals.aggregate_share is not None
        noised = noise(totals.aggregate_share)
        if stored is not None:
            tx.execute(
                "DELETE FROM leader_noised_shares"
                " WHERE task_id = :t AND key_lo = :lo AND key_hi = :hi AND agg_param = :ap",
                key,
            )
        tx.execute(
            "INSERT INTO leader_noised_shares (task_id, key_lo, key_hi, agg_param, report_count,"
            " checksum, share, created_at) VALUES (:t, :lo, :hi, :ap, :c, :cs, :sh, :now)",
            {
                **key,
                "c": totals.report_count,
                "cs": totals.checksum,
                "sh": vdaf.encode_agg_share(noised),
                "now": now,
            },
        )
        return noised

    def _pick_current_batch(self, tx: Tx, task_id: bytes, min_batch_size: int) -> bytes | None:
        """A fixed_size batch with enough aggregated reports, tied to no collection job yet
        (DAP-09 §4.6.1: current_batch never returns a batch already collected)."""
        rows = tx.query(
            "SELECT b.batch_key, SUM(ba.report_count) AS n FROM batches b"
            " JOIN batch_aggregations ba ON ba.task_id = b.task_id AND ba.batch_key = b.batch_key"
            " WHERE b.task_id = :t AND b.collected = 0 AND NOT EXISTS (SELECT 1 FROM"
            " collection_jobs cj WHERE cj.task_id = b.task_id AND cj.batch_key = b.batch_key)"
            " GROUP BY b.batch_key, b.created_at ORDER BY b.created_at, b.batch_key",
            {"t": task_id},
        )
        for r in rows:
            if int(r["n"]) >= min_batch_size:
                return bytes(r["batch_key"])
        return None

    def finish_collection(self, lease: Lease, result: bytes) -> None:
        def body(tx: Tx) -> None:
            self._check_lease(tx, "collection_jobs", lease)
            tx.execute(
                "UPDATE collection_jobs SET state = :s, result = :r, lease_token = NULL"
                " WHERE task_id = :t AND job_id = :j AND state = :collecting",
                {
                    "s": COLLECTION_FINISHED,
                    "r": result,
                    "t": lease.task_id,
                    "j": lease.job_id,
                    "collecting": COLLECTION_COLLECTING,
                },
            )

        self.db.run("finish_collection", body)

    def fail_collection(self, lease: Lease, problem: str) -> None:
        def body(tx: Tx) -> None:
            self._check_lease(tx, "collection_jobs", lease)
            tx.execute(
                "UPDATE collection_jobs SET state = :s, error = :e, lease_token = NULL,"
                " leader_share = NULL WHERE task_id = :t AND job_id = :j",
                {"s": COLLECTION_FAILED, "e": problem, "t": lease.task_id, "j": lease.job_id},
            )

        self.db.run("fail_collection", body)

    # --- introspection for health checks and tests -------------------------------------------

    def count_rows(self, table: str, task_id: bytes) -> int:
        if table not in _TABLES:
            raise ValueError(table)
        row = self.db.run(
            "count_rows",
            lambda tx: tx.query_one(
                f"SELECT COUNT(*) AS n FROM {table} WHERE task_id = :t", {"t": task_id}
            ),
        )
        return int(row["n"]) if row else 0

    def batch_totals(
        self, task_id: bytes, lo: bytes, hi: bytes, vdaf: Prio3 | None = None
    ) -> BatchTotals:
        return self.db.run("batch_totals", lambda tx: self._batch_totals(tx, task_id, lo, vdaf, hi))

    def unaggregated_reports(self, task_id: bytes) -> int:
        row = self.db.run(
            "unaggregated_reports",
            lambda tx: tx.query_one(
                "SELECT COUNT(*) AS n FROM client_reports WHERE task_id = :t"
                " AND aggregation_started = 0",
                {"t": task_id},
            ),
        )
        return int(row["n"]) if row else 0

    def batch_refusal_counts(self, task_id: bytes) -> dict[str, int]:
        """{reason: count} of the task's refused collection requests (`batch_refusals`)."""
        rows = self.db.run(
            "batch_refusal_counts",
            lambda tx: tx.query(
                "SELECT reason, count FROM batch_refusals WHERE task_id = :t ORDER BY reason",
                {"t": task_id},
            ),
        )
        return {str(r["reason"]): int(r["count"]) for r in rows}

    def rejection_counts(self, task_id: bytes) -> dict[str, dict[str, int]]:
        """{stage: {reason: count}} of the task's refused reports."""
        rows = self.db.run(
            "rejection_counts",
            lambda tx: tx.query(
                "SELECT stage, reason, SUM(count) AS n FROM rejection_counts WHERE task_id = :t"
                " GROUP BY stage, reason ORDER BY stage, reason",
                {"t": task_id},
            ),
        )
        out: dict[str, dict[str, int]] = {STAGE_UPLOAD: {}, STAGE_AGGREGATION: {}}
        for r in rows:
            out.setdefault(str(r["stage"]), {})[str(r["reason"])] = int(r["n"])
        return out

    def task_stats(self, task_id: bytes, *, batch_limit: int = 50) -> dict[str, Any]:
        """Counts for the stats and metrics endpoints, read in one transaction.

        `batches` lists the uncollected batches (newest `batch_limit`) with their aggregated
        report counts, so progress towards min_batch_size can be watched."""

        def by_state(tx: Tx, table: str, where: str = "") -> dict[str, int]:
            rows = tx.query(
                f"SELECT state, COUNT(*) AS n FROM {table} WHERE task_id = :t{where}"
                " GROUP BY state ORDER BY state",
                {"t": task_id},
            )
            return {str(r["state"]): int(r["n"]) for r in rows}

        def body(tx: Tx) -> dict[str, Any]:
            reports = tx.query_one(
                "SELECT COUNT(*) AS n, SUM(CASE WHEN aggregation_started = 0 THEN 1 ELSE 0 END)"
                " AS waiting FROM client_reports WHERE task_id = :t",
                {"t": task_id},
            )
            batches = tx.query(
                "SELECT ba.batch_key, SUM(ba.report_count) AS n, MAX(ba.time_max) AS latest"
                " FROM batch_aggregations ba WHERE ba.task_id = :t AND NOT EXISTS (SELECT 1"
                " FROM batches b WHERE b.task_id = ba.task_id AND b.batch_key = ba.batch_key"
                " AND b.collected = 1) GROUP BY ba.batch_key ORDER BY latest DESC, ba.batch_key"
                " LIMIT :n",
                {"t": task_id, "n": batch_limit},
            )
            collected = tx.query_one(
                "SELECT COUNT(*) AS n FROM batches WHERE task_id = :t AND collected = 1",
                {"t": task_id},
            )
            return {
                "reports": {
                    "received": int(reports["n"]) if reports else 0,
                    "waiting": int(reports["waiting"] or 0) if reports else 0,
                },
                "report_aggregations": by_state(tx, "report_aggregations"),
                "aggregation_jobs": by_state(tx, "aggregation_jobs"),
                "collection_jobs": by_state(tx, "collection_jobs"),
                "batches_collected": int(collected["n"]) if collected else 0,
                "open_batches": [(bytes(r["batch_key"]), int(r["n"])) for r in batches],
            }

        return self.db.run("task_stats", body)


_TABLES = (
    "client_reports",
    "aggregation_jobs",
    "report_aggregations",
    "batch_aggregations",
    "batches",
    "collection_jobs",
    "aggregate_share_jobs",
    "leader_noised_shares",
    "spent_tokens",
    "rejection_counts",
    "batch_refusals",
    "batch_bucket_counts",
)


def _set_members(definition: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in definition.items() if v is not None}


def _opt_bytes(value: Any) -> bytes | None:
    return None if value is None else bytes(value)


def _config_row(config_id: object) -> bytes:
    """The associated-data row key of an HPKE key: its u8 config id."""
    return int(str(config_id)).to_bytes(1, "big")
