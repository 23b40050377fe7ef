"""A DAP task's configuration, as every party learns it out of band (DAP-09 §4.2).

`TaskDefinition` is what the aggregators are provisioned with (one per role: the secrets each
role holds differ); `CollectorTask` is the collector's view. Binary values are unpadded base64url
strings, as in the interop test API, so that both serialize to JSON and TOML unchanged.
"""

from __future__ import annotations

import base64
import binascii
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from shared.codec import DecodeError
from shared.constants import VERIFY_KEY_SIZE
from shared.dap.ids import TaskId
from shared.dap.messages import HpkeConfig, QueryType
from shared.vdaf.spec import VdafSpec

Role = Literal["leader", "helper"]


def b64url_decode(text: str, what: str) -> bytes:
    """Unpadded base64url (RFC 4648 §5) to bytes; ValueError naming `what` otherwise."""
    if "=" in text or any(c in text for c in "+/ \n"):
        raise ValueError(f"{what} must be unpadded base64url")
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError) as exc:
        raise ValueError(f"{what} is not valid base64url") from exc


def b64url_encode(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


class _TaskCommon(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    task_id: str
    leader_endpoint: str = Field(min_length=1)
    query_type: QueryType
    vdaf: VdafSpec

    @field_validator("task_id")
    @classmethod
    def _task_id_is_valid(cls, value: str) -> str:
        try:
            TaskId.from_b64url(value)
        except DecodeError as exc:
            raise ValueError(str(exc)) from exc
        return value

    @field_validator("query_type", mode="before")
    @classmethod
    def _query_type_by_name(cls, value: object) -> object:
        names = {"time_interval": QueryType.TIME_INTERVAL, "fixed_size": QueryType.FIXED_SIZE}
        return names.get(value, value) if isinstance(value, str) else value

    @property
    def id(self) -> TaskId:
        return TaskId.from_b64url(self.task_id)


class TokenPolicy(BaseModel):
    """Reports of the task must spend a Privacy Pass token of this issuer (RFC 9577, type 2).

    The token's challenge binds the task and a time window (`shared.dap.extensions`), so a token
    is good for one task and window; each aggregator accepts each token nonce once.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    issuer_url: str = Field(min_length=1)
    issuer_name: str = Field(min_length=1, max_length=255)
    window_seconds: int = Field(default=86_400, ge=1)


class TaskDefinition(_TaskCommon):
    """An aggregator's task: parameters shared with its peer plus the secrets of its role.

    - The leader holds `aggregator_auth_token` (sent to the helper) and `collector_auth_token`
      (checked on collection requests).
    - The helper holds `aggregator_auth_token` (checked on the leader's requests).
    Both hold the verify key and the collector's HPKE config.
    """

    role: Role
    helper_endpoint: str = Field(min_length=1)
    vdaf_verify_key: str
    min_batch_size: int = Field(ge=1)
    max_batch_size: int | None = Field(default=None, ge=1)
    time_precision: int = Field(ge=1)
    max_batch_query_count: int = Field(default=1, ge=1)
    task_expiration: int | None = Field(default=None, ge=0)
    collector_hpke_config: str
    aggregator_auth_token: str = Field(min_length=16)
    collector_auth_token: str | None = Field(default=None, min_length=16)
    #: b64url SHA-256 of the recipe's canonical bytes: when set, both aggregators accept only
    #: reports that bind this recipe and this task's min_batch_size (001 §4.8).
    recipe_digest: str | None = None
    tokens: TokenPolicy | None = None

    @field_validator("vdaf_verify_key")
    @classmethod
    def _verify_key_is_valid(cls, value: str) -> str:
        if len(b64url_decode(value, "vdaf_verify_key")) != VERIFY_KEY_SIZE:
            raise ValueError(f"vdaf_verify_key must be {VERIFY_KEY_SIZE} bytes")
        return value

    @field_validator("collector_hpke_config")
    @classmethod
    def _hpke_config_is_valid(cls, value: str) -> str:
        try:
            HpkeConfig.decode(b64url_decode(value, "collector_hpke_config"))
        except DecodeError as exc:
            raise ValueError(f"collector_hpke_config: {exc}") from exc
        return value

    @model_validator(mode="after")
    def _consistent(self) -> TaskDefinition:
        if self.max_batch_size is not None:
            if self.query_type != QueryType.FIXED_SIZE:
                raise ValueError("max_batch_size is only for fixed_size tasks")
            if self.max_batch_size < self.min_batch_size:
                raise ValueError("max_batch_size must be at least min_batch_size")
        if self.role == "leader" and self.collector_auth_token is None:
            raise ValueError("the leader needs collector_auth_token")
        if self.role == "helper" and self.collector_auth_token is not None:
            raise ValueError("the helper must not hold the collector's token")
        return self

    @property
    def verify_key(self) -> bytes:
        return b64url_decode(self.vdaf_verify_key, "vdaf_verify_key")

    @property
    def collector_config(self) -> HpkeConfig:
        return HpkeConfig.decode(b64url_decode(self.collector_hpke_config, "collector_hpke_config"))


class CollectorTask(_TaskCommon):
    """The collector's view of a task: where to collect, how to authenticate, how to decode."""

    collector_auth_token: str = Field(min_length=16)
    min_batch_size: int = Field(default=1, ge=1)
    time_precision: int = Field(default=1, ge=1)
