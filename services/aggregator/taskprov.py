"""Taskprov in both roles (taskprov editor's copy after -03, paired with DAP-19; digest
dap-19.md §11): DAP-19 tasks provisioned by the `DAP-Taskprov` header of the requests that
use them.

Where the header is read and what follows (`Taskprov.task`; the header itself:
`shared.dap.taskprov`):
- a header that must be ignored (no Byte Sequence, no TaskConfiguration, several field lines)
  is: the request is answered as without one, so an unknown task is `unrecognizedTask` (the
  leader's answer to a client that skipped the announcement, which then retries with it);
- the task id taskprov derives from the header must be the URL's, else `unrecognizedTask`;
- a known task is taken when its TaskConfiguration is the announced one (a task this aggregator
  opted into stays opted into: nothing here refuses it later), else `invalidTask`;
- an unknown task is opted into by the leader on a client's upload and by the helper on any
  request of the leader, never on a collector's request (the leader answers `unrecognizedTask`
  until a report has provisioned it, taskprov §"Collection Protocol"). The helper first checks
  the leader's bearer token against `taskprov_aggregator_auth_token` (as Janus checks its peer
  aggregator's tokens): nobody else can make it create tasks.

Opt-out (`invalidTask`, with the reasons in the detail): what every party MUST refuse
(`shared.dap.taskprov.must_opt_out`: an ended task, an unimplemented batch mode, VDAF or task
extension) and this operator's policy, taskprov's MAY reasons: the peer's endpoint is not
`taskprov_peer_endpoint` (requests and the aggregator token go only to the configured peer),
min_batch_size below `taskprov_min_batch_size`, a lifetime above
`taskprov_max_task_lifetime_s`, leading without a `taskprov_collector_auth_token`, and
holding `taskprov_max_tasks` tasks already (the leader's uploads are unauthenticated, so
anyone can announce tasks: taskprov §"Security Considerations" has aggregators bound them).

An opted-in task is an ordinary stored task (`TaskDefinition` with ``taskprov`` set): the
announced bytes as its `task_configuration`, the derived id and verify key (key id 0, digest
§16 item 8), the operator's collector HPKE config and tokens, `task_interval`'s end as its
`task_expiration` (so its data is deleted after it, DAP-19 §4.2), and
`taskprov_report_expiry_age_s` as its `report_expiry_age`. Every process on one store derives
the same definition, so concurrent opt-ins store it once (`put_task`: "exists").
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Self

from pydantic import ValidationError
from starlette.datastructures import Headers

from services.aggregator.settings import AggregatorSettings
from services.aggregator.wire import Wire19
from services.common.auth import hash_token, presented_token, token_matches
from services.common.problems import DapProblemError, HttpProblemError
from shared.b64url import b64url_decode, b64url_encode
from shared.dap.messages19 import BatchMode, TaskConfiguration, seconds_from_time
from shared.dap.problems import ProblemType
from shared.dap.task import TaskDefinition
from shared.dap.taskprov import HEADER, must_opt_out, parse_header, task_id_of, verify_key
from shared.dap.vdaf_codepoints import vdaf_spec

if TYPE_CHECKING:
    from services.aggregator.service import Aggregator, Task

__all__ = ["Taskprov"]

HTTP_FORBIDDEN = 403


def _invalid_task(task_id: str, reasons: list[str]) -> DapProblemError:
    return DapProblemError(
        ProblemType.INVALID_TASK, "opted out of the task: " + "; ".join(reasons), task_id=task_id
    )


def _unrecognized(task_id: str, detail: str) -> DapProblemError:
    return DapProblemError(ProblemType.UNRECOGNIZED_TASK, detail, task_id=task_id)


@dataclass(frozen=True)
class Taskprov:
    """This aggregator's taskprov settings, checked when they loaded (`AggregatorSettings`)."""

    verify_key_init: bytes
    peer_endpoint: bytes
    aggregator_token: str
    collector_token: str | None
    collector_hpke_config: str
    min_batch_size: int
    max_lifetime_s: int | None
    report_expiry_age: int | None
    max_tasks: int | None

    @classmethod
    def of(cls, settings: AggregatorSettings) -> Self | None:
        """The settings' taskprov, None when it is off (no `taskprov_verify_key_init`)."""
        if settings.taskprov_verify_key_init is None:
            return None
        assert settings.taskprov_peer_endpoint is not None
        assert settings.taskprov_aggregator_auth_token is not None
        assert settings.taskprov_collector_hpke_config is not None
        collector = settings.taskprov_collector_auth_token
        return cls(
            verify_key_init=b64url_decode(
                settings.taskprov_verify_key_init.get_secret_value(), "taskprov_verify_key_init"
            ),
            peer_endpoint=settings.taskprov_peer_endpoint.encode("ascii"),
            aggregator_token=settings.taskprov_aggregator_auth_token.get_secret_value(),
            collector_token=None if collector is None else collector.get_secret_value(),
            collector_hpke_config=settings.taskprov_collector_hpke_config,
            min_batch_size=settings.taskprov_min_batch_size,
            max_lifetime_s=settings.taskprov_max_task_lifetime_s,
            report_expiry_age=settings.taskprov_report_expiry_age_s,
            max_tasks=settings.taskprov_max_tasks,
        )

    def task(
        self, agg: Aggregator, task_id: str, role: str, headers: Mapping[str, str], *, opt_in: bool
    ) -> Task:
        """The task a request in `role` names, opted into first when its header announces an
        unknown one and `opt_in` (module docstring)."""
        if isinstance(headers, Headers) and len(headers.getlist(HEADER)) > 1:
            # Several field lines make one value joined by ", " (RFC 9110 §5.3), which is no
            # Item (RFC 9651 §4.2): ignored like any other value that does not parse.
            return agg.task(task_id, role)
        raw = parse_header(headers)
        if raw is None:
            return agg.task(task_id, role)
        derived = task_id_of(raw)
        if derived.to_b64url() != task_id:
            raise _unrecognized(task_id, "the DAP-Taskprov header announces another task")
        known = agg.task_by_id(derived.value)
        if known is None:
            if not opt_in:
                raise _unrecognized(task_id, "unknown task: reports provision it (taskprov)")
            self._opt_in(agg, task_id, role, raw, headers)
            return agg.task(task_id, role)
        task = agg.task(task_id, role)
        if not isinstance(task.wire, Wire19) or task.wire.config_bytes != raw:
            raise _invalid_task(task_id, ["the task is configured otherwise here"])
        return task

    def _opt_in(
        self, agg: Aggregator, task_id: str, role: str, raw: bytes, headers: Mapping[str, str]
    ) -> None:
        if role == "helper" and not token_matches(
            hash_token(self.aggregator_token), presented_token(headers)
        ):
            # DAP-19 has no problem type for authentication (DAP-19 §3.5): a plain 403.
            raise HttpProblemError(HTTP_FORBIDDEN, "bad aggregator token", task_id=task_id)
        config = TaskConfiguration.decode(raw)
        now = agg.clock.now()
        reasons = must_opt_out(config, now) + self.policy_reasons(config, role)
        if self.max_tasks is not None and len(agg.ds.task_ids()) >= self.max_tasks:
            reasons.append(f"this aggregator holds its most tasks ({self.max_tasks})")
        if reasons:
            raise _invalid_task(task_id, reasons)
        try:
            definition = self.definition(task_id, "leader" if role == "leader" else "helper", raw)
        except ValidationError as exc:
            raise _invalid_task(task_id, [str(e["msg"]) for e in exc.errors()]) from None
        except ValueError as exc:  # an endpoint that is no ASCII
            raise _invalid_task(task_id, [str(exc)]) from None
        if agg.put_task(definition) == "conflict":
            raise _invalid_task(task_id, ["a different task with this id is configured here"])

    def policy_reasons(self, config: TaskConfiguration, role: str) -> list[str]:
        """This operator's reasons to opt out (taskprov's MAY list; module docstring)."""
        reasons: list[str] = []
        if role == "leader":
            peer, peer_name = config.helper_aggregator_endpoint.value, "helper"
        else:
            peer, peer_name = config.leader_aggregator_endpoint.value, "leader"
        if peer != self.peer_endpoint:
            reasons.append(f"the {peer_name} endpoint is not this aggregator's taskprov peer")
        if role == "leader" and self.collector_token is None:
            reasons.append("this aggregator leads no taskprov task (no collector token)")
        if config.min_batch_size < self.min_batch_size:
            reasons.append(f"min_batch_size is below this aggregator's {self.min_batch_size}")
        if self.max_lifetime_s is not None:
            interval = config.task_interval
            lifetime = (
                None
                if interval is None
                else seconds_from_time(interval.duration, config.time_precision)
            )
            if lifetime is None or lifetime > self.max_lifetime_s:
                reasons.append(f"the task lives longer than {self.max_lifetime_s} s")
        return reasons

    def definition(
        self, task_id: str, role: Literal["leader", "helper"], raw: bytes
    ) -> TaskDefinition:
        """The stored task an opt-in creates (module docstring); ValidationError for a
        configuration sagg cannot run."""
        config = TaskConfiguration.decode(raw)
        spec = vdaf_spec(config.vdaf_type, config.vdaf_configuration)
        interval = config.task_interval
        expiration = (
            None if interval is None else seconds_from_time(interval.end, config.time_precision) - 1
        )
        derived = task_id_of(raw)
        return TaskDefinition(
            task_id=task_id,
            role=role,
            dap="dap-19",
            taskprov=True,
            task_configuration=b64url_encode(raw),
            leader_endpoint=config.leader_aggregator_endpoint.value.decode("ascii"),
            helper_endpoint=config.helper_aggregator_endpoint.value.decode("ascii"),
            query_type="fixed_size"  # type: ignore[arg-type]
            if config.batch_mode == BatchMode.LEADER_SELECTED
            else "time_interval",
            vdaf=spec,
            vdaf_verify_key=b64url_encode(
                verify_key(self.verify_key_init, derived, spec.verify_key_size)
            ),
            min_batch_size=config.min_batch_size,
            time_precision=config.time_precision,
            task_expiration=expiration,
            report_expiry_age=self.report_expiry_age,
            collector_hpke_config=self.collector_hpke_config,
            aggregator_auth_token=self.aggregator_token,
            collector_auth_token=self.collector_token if role == "leader" else None,
        )
