"""The DAP-19 TaskConfiguration of a sagg task (DAP-19 §4.2, App. B; digest §3).

Every party of a DAP-19 task binds the same encoded TaskConfiguration into both HPKE AADs
(digest §5.2, §7.4), so it must come from one place:

- a task provisioned from its encoded TaskConfiguration keeps those bytes in
  `TaskDefinition.task_configuration` (base64url) and they are used as they are, never
  re-serialised (digest §3: a re-encoding that differs by one byte breaks every decryption);
  the definition's own fields must agree with them (`check_against`);
- otherwise the configuration is derived from the definition's fields: an empty `task_info`
  (allowed since -19, #787: the random task id in both AADs already separates tasks),
  the endpoints as ASCII bytes exactly as provisioned, `time_precision`, `min_batch_size`,
  `query_type` as the batch mode (time_interval 1, fixed_size = leader_selected 2), the VDAF's
  codepoint and configuration, and a `task_interval` extension [0, floor(task_expiration /
  time_precision) + 1) when the task expires: exactly the reports DAP-09 would accept
  (time <= task_expiration), in units.

The VDAF's codepoint and configuration are `shared.dap.vdaf_codepoints`' (Janus's private
codepoint for Prio3SumVecField64Multiproof included). A task created by sagg's provisioning
carries its configuration (`services.common.provisioning`: random `task_info`, taskprov id);
a collector task has no helper endpoint, so `check_against` checks the helper's URL only for
a definition that names one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from shared.b64url import b64url_decode
from shared.dap.messages import Interval, QueryType, Url
from shared.dap.messages19 import BatchMode, TaskConfiguration, TaskExtension
from shared.dap.vdaf_codepoints import vdaf_codepoint
from shared.vdaf.spec import VdafSpec

__all__ = [
    "ConfiguredTask",
    "FieldValues",
    "TaskFields",
    "batch_mode",
    "check_against",
    "derived_configuration",
    "task_configuration",
]


class ConfiguredTask(Protocol):
    """What a TaskConfiguration must agree with (every party's task has it)."""

    @property
    def leader_endpoint(self) -> str: ...
    @property
    def time_precision(self) -> int: ...
    @property
    def min_batch_size(self) -> int: ...
    @property
    def query_type(self) -> QueryType: ...
    @property
    def vdaf(self) -> VdafSpec: ...


class TaskFields(ConfiguredTask, Protocol):
    """What a task's configuration is made of (a `TaskDefinition` has all of it)."""

    @property
    def helper_endpoint(self) -> str: ...
    @property
    def task_expiration(self) -> int | None: ...
    @property
    def task_configuration(self) -> str | None: ...


@dataclass(frozen=True)
class FieldValues:
    """`TaskFields` as plain values: a stored definition's JSON, a task being created."""

    leader_endpoint: str
    helper_endpoint: str
    time_precision: int
    min_batch_size: int
    query_type: QueryType
    vdaf: VdafSpec
    task_expiration: int | None
    task_configuration: str | None = None


def batch_mode(query_type: QueryType) -> BatchMode:
    """DAP-19's name for a task's query type: fixed_size became leader_selected (DAP-19 §5)."""
    if query_type == QueryType.TIME_INTERVAL:
        return BatchMode.TIME_INTERVAL
    return BatchMode.LEADER_SELECTED


def derived_configuration(fields: TaskFields) -> TaskConfiguration:
    """The TaskConfiguration of a task provisioned without one (module docstring)."""
    vdaf_type, vdaf_config = vdaf_codepoint(fields.vdaf)
    extensions: tuple[TaskExtension, ...] = ()
    if fields.task_expiration is not None:
        end = fields.task_expiration // fields.time_precision + 1
        extensions = (TaskExtension.task_interval(Interval(0, end)),)
    return TaskConfiguration(
        task_info=b"",
        leader_aggregator_endpoint=Url(fields.leader_endpoint.encode("ascii")),
        helper_aggregator_endpoint=Url(fields.helper_endpoint.encode("ascii")),
        time_precision=fields.time_precision,
        min_batch_size=fields.min_batch_size,
        batch_mode=batch_mode(fields.query_type),
        batch_config=b"",
        vdaf_type=vdaf_type,
        vdaf_configuration=vdaf_config,
        extensions=extensions,
    )


def check_against(config: TaskConfiguration, definition: ConfiguredTask) -> None:
    """ValueError unless the provisioned configuration says what the definition says (its
    helper endpoint too, if it names one)."""
    vdaf_type, vdaf_config = vdaf_codepoint(definition.vdaf)
    helper: str | None = getattr(definition, "helper_endpoint", None)
    mismatches = [
        name
        for name, ours, theirs in (
            (
                "leader_endpoint",
                definition.leader_endpoint.encode(),
                config.leader_aggregator_endpoint.value,
            ),
            (
                "helper_endpoint",
                config.helper_aggregator_endpoint.value if helper is None else helper.encode(),
                config.helper_aggregator_endpoint.value,
            ),
            ("time_precision", definition.time_precision, config.time_precision),
            ("min_batch_size", definition.min_batch_size, config.min_batch_size),
            ("query_type", batch_mode(definition.query_type), config.batch_mode),
            ("vdaf", (vdaf_type, vdaf_config), (config.vdaf_type, config.vdaf_configuration)),
        )
        if ours != theirs
    ]
    if mismatches:
        raise ValueError(
            f"task_configuration disagrees with the definition: {', '.join(mismatches)}"
        )
    reasons = config.opt_out_reasons()
    if reasons:
        raise ValueError(f"task_configuration: {'; '.join(reasons)}")


def task_configuration(definition: TaskFields) -> tuple[TaskConfiguration, bytes]:
    """The task's TaskConfiguration and the exact bytes every AAD binds."""
    if definition.task_configuration is not None:
        raw = b64url_decode(definition.task_configuration, "task_configuration")
        return TaskConfiguration.decode(raw), raw
    config = derived_configuration(definition)
    return config, config.encode()
