"""Provisioning a DAP task on all three parties (DAP-09 §4.2, DAP-19 §4.2: tasks are agreed
out of band).

Order matters: the collector is provisioned first because it generates the HPKE key pair the
aggregators seal aggregate shares to; then the leader and the helper get their `TaskDefinition`
through the admin API (`services.common.admin_client`: 201 created, 200 identical, 409
different), each with its own credential (`PartyTokens`). `sagg task create` (`deploy`) and the
recipe server (`services.recipe_server.provision`) both provision through `create_task`.

A DAP-19 task is its encoded TaskConfiguration (DAP-19 §4.2, digest §3): every party gets the
same bytes (`task_configuration` of each definition) and binds them into both HPKE AADs. They
come either from the parameters (`new_configuration`: 16 random bytes of `task_info`, as
taskprov advises against task enumeration, the URLs exactly as given, a `task_interval`
extension when the task expires) or from a blob someone else wrote
(`TaskParams.from_configuration`, ``sagg task create --dap 19 --task-configuration``), and the
task id is the taskprov derivation from those bytes (`shared.dap.taskprov`).
"""

from __future__ import annotations

import secrets
import time
from dataclasses import replace
from typing import Any, Literal

import httpx
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from services.common.admin_client import AdminClient, Party, PartyTokens, ProvisionError
from services.common.http import http_client
from shared.b64url import b64url_encode
from shared.codec import DecodeError
from shared.dap.ids import TaskId
from shared.dap.messages import QueryType
from shared.dap.messages19 import TaskConfiguration
from shared.dap.task import (
    VDAF_OF_DAP,
    AggregatorNoise,
    CollectorTask,
    DapVersion,
    RateValidation,
    TaskDefinition,
    TokenPolicy,
)
from shared.dap.task_configuration import FieldValues, derived_configuration
from shared.dap.taskprov import task_id_of
from shared.dap.vdaf_codepoints import vdaf_spec
from shared.transport import TransportPolicy
from shared.vdaf.spec import VdafSpec

__all__ = ["TaskParams", "create_task", "new_configuration"]

#: Bytes of entropy in the `task_info` of a DAP-19 task sagg creates (taskprov's advice).
TASK_INFO_SIZE = 16

_QUERY_TYPE_NAMES: dict[int, Literal["time_interval", "fixed_size"]] = {
    QueryType.TIME_INTERVAL: "time_interval",
    QueryType.FIXED_SIZE: "fixed_size",
}


class TaskParams(BaseModel):
    """The choices behind a new task (flags of `sagg task create`, or its --config file)."""

    model_config = ConfigDict(extra="forbid")

    #: The DAP draft (a dap-19 task runs a VDAF-20 `vdaf`).
    dap: DapVersion = "dap-09"
    vdaf: VdafSpec
    query_type: Literal["time_interval", "fixed_size"] = "time_interval"
    min_batch_size: int = Field(default=10, ge=1)
    max_batch_size: int | None = Field(default=None, ge=1)
    time_precision: int = Field(default=3600, ge=1)
    max_batch_query_count: int = Field(default=1, ge=1)
    expires_in: int | None = Field(default=None, ge=1)
    #: Seconds after which a report is refused and forgotten (bounds the anti-replay set).
    report_expiry_age: int | None = Field(default=None, ge=1)
    #: 001 §4.8: both aggregators refuse batches with a time bucket above M x R reports.
    rate_validation: RateValidation | None = None
    #: 004 §5: noise each aggregator adds to its aggregate share (None: none).
    aggregator_noise: AggregatorNoise | None = None
    leader: str
    helper: str
    collector: str

    @model_validator(mode="after")
    def _consistent(self) -> TaskParams:
        if self.max_batch_size is not None:
            if self.query_type != "fixed_size":
                raise ValueError("max_batch_size applies to fixed_size tasks only")
            if self.max_batch_size < self.min_batch_size:
                raise ValueError("max_batch_size must be at least min_batch_size")
        for name in ("leader", "helper", "collector"):
            url = getattr(self, name)
            if not url.startswith(("http://", "https://")):
                raise ValueError(f"{name} URL must start with http:// or https://")
        if self.vdaf.draft != VDAF_OF_DAP[self.dap]:
            raise ValueError(f"a {self.dap} task runs {VDAF_OF_DAP[self.dap]} (vdaf.version)")
        if self.dap == "dap-19" and (self.max_batch_size or self.max_batch_query_count != 1):
            # DAP-19 §4.6: a batch is collected once, and leader-selected batches have no cap.
            raise ValueError("a dap-19 task has no max_batch_size or max_batch_query_count")
        return self

    @classmethod
    def from_configuration(cls, raw: bytes, collector: str, **choices: Any) -> TaskParams:
        """The parameters an encoded DAP-19 TaskConfiguration fixes, plus `collector` and the
        `choices` it leaves open (noise, rate validation, report expiry). ValueError for bytes
        that are no TaskConfiguration or a task sagg cannot take part in."""
        config = TaskConfiguration.decode(raw)
        reasons = config.opt_out_reasons()
        if reasons:
            raise ValueError("cannot take part in this task: " + "; ".join(reasons))
        try:
            leader = config.leader_aggregator_endpoint.value.decode("ascii")
            helper = config.helper_aggregator_endpoint.value.decode("ascii")
        except UnicodeDecodeError:
            raise ValueError("an endpoint of the configuration is not ASCII") from None
        return cls(
            dap="dap-19",
            vdaf=vdaf_spec(config.vdaf_type, config.vdaf_configuration),
            query_type=_QUERY_TYPE_NAMES[config.batch_mode],
            min_batch_size=config.min_batch_size,
            time_precision=config.time_precision,
            leader=leader,
            helper=helper,
            collector=collector,
            **choices,
        )


