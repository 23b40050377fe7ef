"""The states the aggregator's tables store, as enums (DAP-09 §4.5, §4.6).

They are `StrEnum`s stored as their text value, the same strings the store held before they
were enums, so existing databases need no migration and rows compare equal to them.
"""

from __future__ import annotations

from enum import StrEnum


class JobState(StrEnum):
    """``aggregation_jobs.state``: a leader job runs until finished or abandoned; a helper
    job is stored finished, and abandoned when the leader deletes it (DAP-09 §4.5.2.2)."""

    IN_PROGRESS = "in_progress"
    FINISHED = "finished"
    ABANDONED = "abandoned"


class ReportAggregationState(StrEnum):
    """``report_aggregations.state``: one-round Prio3 goes from start to finished or failed."""

    START = "start"
    FINISHED = "finished"
    FAILED = "failed"


class CollectionState(StrEnum):
    """``collection_jobs.state``: pending until its batch is frozen (collecting), then
    finished, failed, or deleted by the collector (DAP-09 §4.6.1)."""

    PENDING = "pending"
    COLLECTING = "collecting"
    FINISHED = "finished"
    FAILED = "failed"
    DELETED = "deleted"


class KeyState(StrEnum):
    """``hpke_keys.state``: an expired key is no longer advertised but still decrypts."""

    ACTIVE = "active"
    EXPIRED = "expired"


class UploadOutcome(StrEnum):
    """What `Datastore.put_reports` made of one upload."""

    STORED = "stored"
    REPLAYED = "replayed"
    COLLECTED = "collected"
    TOKEN_SPENT = "token_spent"


class Stage(StrEnum):
    """``rejection_counts.stage``: where a report was refused."""

    UPLOAD = "upload"
    AGGREGATION = "aggregation"
