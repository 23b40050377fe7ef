"""The aggregator's persistent state (DAP-09 §4.4-§4.6, digest §7.5): storage only.

`Datastore` is one object over one `Database`; each public method is a unit of work run as one
named, retried transaction (`Database.run`, with its metrics). The methods take computed
values: the aggregator adds shares up, draws noise and decides rate validation
(`services.aggregator.aggregate`, `.noise`, `.rate_policy`); where such a computation depends on
rows read in the same transaction, it comes in as a pure callable (`ShareSum`, `RatePolicy`,
`BatchRules`,
the noise draw), so the decision and the write stay atomic.

Parts, one module each: `schema` (migrations as .sql files, the table list), `states` (the
enums the tables hold), `records`, `tasks`, `keys`, `uploads`, `leases`, `leader_jobs`,
`aggregation_jobs` (the job rows both roles write), `fresh_jobs` (the reports of the jobs an
upload group just made, for this process's driver), `job_shares` and `job_share_files` (those
jobs' shares, in a row or, on SQLite, a file), `helper_jobs`, `collection`,
`batch_aggregations` (the running aggregates every path writes),
`garbage` and `stats`.
"""

from __future__ import annotations

from services.aggregator.datastore.batch_aggregations import BatchStore
from services.aggregator.datastore.collection import CollectionStore
from services.aggregator.datastore.garbage import GarbageStore
from services.aggregator.datastore.helper_jobs import HelperJobStore
from services.aggregator.datastore.keys import KeyStore
from services.aggregator.datastore.leader_jobs import LeaderJobStore
from services.aggregator.datastore.leases import LeaseStore
from services.aggregator.datastore.records import (
    BatchRules,
    BatchTotals,
    BucketCount,
    EarlierQueries,
    Garbage,
    HpkeKeyRecord,
    JobReport,
    JobSizes,
    LeaderReport,
    Lease,
    LeaseLostError,
    NewReport,
    RatePolicy,
    Refusal,
    ReportOutcome,
    ShareSum,
    TaskGoneError,
    TaskRecord,
    TokenSpend,
)
from services.aggregator.datastore.schema import MIGRATIONS, TASK_TABLES
from services.aggregator.datastore.states import (
    CollectionState,
    JobState,
    KeyState,
    ReportAggregationState,
    Stage,
    UploadOutcome,
)
from services.aggregator.datastore.stats import REFUSAL_RATE_EXCEEDED, StatsStore
from services.aggregator.datastore.tasks import TaskStore
from services.aggregator.datastore.uploads import UploadStore

__all__ = [
    "MIGRATIONS",
    "REFUSAL_RATE_EXCEEDED",
    "TASK_TABLES",
    "BatchRules",
    "BatchTotals",
    "BucketCount",
    "CollectionState",
    "Datastore",
    "EarlierQueries",
    "Garbage",
    "HpkeKeyRecord",
    "JobReport",
    "JobSizes",
    "JobState",
    "KeyState",
    "LeaderReport",
    "Lease",
    "LeaseLostError",
    "NewReport",
    "RatePolicy",
    "Refusal",
    "ReportAggregationState",
    "ReportOutcome",
    "ShareSum",
    "Stage",
    "TaskGoneError",
    "TaskRecord",
    "TokenSpend",
    "UploadOutcome",
]


class Datastore(
    TaskStore,
    KeyStore,
    UploadStore,
    LeaseStore,
    LeaderJobStore,
    HelperJobStore,
    CollectionStore,
    BatchStore,
    GarbageStore,
    StatsStore,
):
    """The aggregator's store: every part's transactions on one database."""

    def migrate(self) -> int:
        return self.db.migrate(MIGRATIONS)

    def is_migrated(self) -> bool:
        return self.db.schema_version() >= MIGRATIONS[-1].version
