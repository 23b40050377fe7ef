"""HPKE `info` strings and AADs for DAP-09 share encryption (and the info strings of DAP-19).

- Input shares (DAP-09 §4.4.2, digest §5.2, §6.4):
  info = "dap-09 input share" || 0x01 (client) || server_role; aad = InputShareAad.
- Aggregate shares (DAP-09 §4.6.4, digest §7.3):
  info = "dap-09 aggregate share" || server_role || 0x00 (collector); aad = AggregateShareAad.
  The role order is the reverse of the input-share one: sender first in both cases.

`server_role` is the aggregator that holds (or produced) the share: Leader or Helper.
DAP-19 builds its info strings the same way from its own labels ("dap-19 ...", DAP-19 §4.4.2,
§4.6.7), which `shared.dap.messages19` passes as `label`; its AADs are structs of that module.
"""

from __future__ import annotations

from typing import Final

from shared.dap.ids import TaskId
from shared.dap.messages import (
    AggregateShareAad,
    BatchSelector,
    InputShareAad,
    ReportMetadata,
    Role,
)

#: HPKE info labels (DAP-09 §4.4.2 and §4.6.4); the role bytes follow the label.
HPKE_INFO_INPUT_SHARE: Final = b"dap-09 input share"

HPKE_INFO_AGGREGATE_SHARE: Final = b"dap-09 aggregate share"


__all__ = ["aggregate_share_aad", "aggregate_share_info", "input_share_aad", "input_share_info"]


def _check_aggregator(server_role: Role) -> None:
    if server_role not in (Role.LEADER, Role.HELPER):
        raise ValueError(f"server_role must be leader or helper, got {server_role!r}")


def input_share_info(server_role: Role, label: bytes = HPKE_INFO_INPUT_SHARE) -> bytes:
    """HPKE info for the Client -> `server_role` input share."""
    _check_aggregator(server_role)
    return label + bytes((Role.CLIENT, server_role))


def aggregate_share_info(server_role: Role, label: bytes = HPKE_INFO_AGGREGATE_SHARE) -> bytes:
    """HPKE info for the `server_role` -> Collector aggregate share."""
    _check_aggregator(server_role)
    return label + bytes((server_role, Role.COLLECTOR))


def input_share_aad(task_id: TaskId, report_metadata: ReportMetadata, public_share: bytes) -> bytes:
    """Encoded `InputShareAad`."""
    return InputShareAad(task_id, report_metadata, public_share).encode()


def aggregate_share_aad(task_id: TaskId, agg_param: bytes, batch_selector: BatchSelector) -> bytes:
    """Encoded `AggregateShareAad`."""
    return AggregateShareAad(task_id, agg_param, batch_selector).encode()
