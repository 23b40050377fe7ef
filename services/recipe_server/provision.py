"""Creating the DAP task behind a recipe, or checking an existing one (DAP-09 §4.2).

`DapProvisioner` reuses `deploy.tasks.create_task` (collector first, for its HPKE config, then
leader and helper through their admin APIs), then fetches each aggregator's HPKE config list
(DAP-09 §4.4.1, ``GET /hpke_config?task_id=``) so that the recipe can carry them: a device then
needs no unauthenticated fetch, and the keys it encrypts to are the logged ones (001 §4.1).

The service only sees the `Provisioner` protocol, so unit tests can substitute a fake.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol

import httpx

from deploy.tasks import ProvisionError, TaskParams, create_task
from shared.codec import DecodeError
from shared.dap.messages import HpkeConfigList
from shared.dap.task import b64url_encode
from shared.vdaf.spec import VdafSpec

__all__ = ["DapProvisioner", "ProvisionError", "ProvisionedTask", "Provisioner", "TaskRequest"]


@dataclass(frozen=True)
class TaskRequest:
    """What the recipe asks of its task."""

    vdaf: VdafSpec
    query_type: Literal["time_interval", "fixed_size"]
    min_batch_size: int
    time_precision: int
    expires_in: int | None


@dataclass(frozen=True)
class ProvisionedTask:
    task_id: str
    task_expiration: int | None
    #: Unpadded base64url HpkeConfigList of each aggregator.
    leader_hpke_configs: str
    helper_hpke_configs: str


class Provisioner(Protocol):
    leader_url: str
    helper_url: str

    def create(self, request: TaskRequest) -> ProvisionedTask:
        """Create a fresh task on collector, leader and helper; ProvisionError on failure."""
        ...

    def existing(self, task_id: str, request: TaskRequest) -> ProvisionedTask:
        """Check that the leader and helper hold `task_id` with these parameters."""
        ...


class DapProvisioner:
    def __init__(
        self,
        leader_url: str,
        helper_url: str,
        collector_url: str,
        admin_token: str | None,
        http: httpx.Client,
    ) -> None:
        self.leader_url = leader_url
        self.helper_url = helper_url
        self.collector_url = collector_url
        self._admin_token = admin_token
        self._http = http

    def _token(self) -> str:
        if self._admin_token is None:
            raise ProvisionError("no admin token configured: cannot provision tasks")
        return self._admin_token

    def _hpke_configs(self, base: str, what: str, task_id: str) -> str:
        try:
            response = self._http.get(f"{base}/hpke_config", params={"task_id": task_id})
        except httpx.HTTPError as exc:
            raise ProvisionError(
                f"cannot reach the {what} at {base}: {type(exc).__name__}"
            ) from None
        if response.status_code != 200:
            raise ProvisionError(f"the {what} has no HPKE config: HTTP {response.status_code}")
        try:
            HpkeConfigList.decode(response.content)
        except DecodeError as exc:
            raise ProvisionError(f"the {what} sent a malformed HPKE config list: {exc}") from None
        return b64url_encode(response.content)

    def create(self, request: TaskRequest) -> ProvisionedTask:
        params = TaskParams(
            vdaf=request.vdaf,
            query_type=request.query_type,
            min_batch_size=request.min_batch_size,
            time_precision=request.time_precision,
            expires_in=request.expires_in,
            leader=self.leader_url,
            helper=self.helper_url,
            collector=self.collector_url,
        )
        info = create_task(params, self._token(), http=self._http)
        task_id = str(info["task_id"])
        return ProvisionedTask(
            task_id=task_id,
            task_expiration=info.get("task_expiration"),
            leader_hpke_configs=self._hpke_configs(self.leader_url, "leader", task_id),
            helper_hpke_configs=self._hpke_configs(self.helper_url, "helper", task_id),
        )

    def existing(self, task_id: str, request: TaskRequest) -> ProvisionedTask:
        expiration: int | None = None
        for base, what in ((self.leader_url, "leader"), (self.helper_url, "helper")):
            try:
                response = self._http.get(
                    f"{base}/internal/tasks/{task_id}",
                    headers={"Authorization": f"Bearer {self._token()}"},
                )
            except httpx.HTTPError as exc:
                raise ProvisionError(
                    f"cannot reach the {what} at {base}: {type(exc).__name__}"
                ) from None
            if response.status_code == 404:
                raise ProvisionError(f"the {what} does not know task {task_id}")
            if response.status_code != 200:
                raise ProvisionError(f"the {what} refused: HTTP {response.status_code}")
            task = response.json()
            mismatches = [
                name
                for name, want in (
                    ("vdaf", request.vdaf.model_dump(exclude_none=True)),
                    ("min_batch_size", request.min_batch_size),
                    ("time_precision", request.time_precision),
                )
                if _normalized(task.get(name)) != want
            ]
            if mismatches:
                raise ProvisionError(
                    f"the {what}'s task {task_id} differs from the recipe in "
                    + ", ".join(mismatches)
                )
            expiration = task.get("task_expiration", expiration)
        return ProvisionedTask(
            task_id=task_id,
            task_expiration=expiration,
            leader_hpke_configs=self._hpke_configs(self.leader_url, "leader", task_id),
            helper_hpke_configs=self._hpke_configs(self.helper_url, "helper", task_id),
        )


def _normalized(value: object) -> object:
    if isinstance(value, dict):
        return {k: v for k, v in value.items() if v is not None}
    return value
