"""Aggregator configuration: environment variables prefixed ``SAGG_AGGREGATOR_``."""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator, Field, SecretStr, field_validator, model_validator
from pydantic_settings import SettingsConfigDict

from services.common.auth import ServiceToken
from services.common.crypter import DatastoreKeys
from services.common.http import TlsSettings
from services.common.limits import ServerLimits
from services.common.settings import ServiceSettings
from shared import hpke
from shared.b64url import b64url_decode
from shared.codec import DecodeError
from shared.dap.messages import HpkeConfig
from shared.dap.taskprov import VERIFY_KEY_INIT_SIZE

_URL = re.compile(r"^https?://[^\s/?#]+[^\s?#]*$")


def _key_init(value: SecretStr) -> SecretStr:
    try:
        raw = b64url_decode(value.get_secret_value(), "taskprov_verify_key_init")
    except ValueError as exc:
        raise ValueError(str(exc)) from None
    if len(raw) != VERIFY_KEY_INIT_SIZE:
        raise ValueError(f"taskprov_verify_key_init must be {VERIFY_KEY_INIT_SIZE} bytes")
    return value


#: Taskprov's `verify_key_init`: checked when the settings load, never shown.
TaskprovKeyInit = Annotated[SecretStr, AfterValidator(_key_init)]


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
    #: waited `max_report_wait_s`. The largest is `upload_group_max`, so that a busy leader's
    #: upload group makes one job: jobs of up to 1,000 against 500 cut the fixed costs of the
    #: second one (the helper round trip, a transaction on each side), server CPU ~254 -> ~236
    #: us a DAP-19 report (medians of five alternated runs, #15).
    min_job_size: int = Field(default=100, ge=1)
    max_job_size: int = Field(default=1024, ge=1)
    max_report_wait_s: int = Field(default=5, ge=0)
    #: An upload group commit holding at least this many reports of one time_interval task
    #: makes their jobs in its own transaction (`Datastore.put_reports`); smaller groups wait
    #: for the job creator, which gathers them from several commits into fuller jobs.
    upload_job_group_min: int = Field(default=100, ge=1)
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
    #: MiB of the shares of jobs the upload writer just made, kept for this process's drivers
    #: so they need not read them back (`datastore.fresh_jobs`); past it, the oldest are read.
    #: 64 MiB holds ~24,000 Histogram(100) reports: a burst's backlog on a 2-core leader.
    fresh_job_cache_mib: int = Field(default=64, ge=0)
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
    #: Most uploads stored in one transaction by the group-commit writer (a request's uploads
    #: go in whole, so a larger request makes a larger group). Groups make the jobs of their
    #: reports (`upload_job_group_min`): 1,024 lets a busy leader make jobs of `max_job_size`,
    #: whose fixed costs on both aggregators are ~20 us a report at groups of 256 (#15).
    upload_group_max: int = Field(default=1024, ge=1)

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

    # --- taskprov (digest §11): DAP-19 tasks provisioned by their DAP-Taskprov header ---
    #: The 32-byte `verify_key_init` shared with the peer aggregator out of band (unpadded
    #: base64url; a secret: ``..._TASKPROV_VERIFY_KEY_INIT_FILE`` names a file holding it).
    #: Set, this aggregator opts into the DAP-19 tasks that DAP-Taskprov headers announce
    #: (`services.aggregator.taskprov`): as leader on a client's upload, as helper on the
    #: leader's requests; unset, the header is ignored.
    taskprov_verify_key_init: TaskprovKeyInit | None = None
    #: The peer aggregator's endpoint, exactly as task configurations name it (the helper's
    #: when this one leads, the leader's when it helps): a task naming another is opted out
    #: of, so neither requests nor the aggregator token ever go to a URL a task author chose.
    taskprov_peer_endpoint: str | None = None
    #: The bearer token the leader sends the helper on taskprov tasks (as Janus's peer
    #: aggregator `aggregator_auth_tokens`): the helper opts in only on a request carrying it.
    taskprov_aggregator_auth_token: ServiceToken | None = None
    #: The collector's token on taskprov tasks this aggregator leads; unset, it leads none.
    taskprov_collector_auth_token: ServiceToken | None = None
    #: The collector's HpkeConfig (unpadded base64url) that taskprov tasks' aggregate shares
    #: are sealed to: the one key of whoever collects them.
    taskprov_collector_hpke_config: str | None = None
    #: Operator policy (taskprov's MAY opt-out reasons): the least min_batch_size taken, and
    #: the longest task lifetime (a task without `task_interval` has none: refused when set).
    taskprov_min_batch_size: int = Field(default=1, ge=1)
    taskprov_max_task_lifetime_s: int | None = Field(default=None, ge=1)
    #: Copied into every taskprov task as its `report_expiry_age` (bounds the replay state).
    taskprov_report_expiry_age_s: int | None = Field(default=None, ge=1)
    #: Opt out of new taskprov tasks while this aggregator holds this many tasks: uploads are
    #: unauthenticated, so anyone may announce tasks (taskprov §"Security Considerations"
    #: bounds the storage they take). Always bounded: an operator may raise it, not remove it.
    taskprov_max_tasks: int = Field(default=1_000, ge=1)

    @model_validator(mode="after")
    def _taskprov_complete(self) -> AggregatorSettings:
        if self.taskprov_verify_key_init is None:
            return self
        missing = [
            name
            for name in (
                "taskprov_peer_endpoint",
                "taskprov_aggregator_auth_token",
                "taskprov_collector_hpke_config",
            )
            if getattr(self, name) is None
        ]
        if missing:
            raise ValueError(f"taskprov_verify_key_init needs {', '.join(missing)}")
        assert self.taskprov_collector_hpke_config is not None
        try:
            config = HpkeConfig.decode(
                b64url_decode(self.taskprov_collector_hpke_config, "taskprov_collector_hpke_config")
            )
            hpke.check_suite(config.kem_id, config.kdf_id, config.aead_id)
        except (ValueError, DecodeError, hpke.HpkeError) as exc:
            raise ValueError(f"taskprov_collector_hpke_config: {exc}") from None
        return self

    @field_validator("token_issuers")
    @classmethod
    def _issuer_urls(cls, values: list[str]) -> list[str]:
        for value in values:
            if not _URL.match(value):
                raise ValueError("token issuers must be http:// or https:// URLs")
        return [value.rstrip("/") for value in values]
