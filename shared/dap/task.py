"""A DAP task's configuration, as every party learns it out of band (DAP-09 §4.2).

`TaskDefinition` is what the aggregators are provisioned with (one per role: the secrets each
role holds differ); `CollectorTask` is the collector's view. Binary values are unpadded base64url
strings, as in the interop test API, so that both serialize to JSON and TOML unchanged.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from shared.b64url import b64url_decode, b64url_encode
from shared.codec import DecodeError
from shared.dap.ids import TaskId
from shared.dap.messages import HpkeConfig, QueryType
from shared.dap.messages19 import TaskConfiguration
from shared.dap.task_configuration import check_against, task_configuration
from shared.dap.taskprov import task_id_of
from shared.dp.gaussian import analytic_gaussian_sigma
from shared.vdaf.spec import VdafSpec, VdafVersion

Role = Literal["leader", "helper"]
#: The DAP draft a task speaks, fixed when it is created; each pairs with one VDAF draft
#: (DAP-09 with VDAF-08, DAP-19 with VDAF-20: dap-19.md digest, header).
DapVersion = Literal["dap-09", "dap-19"]
VDAF_OF_DAP: dict[DapVersion, VdafVersion] = {"dap-09": "VDAF-08", "dap-19": "VDAF-20"}


#: Relative slack when checking a stated sigma against the analytic Gaussian calibration: the
#: published tables (004 Table 2) round sigma to 4 decimals, so e.g. 8.5402 may sit a hair
#: below the exact bisection result. The collector recomputes epsilon from sigma itself, so this
#: slack never inflates a stated guarantee.
CALIBRATION_RTOL = 1e-4


def _rational_text(value: object, what: str) -> str:
    """A positive rational as text: a decimal string ("8.5402"), "p/q", an int or a float.

    Floats are taken by their shortest repr (8.5402 -> "8.5402"), i.e. the decimal the user
    typed, not the binary double nearest to it; the samplers then read it as an exact Fraction.
    """
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise ValueError(f"{what} must be a decimal string or a number")
    text = repr(value) if isinstance(value, float) else str(value).strip()
    try:
        number = Fraction(text)
    except (ValueError, ZeroDivisionError) as exc:
        raise ValueError(f"{what} is not a rational number: {text!r}") from exc
    if number <= 0:
        raise ValueError(f"{what} must be positive")
    return text


class AggregatorNoise(BaseModel):
    """Aggregator randomization (004 §5, §6.1.2): each aggregator adds independent noise of
    this distribution to every coordinate of its aggregate share before it leaves.

    * ``discrete_gaussian``: N_Z(0, sigma^2), `sigma` given (decimal string or number; read as an
      exact rational, so the sampler's sigma^2 is exactly sigma * sigma).
    * ``discrete_laplace``: P[Z = z] proportional to exp(-|z| / scale), `scale` given likewise.

    Optionally the budget the parameter was calibrated for: `epsilon`, `delta` and the
    `sensitivity` (L2 for the Gaussian, L1 for the Laplace) of the aggregate to one client
    (sqrt(2) for a one-hot histogram under replacement). When given, the parameter is checked
    against the calibration of `shared.dp.gaussian.analytic_gaussian_sigma` (Gaussian) or
    scale >= sensitivity / epsilon (Laplace), with `CALIBRATION_RTOL` slack. The budget holds
    with one honest aggregator (004 §5: that aggregator's noise alone suffices).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    mechanism: Literal["discrete_gaussian", "discrete_laplace"]
    sigma: str | None = None
    scale: str | None = None
    epsilon: float | None = Field(default=None, gt=0)
    delta: float | None = Field(default=None, ge=0, lt=1)
    sensitivity: float | None = Field(default=None, gt=0)

    @field_validator("sigma", "scale", mode="before")
    @classmethod
    def _rational(cls, value: object) -> object:
        return None if value is None else _rational_text(value, "the noise parameter")

    @model_validator(mode="after")
    def _calibrated(self) -> AggregatorNoise:
        gaussian = self.mechanism == "discrete_gaussian"
        if gaussian and (self.sigma is None or self.scale is not None):
            raise ValueError("discrete_gaussian takes sigma (and no scale)")
        if not gaussian and (self.scale is None or self.sigma is not None):
            raise ValueError("discrete_laplace takes scale (and no sigma)")
        if self.epsilon is None:
            if self.delta is not None or self.sensitivity is not None:
                raise ValueError("delta and sensitivity only come with epsilon")
            return self
        if self.sensitivity is None:
            raise ValueError("a calibration needs the sensitivity")
        if gaussian:
            if self.delta is None or self.delta <= 0:
                raise ValueError("a discrete_gaussian calibration needs 0 < delta < 1")
            need = analytic_gaussian_sigma(self.epsilon, self.delta, self.sensitivity)
            if self.sigma_float < need * (1 - CALIBRATION_RTOL):
                raise ValueError(
                    f"sigma {self.sigma} is below {need:.6g}, the analytic Gaussian sigma for "
                    f"epsilon={self.epsilon:g}, delta={self.delta:g}, "
                    f"sensitivity={self.sensitivity:g}"
                )
        else:
            if self.delta:
                raise ValueError("discrete_laplace is pure DP: delta must be absent or 0")
            need = self.sensitivity / self.epsilon
            assert self.scale is not None
            if float(Fraction(self.scale)) < need * (1 - CALIBRATION_RTOL):
                raise ValueError(f"scale {self.scale} is below sensitivity/epsilon = {need:.6g}")
        return self

    @property
    def parameter(self) -> Fraction:
        """sigma^2 for the Gaussian, the scale for the Laplace: what the samplers take."""
        if self.sigma is not None:
            return Fraction(self.sigma) ** 2
        assert self.scale is not None
        return Fraction(self.scale)

    @property
    def sigma_float(self) -> float:
        assert self.sigma is not None
        return float(Fraction(self.sigma))

    @property
    def variance(self) -> float:
        """Variance of one aggregator's noise on one coordinate.

        Gaussian: sigma^2, an upper bound (Var N_Z(0, sigma^2) < sigma^2, CKS20); Laplace:
        2 e^(-1/t) / (1 - e^(-1/t))^2, exact for the discrete Laplace of scale t.
        """
        if self.sigma is not None:
            return self.sigma_float**2
        r = math.exp(-1 / float(self.parameter))
        return 2 * r / (1 - r) ** 2


class _TaskCommon(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    task_id: str
    leader_endpoint: str = Field(min_length=1)
    query_type: QueryType
    vdaf: VdafSpec
    dap: DapVersion = "dap-09"
    #: A DAP-19 task's encoded TaskConfiguration (unpadded base64url; DAP-19 §4.2): the exact
    #: bytes both HPKE AADs bind, kept as provisioned and never re-serialised (digest §3).
    task_configuration: str | None = None
    #: Provisioned by taskprov (digest §11): every request about the task to the next party
    #: (client -> leader, leader -> helper, collector -> leader) announces its configuration
    #: in the `DAP-Taskprov` header, and its id is the one taskprov derives from it. None (not
    #: False) otherwise, so that definitions stored before this member compare identical.
    taskprov: bool | None = None

    @model_validator(mode="after")
    def _vdaf_matches_dap(self) -> _TaskCommon:
        if self.vdaf.draft != VDAF_OF_DAP[self.dap]:
            raise ValueError(
                f"a {self.dap} task runs {VDAF_OF_DAP[self.dap]}, not {self.vdaf.draft}"
            )
        if self.task_configuration is not None and self.dap != "dap-19":
            raise ValueError("task_configuration is for dap-19 tasks")
        if self.taskprov:
            raw = self.configuration_bytes
            if raw is None:
                raise ValueError("a taskprov task carries its task_configuration")
            if task_id_of(raw).to_b64url() != self.task_id:
                raise ValueError("a taskprov task's id is the one taskprov derives (digest §11)")
        return self

    @property
    def configuration_bytes(self) -> bytes | None:
        """The encoded TaskConfiguration, as provisioned (None: none was)."""
        if self.task_configuration is None:
            return None
        return b64url_decode(self.task_configuration, "task_configuration")

    @property
    def configuration(self) -> TaskConfiguration:
        """The TaskConfiguration (ValueError when none was provisioned)."""
        raw = self.configuration_bytes
        if raw is None:
            raise ValueError(f"task {self.task_id} has no TaskConfiguration")
        return TaskConfiguration.decode(raw)

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

    `key_ids` pins the issuer keys (base64url token_key_id, SHA-256 of the public key, RFC 9578
    §6.5) whose tokens the aggregators accept: a token under any other key of the issuer's
    directory is refused. Without the pin a malicious issuer could sign each device's tokens
    with a key of its own and so tag every report with its device (RFC 9576 §6.2: per-client
    keys break unlinkability). Empty pins nothing and accepts no token: `TaskDefinition`
    refuses it.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    issuer_url: str = Field(min_length=1)
    issuer_name: str = Field(min_length=1, max_length=255)
    window_seconds: int = Field(default=86_400, ge=1)
    key_ids: tuple[str, ...] = ()

    @field_validator("key_ids")
    @classmethod
    def _key_ids(cls, values: tuple[str, ...]) -> tuple[str, ...]:
        for value in values:
            if len(b64url_decode(value, "token key id")) != 32:
                raise ValueError("a token key id is 32 bytes")
        if len(set(values)) != len(values):
            raise ValueError("token key ids must not repeat")
        return values

    def pins(self, token_key_id: bytes) -> bool:
        """Whether a token under this key id may be accepted."""
        return b64url_encode(token_key_id) in self.key_ids


class RateValidation(BaseModel):
    """001 §4.8 rate validation: the leader and the helper expect about
    `expected_reports_per_bucket` (R) aggregated reports per `time_precision` bucket, and refuse
    to release an aggregate share of a batch that has reports in a bucket holding more than
    `max_multiple` (M) x R of them (a sybil surge). With the honest rate near R, a batch that
    passes holds at least 1/M honest reports.

    A bucket's count is every report of the task aggregated with a client time in it, whatever
    batch it went to; for fixed_size tasks the buckets checked are those of the client times in
    the batch, so a surge spread over several leader-selected batches is still seen.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    expected_reports_per_bucket: int = Field(ge=1)
    #: The bounds also refuse NaN and infinity.
    max_multiple: float = Field(default=2.0, ge=1, le=1_000_000)

    @property
    def max_reports_per_bucket(self) -> int:
        """floor(M x R), computed exactly from M's decimal form (a count above it is refused)."""
        return math.floor(Fraction(repr(self.max_multiple)) * self.expected_reports_per_bucket)


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
    #: Reports older than this (by their timestamp) are refused and their data, replay
    #: protection included, deleted: without it the anti-replay set grows forever (DAP-09
    #: §4.5.1.4 lets an aggregator bound it by refusing reports older than what it keeps).
    report_expiry_age: int | None = Field(default=None, ge=1)
    collector_hpke_config: str
    aggregator_auth_token: str = Field(min_length=16)
    collector_auth_token: str | None = Field(default=None, min_length=16)
    #: b64url SHA-256 of the recipe's canonical bytes: when set, both aggregators accept only
    #: reports that bind this recipe and this task's min_batch_size (001 §4.8).
    recipe_digest: str | None = None
    tokens: TokenPolicy | None = None
    #: 004 §5: noise this aggregator adds to its aggregate share (both aggregators hold the
    #: same setting); None: no aggregator randomization.
    aggregator_noise: AggregatorNoise | None = None
    #: 001 §4.8: refuse batches with a time bucket above M x the expected report rate (both
    #: aggregators hold the same setting); None: no rate validation.
    rate_validation: RateValidation | None = None

    @model_validator(mode="after")
    def _dap19_consistent(self) -> TaskDefinition:
        """An aggregator's task without `task_configuration` derives it from its fields
        (`shared.dap.task_configuration`); either way the bytes must say what it says."""
        if self.dap != "dap-19":
            return self
        if self.max_batch_query_count != 1:
            raise ValueError("a dap-19 task collects each batch once: max_batch_query_count 1")
        try:
            config, _ = task_configuration(self)
        except DecodeError as exc:
            raise ValueError(f"task_configuration: {exc}") from exc
        check_against(config, self)
        return self

    @model_validator(mode="after")
    def _verify_key_is_valid(self) -> TaskDefinition:
        size = self.vdaf.verify_key_size
        if len(b64url_decode(self.vdaf_verify_key, "vdaf_verify_key")) != size:
            raise ValueError(f"vdaf_verify_key must be {size} bytes")
        return self

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
        if self.tokens is not None and not self.tokens.key_ids:
            raise ValueError("tokens.key_ids: a task that requires tokens must pin issuer keys")
        return self

    @property
    def verify_key(self) -> bytes:
        return b64url_decode(self.vdaf_verify_key, "vdaf_verify_key")

    @property
    def collector_config(self) -> HpkeConfig:
        return HpkeConfig.decode(b64url_decode(self.collector_hpke_config, "collector_hpke_config"))


class CollectorTaskInfo(_TaskCommon):
    """The collector's task without its secret: what the collector's ``GET /internal/tasks/{id}``
    answers and what the analysis of a collection needs (how to decode, what noise was added)."""

    min_batch_size: int = Field(default=1, ge=1)
    time_precision: int = Field(default=1, ge=1)
    #: The aggregators' noise setting (the same as in their `TaskDefinition`): the collector
    #: decodes the aggregate as signed integers and accounts for the noise when it is set.
    aggregator_noise: AggregatorNoise | None = None

    @model_validator(mode="after")
    def _configuration_agrees(self) -> CollectorTaskInfo:
        """A DAP-19 task's configuration says what the collector's task says (the helper's
        URL aside: the collector never talks to it)."""
        if self.task_configuration is not None:
            try:
                config = self.configuration
            except DecodeError as exc:
                raise ValueError(f"task_configuration: {exc}") from exc
            check_against(config, self)
        return self


class CollectorTask(CollectorTaskInfo):
    """The collector's view of a task: where to collect, how to authenticate, how to decode."""

    collector_auth_token: str = Field(min_length=16)

    def info(self) -> CollectorTaskInfo:
        """The task without the token it authenticates to the leader with."""
        return CollectorTaskInfo.model_validate(self.model_dump(exclude={"collector_auth_token"}))
