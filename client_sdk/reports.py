"""DAP-09 reports from randomized measurements (DAP-09 §4.4.2; VDAF-08 §7 Prio3).

For each measurement: a fresh random report id (also the VDAF nonce), the report time rounded
down to the task's time precision, Prio3 sharding (`shard_batch` over many reports: the
simulator batches devices here), then each input share in a `PlaintextInputShare` carrying
that share's extensions (`shared.dap.extensions`: the recipe binding in both shares, and in
each share the token bound to that aggregator's role, so each aggregator checks its own and
the leader never sees the helper's token), HPKE-sealed to that aggregator's config with info
"dap-09 input share" || client || role and aad = InputShareAad.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from dataclasses import dataclass

from client_sdk.errors import ClientError
from shared import hpke
from shared.dap.hpke_context import input_share_aad, input_share_info
from shared.dap.ids import ReportId, TaskId
from shared.dap.messages import (
    Extension,
    HpkeCiphertext,
    HpkeConfig,
    HpkeConfigList,
    PlaintextInputShare,
    Report,
    ReportMetadata,
    Role,
)
from shared.vdaf.prio3 import Prio3

__all__ = ["NoUsableConfigError", "ReportInput", "build_reports", "choose_config"]


class NoUsableConfigError(ClientError, ValueError):
    """The aggregator offers no HPKE suite this SDK implements."""


def choose_config(configs: HpkeConfigList | Sequence[HpkeConfig]) -> HpkeConfig:
    """The first config whose suite is supported (aggregators list their preferred first)."""
    items = configs.configs if isinstance(configs, HpkeConfigList) else configs
    for config in items:
        try:
            hpke.check_suite(config.kem_id, config.kdf_id, config.aead_id)
        except hpke.HpkeError:
            continue
        return config
    raise NoUsableConfigError("no supported HPKE config")


@dataclass(frozen=True, slots=True)
class ReportInput:
    measurement: object
    time: int
    leader_extensions: tuple[Extension, ...] = ()
    helper_extensions: tuple[Extension, ...] = ()
    report_id: ReportId | None = None


def _seal(
    config: HpkeConfig, role: Role, aad: bytes, extensions: tuple[Extension, ...], share: bytes
) -> HpkeCiphertext:
    plaintext = PlaintextInputShare(extensions, share).encode()
    enc, ciphertext = hpke.seal(config.public_key, input_share_info(role), aad, plaintext)
    return HpkeCiphertext(config.id, enc, ciphertext)


def build_reports(
    vdaf: Prio3,
    task_id: TaskId,
    time_precision: int,
    inputs: Sequence[ReportInput],
    leader_config: HpkeConfig,
    helper_config: HpkeConfig,
) -> list[Report]:
    """One report per input (ValueError for a measurement the VDAF does not take)."""
    ids = [i.report_id or ReportId.random() for i in inputs]
    sharded = vdaf.shard_batch(
        [i.measurement for i in inputs],
        [rid.value for rid in ids],
        [secrets.token_bytes(vdaf.RAND_SIZE) for _ in inputs],
    )
    out: list[Report] = []
    for item, rid, (public_share, (leader_share, helper_share)) in zip(
        inputs, ids, sharded, strict=True
    ):
        metadata = ReportMetadata(rid, item.time - item.time % time_precision)
        aad = input_share_aad(task_id, metadata, public_share)
        out.append(
            Report(
                metadata,
                public_share,
                _seal(leader_config, Role.LEADER, aad, item.leader_extensions, leader_share),
                _seal(helper_config, Role.HELPER, aad, item.helper_extensions, helper_share),
            )
        )
    return out
