"""Creating the DAP task behind a recipe, or checking an existing one (DAP-09 §4.2).

The recipe names its task and carries the aggregators' HPKE configs, while the task is bound to
the recipe's digest (SHA-256 of its canonical bytes, `TaskDefinition.recipe_digest`). So the
service picks the task id and fetches the aggregators' HPKE config lists first (DAP-09 §4.4.1,
``GET /hpke_config`` without a task id: an aggregator's keys serve all its tasks), builds the
final recipe and its digest, and only then has `DapProvisioner.create` provision the task with
that digest, the recipe's token policy, its rate validation (001 §4.8) and its aggregator noise
(004 §5), if any (`services.common.provisioning.create_task`: collector first, for its HPKE
config, then leader and helper, each with the provisioning token that party gave the recipe
server: it may create and read back a task's public parameters, never its secrets, through
`services.common.admin_client`). A device then needs no unauthenticated config fetch, the keys
it encrypts to are the logged ones (001 §4.1), and both aggregators refuse reports without a
token of the recipe's issuer or without its binding.

The service only sees the `Provisioner` protocol, so unit tests can substitute a fake.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Literal, Protocol

import httpx
from pydantic import ValidationError

from services.common.admin_client import (
    AdminClient,
    Party,
    PartyTokens,
    ProvisionError,
    TaskMissingError,
)
from services.common.provisioning import TaskParams, create_task
from shared.b64url import b64url_encode
from shared.codec import DecodeError
from shared.dap.ids import TaskId
from shared.dap.messages import HpkeConfigList, QueryType
from shared.dap.task import AggregatorNoise, DapVersion, RateValidation, TokenPolicy
from shared.transport import http_failure
from shared.vdaf.spec import VdafSpec

__all__ = [
    "DapProvisioner",
    "ExistingTask",
    "NewTask",
    "PartyTokens",
    "ProvisionError",
    "Provisioner",
    "TaskMismatchError",
    "TaskMissingError",
    "TaskRequest",
]


class TaskMismatchError(ProvisionError):
    """The existing task differs from what the recipe needs: the draft's error, not an
    outage (the service answers 422)."""


@dataclass(frozen=True)
class TaskRequest:
    """What the recipe asks of its task."""

    vdaf: VdafSpec
    query_type: Literal["time_interval", "fixed_size"]
    min_batch_size: int
    time_precision: int
    expires_in: int | None
    #: 001 §4.8: what both aggregators enforce (the recipe publishes how it was derived).
    rate_validation: RateValidation | None = None
    #: The recipe's aggregator noise (004 §5), provisioned into both aggregators' task.
    aggregator_noise: AggregatorNoise | None = None
    #: How often a batch may be collected (DAP-09 §4.2): once, as the privacy claim of a
    #: recipe counts one release per batch (re-collecting noised shares averages the noise).
    max_batch_query_count: int = 1
    #: The DAP draft of the task (a dap-19 task runs the VDAF-20 `vdaf`).
    dap: DapVersion = "dap-09"

    def expiration(self, now: int) -> int | None:
        """The expiration of a task created at `now`, as `create_task` computes it."""
        return None if self.expires_in is None else now + self.expires_in


@dataclass(frozen=True)
class NewTask:
    """A task to create under a chosen id, bound to a recipe digest and a token policy."""

    task_id: str
    request: TaskRequest
    #: Creation time (seconds); the expiration is `request.expiration(now)`.
    now: int
    #: Unpadded base64url SHA-256 of the final recipe's canonical bytes.
    recipe_digest: str
    tokens: TokenPolicy
    #: A dap-19 task's encoded TaskConfiguration, which `task_id` is derived from.
    task_configuration: bytes | None = None


@dataclass(frozen=True)
class ExistingTask:
    task_id: str
    task_expiration: int | None
    #: What the aggregators enforce (None: no recipe binding / no tokens).
    recipe_digest: str | None
    tokens: TokenPolicy | None
    #: Unpadded base64url HpkeConfigList of each aggregator.
    leader_hpke_configs: str
    helper_hpke_configs: str
    #: A dap-19 task's encoded TaskConfiguration (unpadded base64url), as the leader holds it.
    task_configuration: str | None = None


class Provisioner(Protocol):
    leader_url: str
    helper_url: str

    def new_task_id(self) -> str:
        """A fresh task id (unpadded base64url)."""
        ...

    def hpke_configs(self) -> tuple[str, str]:
        """The leader's and the helper's HpkeConfigList (unpadded base64url)."""
        ...

    def create(self, task: NewTask) -> None:
        """Create the task on collector, leader and helper; ProvisionError on failure."""
        ...

    def existing(self, task_id: str, request: TaskRequest) -> ExistingTask:
        """Check that the leader and helper hold `task_id` with these parameters;
        TaskMissingError if either does not know it."""
        ...


class DapProvisioner:
    def __init__(
        self,
        leader_url: str,
        helper_url: str,
        collector_url: str,
        tokens: PartyTokens | None,
        http: httpx.Client,
    ) -> None:
        self.leader_url = leader_url
        self.helper_url = helper_url
        self.collector_url = collector_url
        self._tokens = tokens
        self._http = http

    def _credentials(self) -> PartyTokens:
        if self._tokens is None:
            raise ProvisionError("no provisioning tokens configured: cannot provision tasks")
        return self._tokens

    def _hpke_configs(self, base: str, what: str, task_id: str | None = None) -> str:
        params = {} if task_id is None else {"task_id": task_id}
        try:
            response = self._http.get(f"{base}/hpke_config", params=params)
        except httpx.HTTPError as exc:
            failure = http_failure(exc)
            raise ProvisionError(f"cannot reach the {what} at {base}: {failure}") from None
        if response.status_code != 200:
            raise ProvisionError(f"the {what} has no HPKE config: HTTP {response.status_code}")
        try:
            HpkeConfigList.decode(response.content)
        except DecodeError as exc:
            raise ProvisionError(f"the {what} sent a malformed HPKE config list: {exc}") from None
        return b64url_encode(response.content)

    def new_task_id(self) -> str:
        return TaskId.random().to_b64url()

    def hpke_configs(self) -> tuple[str, str]:
        return (
            self._hpke_configs(self.leader_url, "leader"),
            self._hpke_configs(self.helper_url, "helper"),
        )

    def create(self, task: NewTask) -> None:
        # Every field of the request is a task parameter of the same name.
        params = TaskParams(
            **{field.name: getattr(task.request, field.name) for field in fields(TaskRequest)},
            leader=self.leader_url,
            helper=self.helper_url,
            collector=self.collector_url,
        )
        create_task(
            params,
            self._credentials(),
            http=self._http,
            now=task.now,
            task_id=task.task_id,
            recipe_digest=task.recipe_digest,
            tokens=task.tokens,
            task_configuration=task.task_configuration,
        )

    def existing(self, task_id: str, request: TaskRequest) -> ExistingTask:
        expiration: int | None = None
        configuration: str | None = None
        bindings: list[tuple[str | None, TokenPolicy | None]] = []
        credentials = self._credentials()
        admin = AdminClient(self._http)
        for party in (
            Party("leader", self.leader_url, credentials.leader),
            Party("helper", self.helper_url, credentials.helper),
        ):
            what = party.name
            task = admin.get_task(party, task_id)
            mismatches = [
                name
                for name, want in (
                    ("vdaf", request.vdaf.model_dump(exclude_none=True)),
                    ("min_batch_size", request.min_batch_size),
                    ("time_precision", request.time_precision),
                    ("query_type", int(_QUERY_TYPES[request.query_type])),
                    ("max_batch_query_count", request.max_batch_query_count),
                    # The peers the recipe names: the task's leader must send the helper's
                    # shares to the operator's helper, not to one a task creator chose.
                    ("leader_endpoint", self.leader_url),
                    ("helper_endpoint", self.helper_url),
                )
                if _normalized(task.get(name)) != want
            ]
            if (task.get("dap") or "dap-09") != request.dap:
                mismatches.append("dap")
            if _rate_validation(task.get("rate_validation"), what) != request.rate_validation:
                mismatches.append("rate_validation")
            try:
                noise = task.get("aggregator_noise")
                if (None if noise is None else AggregatorNoise.model_validate(noise)) != (
                    request.aggregator_noise
                ):
                    mismatches.append("aggregator_noise")
            except ValidationError:
                raise ProvisionError(f"the {what} sent a malformed noise setting") from None
            if mismatches:
                raise TaskMismatchError(
                    f"the {what}'s task {task_id} differs from the recipe in "
                    + ", ".join(mismatches)
                )
            expiration = task.get("task_expiration", expiration)
            configuration = task.get("task_configuration", configuration)
            try:
                tokens = None if task.get("tokens") is None else TokenPolicy(**task["tokens"])
            except (TypeError, ValidationError):
                raise ProvisionError(f"the {what} sent a malformed token policy") from None
            bindings.append((task.get("recipe_digest"), tokens))
        if request.dap == "dap-19" and configuration is None:
            # Devices bind the configuration's bytes: a recipe must publish them.
            raise TaskMismatchError(f"the leader's task {task_id} names no TaskConfiguration")
        if bindings[0] != bindings[1]:
            # Each aggregator enforces its own; no recipe can satisfy both.
            raise ProvisionError(
                f"leader and helper bind task {task_id} to different recipes or token policies"
            )
        return ExistingTask(
            task_id=task_id,
            task_expiration=expiration,
            recipe_digest=bindings[0][0],
            tokens=bindings[0][1],
            leader_hpke_configs=self._hpke_configs(self.leader_url, "leader", task_id),
            helper_hpke_configs=self._hpke_configs(self.helper_url, "helper", task_id),
            task_configuration=configuration,
        )


def _rate_validation(value: object, what: str) -> RateValidation | None:
    if value is None:
        return None
    try:
        return RateValidation.model_validate(value)
    except ValidationError:
        raise ProvisionError(f"the {what} sent a malformed rate validation") from None


_QUERY_TYPES = {"time_interval": QueryType.TIME_INTERVAL, "fixed_size": QueryType.FIXED_SIZE}


def _normalized(value: object) -> object:
    if isinstance(value, dict):
        return {k: v for k, v in value.items() if v is not None}
    if isinstance(value, str) and value.startswith(("http://", "https://")):
        return value.rstrip("/")
    return value
