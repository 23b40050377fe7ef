"""Collector configuration from `SAGG_COLLECTOR_*` environment variables (pydantic-settings)."""

from __future__ import annotations

from pydantic import Field, SecretStr, model_validator
from pydantic_settings import SettingsConfigDict

from services.common.auth import ServiceToken
from services.common.crypter import DatastoreKeys
from services.common.http import TlsSettings
from services.common.limits import ServerLimits
from services.common.settings import ServiceSettings
from shared import hpke
from shared.b64url import b64url_decode

__all__ = ["CollectorSettings"]


class CollectorSettings(ServiceSettings, TlsSettings, ServerLimits):
    """Everything `python -m services.collector` needs; secrets are `SecretStr` so they never
    show up in a repr or a log line."""

    model_config = SettingsConfigDict(env_prefix="SAGG_COLLECTOR_", extra="ignore")

    database_url: str = "sqlite:///.data/collector.sqlite3"
    #: The operator's bearer token of the collector's own API (tasks, collections, metrics).
    admin_token: ServiceToken
    #: The recipe server's bearer token: it may only create tasks (``PUT /internal/tasks/{id}``);
    #: unset, only the admin may.
    provisioner_token: ServiceToken | None = None
    #: Keys sealing each task's HPKE private key and bearer token at rest
    #: (`services.common.crypter`); unset stores them in the clear.
    datastore_keys: DatastoreKeys = None
    host: str = "127.0.0.1"
    port: int = Field(default=8083, ge=0, le=65535)
    log_level: str = "info"

    #: Backoff between polls of a pending collection job, when the leader sends no
    #: Retry-After: `poll_interval * 2**n`, capped at `max_backoff` (seconds).
    poll_interval: float = Field(default=1.0, gt=0)
    max_backoff: float = Field(default=30.0, gt=0)
    #: How long one collector process owns a job before another may take it over.
    lease_seconds: float = Field(default=60.0, gt=0)
    #: Per-request timeout towards the leader; kept below the lease.
    request_timeout: float = Field(default=20.0, gt=0)
    #: Consecutive network/5xx failures after which a job is marked failed.
    max_transient_failures: int = Field(default=30, ge=1)
    #: Jobs leased per poller pass.
    batch_size: int = Field(default=16, ge=1)
    #: The HPKE private key (X25519, unpadded base64url; ``..._TASKPROV_HPKE_SECRET_FILE``)
    #: of taskprov tasks (digest §11): their aggregate shares are sealed to the one collector
    #: config the aggregators' operators configure (`taskprov_collector_hpke_config`), so a
    #: task provisioned with ``taskprov`` takes this key instead of a fresh one. Unset, no
    #: taskprov task can be provisioned here.
    taskprov_hpke_secret: SecretStr | None = None
    #: The config id of that key's HpkeConfig.
    taskprov_hpke_config_id: int = Field(default=1, ge=0, le=255)

    def taskprov_keypair(self) -> hpke.HpkeKeyPair | None:
        """The key pair of taskprov tasks, if configured."""
        if self.taskprov_hpke_secret is None:
            return None
        secret = b64url_decode(self.taskprov_hpke_secret.get_secret_value(), "taskprov secret")
        return hpke.from_private_bytes(self.taskprov_hpke_config_id, secret)

    @model_validator(mode="after")
    def _taskprov_key(self) -> CollectorSettings:
        try:
            self.taskprov_keypair()
        except (ValueError, hpke.HpkeError) as exc:
            raise ValueError(f"taskprov_hpke_secret: {exc}") from None
        return self

    @model_validator(mode="after")
    def _timeouts_fit_the_lease(self) -> CollectorSettings:
        # A request still running when the lease ends could race the process that takes over.
        if self.request_timeout >= self.lease_seconds:
            raise ValueError("request_timeout must be shorter than lease_seconds")
        return self