def new_configuration(
    vdaf: VdafSpec,
    query_type: Literal["time_interval", "fixed_size"],
    min_batch_size: int,
    time_precision: int,
    endpoints: tuple[str, str],
    expiration: int | None,
) -> bytes:
    """The encoded TaskConfiguration of a new DAP-19 task with the leader and helper at
    `endpoints` (module docstring); a task that expires at `expiration` (seconds) gets the
    `task_interval` [0, expiration] in whole units, the reports DAP-09 would accept."""
    derived = derived_configuration(
        FieldValues(
            leader_endpoint=endpoints[0],
            helper_endpoint=endpoints[1],
            time_precision=time_precision,
            min_batch_size=min_batch_size,
            query_type=QueryType[query_type.upper()],
            vdaf=vdaf,
            task_expiration=expiration,
        )
    )
    return replace(derived, task_info=secrets.token_bytes(TASK_INFO_SIZE)).encode()


def create_task(
    params: TaskParams,
    credentials: PartyTokens | str,
    *,
    http: httpx.Client | None = None,
    now: int | None = None,
    task_id: str | None = None,
    recipe_digest: str | None = None,
    tokens: TokenPolicy | None = None,
    task_configuration: bytes | None = None,
    taskprov_collector_token: str | None = None,
) -> dict[str, Any]:
    """Create a fresh task on collector, leader and helper; returns what a client needs.

    `taskprov_collector_token` makes a taskprov task (dap-19.md §11): only the collector is
    provisioned, with that token (the leader's taskprov setting) and its taskprov key; the
    aggregators opt in when uploads announce it, so it has none of the settings only a
    provisioned aggregator holds (tokens, recipe binding, rate validation, noise, expiry age).

    A dap-19 task binds `task_configuration` (the encoded TaskConfiguration, default a new one
    from `params`), and its id defaults to the taskprov derivation from those bytes.

    `task_id` (default: random) lets a caller fix the id beforehand: the recipe server does, as
    the recipe it binds with `recipe_digest` (b64url SHA-256 of the recipe's canonical bytes)
    names the task. `tokens` makes the aggregators require Privacy Pass tokens. With both,
    the aggregators accept only reports that carry a token and this recipe's binding.
    `credentials` authenticate to each party (a string: the same token to all three).
    """
    if isinstance(credentials, str):
        credentials = PartyTokens.shared(credentials)
    taskprov = taskprov_collector_token is not None
    if taskprov:
        _check_taskprov(params, task_id, recipe_digest, tokens)
    expiration = None
    if params.expires_in is not None:
        expiration = (int(time.time()) if now is None else now) + params.expires_in
    configuration: str | None = None
    if params.dap == "dap-19":
        raw = task_configuration or new_configuration(
            params.vdaf,
            params.query_type,
            params.min_batch_size,
            params.time_precision,
            (params.leader, params.helper),
            expiration,
        )
        configuration = b64url_encode(raw)
        task_id = task_id or task_id_of(raw).to_b64url()
    elif task_configuration is not None:
        raise ProvisionError("only a dap-19 task has a TaskConfiguration")
    if task_id is None:
        task_id = TaskId.random().to_b64url()
    else:
        try:
            TaskId.from_b64url(task_id)
        except DecodeError as exc:
            raise ProvisionError(f"invalid task id: {exc}") from None
    verify_key = b64url_encode(secrets.token_bytes(params.vdaf.verify_key_size))
    aggregator_token = secrets.token_urlsafe(32)
    collector_token = taskprov_collector_token or secrets.token_urlsafe(32)

    own = http is None
    client = http or http_client(TransportPolicy(), timeout=30.0)
    try:
        try:
            collector_task = CollectorTask(
                task_id=task_id,
                leader_endpoint=params.leader,
                query_type=params.query_type,  # type: ignore[arg-type]
                vdaf=params.vdaf,
                dap=params.dap,
                task_configuration=configuration,
                taskprov=taskprov,
                collector_auth_token=collector_token,
                min_batch_size=params.min_batch_size,
                time_precision=params.time_precision,
                aggregator_noise=params.aggregator_noise,
            )
        except ValidationError as exc:
            raise ProvisionError(f"invalid task: {exc.errors()[0]['msg']}") from None
        admin = AdminClient(client)
        answer = admin.put_task(
            Party("collector", params.collector, credentials.collector),
            task_id,
            collector_task.model_dump_json(),
        )
        if "collector_hpke_config" not in answer:
            raise ProvisionError("the collector did not return its HPKE config")
        if taskprov:
            return _client_info(params, task_id, configuration, expiration) | {"taskprov": True}
        common: dict[str, Any] = {
            "task_id": task_id,
            "leader_endpoint": params.leader,
            "helper_endpoint": params.helper,
            "query_type": params.query_type,
            "vdaf": params.vdaf,
            "dap": params.dap,
            "task_configuration": configuration,
            "vdaf_verify_key": verify_key,
            "min_batch_size": params.min_batch_size,
            "max_batch_size": params.max_batch_size,
            "time_precision": params.time_precision,
            "max_batch_query_count": params.max_batch_query_count,
            "task_expiration": expiration,
            "report_expiry_age": params.report_expiry_age,
            "collector_hpke_config": answer["collector_hpke_config"],
            "aggregator_auth_token": aggregator_token,
            "recipe_digest": recipe_digest,
            "tokens": tokens,
            "rate_validation": params.rate_validation,
            "aggregator_noise": params.aggregator_noise,
        }
        try:
            leader = TaskDefinition(**common, role="leader", collector_auth_token=collector_token)
            helper = TaskDefinition(**common, role="helper")
        except ValidationError as exc:
            raise ProvisionError(f"invalid task: {exc.errors()[0]['msg']}") from None
        for party, definition in (
            (Party("leader", params.leader, credentials.leader), leader),
            (Party("helper", params.helper, credentials.helper), helper),
        ):
            admin.put_task(party, task_id, definition.model_dump_json())
    finally:
        if own:
            client.close()

    info = _client_info(params, task_id, configuration, expiration)
    if params.report_expiry_age is not None:
        info["report_expiry_age"] = params.report_expiry_age
    if recipe_digest is not None:
        info["recipe_digest"] = recipe_digest
    if tokens is not None:
        info["tokens"] = tokens.model_dump()
    if params.rate_validation is not None:
        info["rate_validation"] = params.rate_validation.model_dump()
    if params.aggregator_noise is not None:
        info["aggregator_noise"] = params.aggregator_noise.model_dump(exclude_none=True)
    return info


