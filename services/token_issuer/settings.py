"""Token issuer/attester configuration from `SAGG_TOKEN_ISSUER_*` environment variables."""

from __future__ import annotations

from pathlib import Path
from typing import Literal, Self

from pydantic import Field, model_validator
from pydantic_settings import SettingsConfigDict

from services.common.auth import ServiceToken
from services.common.crypter import DatastoreKeys
from services.common.http import TlsSettings
from services.common.limits import ServerLimits
from services.common.settings import ServiceSettings

__all__ = ["TokenIssuerSettings"]


class TokenIssuerSettings(ServiceSettings, TlsSettings, ServerLimits):
    """Everything `python -m services.token_issuer` needs.

    `role` picks the deployment model of RFC 9576 §4: ``joint`` runs attester and issuer in one
    process (each with its own database and keys, §4.2); ``issuer`` and ``attester`` run one
    side each of the split model (§4.4), talking over HTTP authenticated by `attester_secret`.
    Secrets are `SecretStr`, so they never show in a repr or a log line.
    """

    model_config = SettingsConfigDict(env_prefix="SAGG_TOKEN_ISSUER_", extra="ignore")

    role: Literal["joint", "issuer", "attester"] = "joint"
    host: str = "127.0.0.1"
    port: int = Field(default=8090, ge=0, le=65535)
    log_level: str = "info"
    #: Processes serving the port (`services.common.entry.serve_app`), on the same stores:
    #: blind signing is CPU-bound. Each keeps its own ``/metrics`` counters.
    workers: int = Field(default=1, ge=1, le=64)
    #: Bearer token of ``GET /metrics``; unset, the endpoint refuses every caller (403).
    metrics_token: ServiceToken | None = None

    # --- issuer ---
    issuer_database_url: str = "sqlite:///.data/token-issuer.sqlite3"
    #: Keys sealing the issuer's private keys at rest (`services.common.crypter`); unset
    #: stores them in the clear.
    datastore_keys: DatastoreKeys = None
    #: What the directory advertises as `issuer-request-uri` (RFC 9578 §4): where clients send
    #: TokenRequests. Devices go through the attester, so by default its endpoint.
    issuer_request_uri: str = "/attester/token-request"
    #: Key rotation period, how early a new key is published, and how long after its epoch a
    #: key still verifies (its tokens stay redeemable).
    key_epoch_seconds: int = Field(default=7 * 86400, gt=0)
    key_publish_ahead_seconds: int = Field(default=86400, ge=0)
    key_grace_seconds: int = Field(default=2 * 86400, ge=0)
    #: Upper bound of the directory's Cache-Control max-age (RFC 9578 §4 suggests a day).
    directory_max_age: int = Field(default=86400, ge=0)

    #: Bearer secret of the attester-to-issuer channel (split model).
    attester_secret: ServiceToken | None = None

    # --- attester ---
    attester_database_url: str = "sqlite:///.data/token-attester.sqlite3"
    #: The issuer's base URL (split model, role ``attester``).
    issuer_url: str | None = None
    #: PEM files of the manufacturer CAs whose device certificates the attester trusts.
    manufacturer_ca_files: list[Path] = Field(default_factory=list)
    #: N tokens per device per window. A report spends two (one per aggregator,
    #: `shared.dap.extensions`), so the default lets a device send 16 reports a window.
    quota_tokens: int = Field(default=32, ge=1)
    quota_window_seconds: int = Field(default=86400, gt=0)
    #: Lifetime of an attester challenge nonce.
    nonce_ttl_seconds: int = Field(default=60, gt=0)
    #: Timeout of the attester's request to the issuer.
    request_timeout: float = Field(default=10.0, gt=0)

    @model_validator(mode="after")
    def _check_role(self) -> Self:
        if self.role == "issuer" and self.attester_secret is None:
            raise ValueError("role 'issuer' needs attester_secret")
        if self.role == "attester" and (self.issuer_url is None or self.attester_secret is None):
            raise ValueError("role 'attester' needs issuer_url and attester_secret")
        memory = [
            url
            for url in (self.issuer_database_url, self.attester_database_url)
            if url.startswith("sqlite:///") and (":memory:" in url or "mode=memory" in url)
        ]
        if self.workers > 1 and memory:
            # Each worker would count quotas and spend nonces in a store of its own.
            raise ValueError("several workers need stores shared between processes, not memory")
        return self
