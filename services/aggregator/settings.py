"""Aggregator configuration: environment variables prefixed ``SAGG_AGGREGATOR_``."""

from __future__ import annotations

import re

from pydantic import Field, field_validator
from pydantic_settings import SettingsConfigDict

from services.common.auth import ServiceToken
from services.common.crypter import DatastoreKeys
from services.common.http import TlsSettings
from services.common.limits import ServerLimits
from services.common.settings import ServiceSettings

_URL = re.compile(r"^https?://[^\s/?#]+[^\s?#]*$")


class AggregatorSettings(ServiceSettings, TlsSettings, ServerLimits):
    model_config = SettingsConfigDict(env_prefix="SAGG_AGGREGATOR_", extra="ignore")

    #: ``sqlite:///path/to.db`` or ``postgresql://user@host/db``.
    database_url: str = "sqlite:///sagg-aggregator.db"
    #: The operator's bearer token of the admin API (/internal/...) and /metrics; unset
    #: disables them (every call 403).
    admin_token: ServiceToken | None = None
    #: The recipe server's bearer token: it may create a task and read back its public
    #: parameters (``PUT``/``GET /internal/tasks/{id}``), nothing else; unset, only the admin may.
    provisioner_token: ServiceToken | None = None
    #: Keys sealing the store's secrets (`services.common.crypter`): comma-separated base64url
    #: AES-128 keys, the first seals; unset stores them in the clear.
    datastore_keys: DatastoreKeys = None
    host: str = "127.0.0.1"
    port: int = Field(default=8081, ge=0, le=65535)
    log_level: str = "info"
    #: Run the leader's job drivers in this process (else run them elsewhere).
    run_drivers: bool = True

    #: Reports per aggregation job; a smaller job is made once the oldest waiting report has
    #: waited `max_report_wait_s`.
    min_job_size: int = Field(default=100, ge=1)
    max_job_size: int = Field(default=500, ge=1)
    max_report_wait_s: int = Field(default=5, ge=0)
    #: How long a driver owns a leased job before another may take it over.
    lease_duration_s: int = Field(default=60, ge=1)
    #: A job that failed this many attempts (helper down, 5xx) is abandoned.
    max_job_attempts: int = Field(default=10, ge=1)
    retry_base_s: float = Field(default=1.0, gt=0)
    retry_max_s: float = Field(default=60.0, gt=0)
    #: Driver loop pause when there is nothing to do.
    driver_poll_s: float = Field(default=0.5, gt=0)
    #: Jobs leased per driver iteration.
    driver_batch: int = Field(default=4, ge=1)
    #: Aggregation-job driver threads in this process: while one waits for the helper's
    #: answer, another prepares its own job, so leader and helper work at the same time.
    aggregation_workers: int = Field(default=2, ge=1)
    #: How often a collection job waiting for reports is looked at again; also Retry-After.
    collection_retry_s: int = Field(default=2, ge=1)
    #: Leeway for client clocks running ahead (DAP-09 §4.4.2 "a few minutes").
    clock_skew_s: int = Field(default=300, ge=0)
    #: When the helper finds a report too early, the leader offers it again after this long.
    too_early_retry_s: int = Field(default=60, ge=1)
    helper_timeout_s: float = Field(default=30.0, gt=0)
    #: A task and all its data are deleted this long after its `task_expiration`.
    expired_task_retention_s: int = Field(default=7 * 86400, ge=0)
    #: Rows of each kind one garbage-collection transaction deletes (`drivers.garbage`).
    gc_batch_size: int = Field(default=10_000, ge=1)
    #: Shard rows per batch aggregation (write contention vs. collection cost).
    batch_shards: int = Field(default=8, ge=1)
    pg_pool_size: int = Field(default=8, ge=1)
    #: As a DAP-19 helper, defer aggregation jobs (DAP-19 §3.1): the creation POST is checked
    #: and answered with an empty 200, `Location` ...?step=0 and Retry-After
    #: (`helper_retry_after_s`); the first poll (GET, or the identical POST) after that
    #: prepares the job.
    helper_defer_jobs: bool = False
    helper_retry_after_s: int = Field(default=1, ge=0)
    #: How long the leader's aggregation driver polls a DAP-19 helper that deferred a job
    #: (Retry-After) before releasing it and asking again later.
    helper_poll_s: float = Field(default=5.0, ge=0)
    #: Most reports in one DAP-19 UploadRequest: its body is capped at this many of the task's
    #: largest report.
    upload_max_reports: int = Field(default=1000, ge=1)
    #: Most uploads stored in one transaction by the group-commit writer.
    upload_group_max: int = Field(default=256, ge=1)

    # --- bounded resources (`services.common.limits`) ---
    #: Bodies of every route but uploads (which are capped at the task's largest report): the
    #: helper's aggregation job requests carry up to `max_job_size` report shares.
    max_request_body_bytes: int = Field(default=32 * 1024 * 1024, ge=1)
    #: Uploads being validated or waiting for it; more get 503 with Retry-After.
    upload_pending_max: int = Field(default=1024, ge=1)
    #: Validated uploads waiting for the group-commit writer; more get 503 with Retry-After.
    upload_queue_max: int = Field(default=4096, ge=1)
    #: Seconds after which an upload refused with 503 may be tried again.
    upload_retry_after_s: int = Field(default=1, ge=1)
    #: How long the set of provisioned task ids (which refuses unknown ones without a store
    #: query) and, for unknown HPKE config ids, the key list are trusted before re-reading.
    unknown_id_cache_s: float = Field(default=5.0, ge=0)

    # --- Privacy Pass tokens of tasks with a token policy ---
    #: The token issuers (base URLs) this aggregator trusts, as JSON in the environment: a
    #: task naming any other is refused when provisioned, and no issuer directory is ever
    #: fetched from another URL (a task creator must not make the aggregator send requests
    #: where it likes, nor pick who vouches for clients). Empty: no task may require tokens.
    token_issuers: list[str] = Field(default_factory=list)
    #: A token's window (of the report's time) must have ended no longer ago than this: at
    #: upload (leader) and, more leniently since aggregation runs later, at the helper.
    token_upload_grace_s: int = Field(default=3600, ge=0)
    token_aggregation_grace_s: int = Field(default=2 * 86400, ge=0)
    #: Issuer directory caching: max-age when the issuer sends none, the cap on any max-age,
    #: and the least time between two refetches caused by unknown token key ids.
    issuer_directory_default_max_age_s: int = Field(default=300, ge=0)
    issuer_directory_max_age_cap_s: int = Field(default=86400, ge=0)
    issuer_refetch_min_s: int = Field(default=30, ge=0)
    issuer_timeout_s: float = Field(default=10.0, gt=0)

    @field_validator("token_issuers")
    @classmethod
    def _issuer_urls(cls, values: list[str]) -> list[str]:
        for value in values:
            if not _URL.match(value):
                raise ValueError("token issuers must be http:// or https:// URLs")
        return [value.rstrip("/") for value in values]