def _client_info(
    params: TaskParams, task_id: str, configuration: str | None, expiration: int | None
) -> dict[str, Any]:
    """What every task's clients and collector need to know of it."""
    info: dict[str, Any] = {
        "task_id": task_id,
        "leader": params.leader,
        "helper": params.helper,
        "collector": params.collector,
        "vdaf": params.vdaf.model_dump(exclude_none=True),
        "dap": params.dap,
        "query_type": params.query_type,
        "time_precision": params.time_precision,
        "min_batch_size": params.min_batch_size,
    }
    if configuration is not None:
        info["task_configuration"] = configuration
    if params.max_batch_size is not None:
        info["max_batch_size"] = params.max_batch_size
    if expiration is not None:
        info["task_expiration"] = expiration
    return info


def _check_taskprov(
    params: TaskParams,
    task_id: str | None,
    recipe_digest: str | None,
    tokens: TokenPolicy | None,
) -> None:
    """A taskprov task has what its TaskConfiguration says and nothing only a provisioned
    aggregator would hold; its id is the configuration's."""
    if params.dap != "dap-19":
        raise ProvisionError("taskprov provisions DAP-19 tasks only")
    aggregator_only = {
        "a task id": task_id,
        "a recipe binding": recipe_digest,
        "tokens": tokens,
        "rate_validation": params.rate_validation,
        "aggregator_noise": params.aggregator_noise,
        "report_expiry_age": params.report_expiry_age,
    }
    given = [name for name, value in aggregator_only.items() if value is not None]
    if given:
        raise ProvisionError(
            f"a taskprov task cannot have {', '.join(given)}: the aggregators learn the task "
            "only from its TaskConfiguration"
        )
