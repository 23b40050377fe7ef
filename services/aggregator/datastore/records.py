"""What the datastore takes and returns: rows as records, and the two computations a
transaction needs from the aggregator (share arithmetic and the rate policy), as protocols the
aggregator implements (`services.aggregator.aggregate`, `services.aggregator.rate_policy`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from services.aggregator.datastore.states import KeyState
from services.common.problems import InternalError
from shared import hpke
from shared.dap.messages import PrepareError
from shared.dap.problems import ProblemType


class LeaseLostError(InternalError):
    """The job's lease expired and was taken by another worker; drop the work."""


class TaskGoneError(InternalError):
    """The task was deleted while a transaction that records its reports ran."""


class ShareSum(Protocol):
    """Aggregate-share arithmetic on encoded shares (VDAF-08 §4.4: aggregation is addition in
    the field). Called inside transactions, so it must be pure."""

    def of_reports(self, out_indices: Sequence[int]) -> bytes:
        """The encoded sum of these reports' output shares (indices into the job's array)."""
        ...

    def merge(self, shares: Sequence[bytes]) -> bytes:
        """The encoded sum of encoded aggregate shares."""
        ...


@dataclass(frozen=True)
class Refusal:
    """Why a batch's aggregate share is not released: the DAP problem and a detail for it."""

    problem: ProblemType
    detail: str = "batch check failed"


@dataclass(frozen=True)
class EarlierQueries:
    """What the store holds of a task's earlier queries that overlap the batch asked for."""

    #: One of them names another batch that overlaps this one.
    other_batch: bool
    #: The aggregation parameters this batch was queried with.
    agg_params: frozenset[bytes]


class BatchRules(Protocol):
    """Batch validation (DAP-09 §4.6.5), decided in the transaction that records a query or
    releases a batch (`services.aggregator.batch_validation`)."""

    def query_refusal(self, earlier: EarlierQueries, agg_param: bytes) -> ProblemType | None:
        """The problem with querying the batch again with `agg_param`, or None."""
        ...

    def size_ok(self, report_count: int) -> bool:
        """Whether a batch of `report_count` reports may be released."""
        ...


class RatePolicy(Protocol):
    """Rate validation (001 §4.8), decided in the transaction that would release a batch."""

    def refusal(self, busiest: BucketCount) -> Refusal | None:
        """The refusal of a batch whose fullest bucket is `busiest`, or None to release it."""
        ...


@dataclass(frozen=True)
class BucketCount:
    """The fullest `time_precision` bucket a batch has reports in (001 §4.8)."""

    bucket: int
    reports: int


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
    state: KeyState


@dataclass(frozen=True)
class Lease:
    task_id: bytes
    job_id: bytes
    token: bytes = field(repr=False)
    attempts: int


class JobReport(Protocol):
    """One report of a leader aggregation job, with what preparation needs: a `NewReport` of
    a job this process just committed (`fresh_jobs`), or a `LeaderReport` read back from the
    store (its shares may be gone: a report dropped since)."""

    @property
    def report_id(self) -> bytes: ...

    @property
    def client_time(self) -> int: ...

    @property
    def public_share(self) -> bytes | None: ...

    @property
    def leader_input_share(self) -> bytes | None: ...

    @property
    def helper_encrypted_share(self) -> bytes | None: ...


@dataclass(slots=True)
class LeaderReport:
    """A `JobReport` read back from the store. (Slots, not frozen: one is made per report, and
    a frozen dataclass costs five times as much to make.)"""

    report_id: bytes
    client_time: int
    public_share: bytes | None
    leader_input_share: bytes | None = field(repr=False)
    helper_encrypted_share: bytes | None = field(repr=False)


@dataclass(frozen=True)
class JobSizes:
    """Reports per leader aggregation job: at least `minimum` (fewer only once they waited
    long enough) and at most `maximum`; an upload group makes the jobs of a task it holds at
    least `from_group` reports of (`put_reports`)."""

    minimum: int
    maximum: int
    from_group: int


@dataclass(frozen=True)
class TokenSpend:
    """A verified token to record as spent: unique per (issuer key, redemption context)."""

    token_key_id: bytes
    context: bytes
    nonce: bytes = field(repr=False)


@dataclass(slots=True)
class NewReport:
    """A validated upload to store (leader): its decrypted input share, the helper's
    ciphertext, its time bucket (time_interval tasks) and the token it spends, if any. (Slots,
    not frozen, as `LeaderReport`.)"""

    task_id: bytes
    report_id: bytes
    client_time: int
    public_share: bytes = field(repr=False)
    leader_input_share: bytes = field(repr=False)
    helper_encrypted_share: bytes = field(repr=False)
    batch_key: bytes | None
    received_at: int
    spend: TokenSpend | None = None


@dataclass(slots=True)
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

    def copy(self) -> ReportOutcome:
        """A copy to change inside a transaction body, which may run again on its inputs
        (`dataclasses.replace` does the same at several times the cost, per report)."""
        return ReportOutcome(
            self.report_id,
            self.client_time,
            self.batch_key,
            self.error,
            self.out_index,
            self.spend,
            self.reason,
        )


@dataclass(frozen=True)
class BatchTotals:
    """A batch's stored aggregate: its shard rows' encoded shares (`ShareSum.merge` adds them
    up), report count, checksum and client-time range."""

    shares: tuple[bytes, ...] = field(repr=False)
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


def opt_bytes(value: Any) -> bytes | None:
    return None if value is None else bytes(value)
