"""Recipe server configuration from `SAGG_RECIPE_SERVER_*` environment variables."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Self

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator
from pydantic_settings import SettingsConfigDict

from services.common.auth import ServiceToken
from services.common.http import TlsSettings
from services.common.limits import ServerLimits
from services.common.settings import ServiceSettings
from shared.files import UnsafePathError, read_private

__all__ = ["AnalystGrant", "RecipeServerSettings", "TokenIssuerGrant"]

_URL = re.compile(r"^https?://\S+$")
#: A token key id: unpadded base64url of 32 bytes (RFC 9578 §6.5).
_KEY_ID = r"^[A-Za-z0-9_-]{43}$"


class AnalystGrant(BaseModel):
    """An analyst: the SHA-256 (hex) of their bearer token and the analysis ids they own.

    Only the hash is configured, so the settings hold no analyst secret. An empty
    `analysis_prefixes` lets the analyst publish under any analysis id.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(min_length=1, max_length=64)
    token_sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    analysis_prefixes: tuple[str, ...] = ()


class TokenIssuerGrant(BaseModel):
    """A token issuer recipes may name: its URL, its token challenges' issuer_name and token
    window (unset: the URL's authority and a day), and the key ids pinned for it (at least
    one: aggregators and devices accept tokens under these keys only)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    url: str = Field(pattern=_URL.pattern, max_length=2048)
    issuer_name: str | None = Field(default=None, min_length=1, max_length=255)
    window_seconds: int | None = Field(default=None, ge=1, le=366 * 86400)
    key_ids: tuple[Annotated[str, Field(pattern=_KEY_ID)], ...] = Field(min_length=1)

    @field_validator("url")
    @classmethod
    def _bare(cls, value: str) -> str:
        return value.rstrip("/")


class RecipeServerSettings(ServiceSettings, TlsSettings, ServerLimits):
    """Everything `python -m services.recipe_server` needs; secrets are `SecretStr`."""

    model_config = SettingsConfigDict(env_prefix="SAGG_RECIPE_SERVER_", extra="ignore")

    database_url: str = "sqlite:///.data/recipe-server.sqlite3"
    host: str = "127.0.0.1"
    port: int = Field(default=8086, ge=0, le=65535)
    log_level: str = "info"
    pg_pool_size: int = Field(default=4, ge=1)

    #: The Ed25519 signing key as an unpadded base64url 32-byte seed; if unset, the key is
    #: read from `signing_key_file`, which is created (mode 0600) when missing.
    signing_key: SecretStr | None = None
    signing_key_file: Path = Path(".data/recipe-server.key")

    #: A single analyst token allowed to publish any analysis (name "analyst"), and/or
    #: per-analyst grants by token hash (JSON list in the environment).
    analyst_token: ServiceToken | None = None
    analysts: list[AnalystGrant] = Field(default_factory=list)

    #: Where tasks are provisioned: the DAP parties, and the provisioning token each of them
    #: gave the recipe server (it creates tasks with them, never reads their secrets or
    #: manages them: no admin token of any party is held here). All three or none. These are
    #: the only leader and helper a recipe of this server names (a draft cannot name any).
    leader_url: str = "http://127.0.0.1:8081"
    helper_url: str = "http://127.0.0.1:8082"
    collector_url: str = "http://127.0.0.1:8083"
    leader_provisioner_token: ServiceToken | None = None
    helper_provisioner_token: ServiceToken | None = None
    collector_provisioner_token: ServiceToken | None = None
    request_timeout: float = Field(default=30.0, gt=0)

    #: Bearer token of ``GET /metrics``; unset, the endpoint refuses every caller (403).
    metrics_token: ServiceToken | None = None

    #: The token issuer recipes name unless the analyst's draft names another allowed one,
    #: with the key ids pinned for it (required with the URL: the only keys whose tokens
    #: count), its token challenges' issuer_name and the token window the recipe server
    #: provisions tasks with; unset: the URL's authority and a day.
    token_issuer_url: str | None = Field(default=None, pattern=_URL.pattern)
    token_key_ids: list[Annotated[str, Field(pattern=_KEY_ID)]] = Field(default_factory=list)
    #: Or a file holding them, one per line (what `sagg keys pin-issuer` writes).
    token_key_ids_file: Path | None = None
    token_issuer_name: str | None = Field(default=None, min_length=1, max_length=255)
    token_window_seconds: int | None = Field(default=None, ge=1, le=366 * 86400)
    #: Further issuers a draft may name (JSON list of `TokenIssuerGrant`); a draft naming any
    #: issuer not configured here or above is refused.
    token_issuers: list[TokenIssuerGrant] = Field(default_factory=list)

    @field_validator("leader_url", "helper_url", "collector_url")
    @classmethod
    def _urls(cls, value: str) -> str:
        if not _URL.match(value):
            raise ValueError("must be an http:// or https:// URL")
        return value.rstrip("/")

    @model_validator(mode="after")
    def _someone_can_publish(self) -> Self:
        if self.analyst_token is None and not self.analysts:
            raise ValueError("set analyst_token or analysts: nobody could publish")
        return self

    @model_validator(mode="after")
    def _issuer_keys_pinned(self) -> Self:
        if self.token_key_ids_file is not None:
            if self.token_key_ids:
                raise ValueError("set token_key_ids or token_key_ids_file, not both")
            try:
                lines = read_private(self.token_key_ids_file).decode().split()
            except UnsafePathError as exc:
                raise ValueError(f"token_key_ids_file: {exc}") from None
            except OSError as exc:
                raise ValueError(f"token_key_ids_file: cannot read it: {exc.strerror}") from None
            if not all(re.fullmatch(_KEY_ID, line) for line in lines):
                raise ValueError("token_key_ids_file: one base64url key id per line")
            self.token_key_ids = lines
        if self.token_issuer_url is not None and not self.token_key_ids:
            raise ValueError("token_key_ids: pin the token issuer's key ids (at least one)")
        if self.token_issuer_url is None and (
            self.token_key_ids or self.token_issuer_name or self.token_window_seconds
        ):
            raise ValueError(
                "token_key_ids, _issuer_name and _window_seconds need token_issuer_url"
            )
        return self

    def allowed_token_issuers(self) -> list[TokenIssuerGrant]:
        """Every issuer a recipe may name, the default (`token_issuer_url`) first."""
        issuers = list(self.token_issuers)
        if self.token_issuer_url is not None:
            default = TokenIssuerGrant(
                url=self.token_issuer_url,
                issuer_name=self.token_issuer_name,
                window_seconds=self.token_window_seconds,
                key_ids=tuple(self.token_key_ids),
            )
            issuers.insert(0, default)
        return issuers

    @model_validator(mode="after")
    def _every_party_or_none(self) -> Self:
        tokens = (
            self.leader_provisioner_token,
            self.helper_provisioner_token,
            self.collector_provisioner_token,
        )
        if None in tokens and any(t is not None for t in tokens):
            raise ValueError(
                "set leader_, helper_ and collector_provisioner_token together: "
                "a task needs all three parties"
            )
        return self
