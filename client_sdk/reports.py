"""DAP reports from randomized measurements, for a DAP-09 or a DAP-19 task (DAP-09 §4.4.2,
DAP-19 §4.4.2; VDAF-08 / VDAF-20 §7 Prio3).

For each measurement: a fresh random report id (also the VDAF nonce), the report time rounded
down to the task's time precision, Prio3 sharding (`shard_batch` over many reports: the
simulator batches devices here), then each input share in a `PlaintextInputShare` carrying
that share's extensions (`shared.dap.extensions`: the recipe binding in both shares, and in
each share the token bound to that aggregator's role, so each aggregator checks its own and
the leader never sees the helper's token), HPKE-sealed to that aggregator's config with info
"dap-NN input share" || client || role and aad = InputShareAad.

What differs between the versions is `ReportWire` (one per task, chosen by its DAP draft, over
the wire facts the aggregators share, `shared.dap.version`), the rest is one code path:

| | DAP-09 | DAP-19 |
|---|---|---|
| `ReportMetadata.time` | seconds, a multiple of time_precision | time_precision units (§4.1.1) |
| public extensions | none | none (sagg's extensions are private, as in DAP-09) |
| private extensions | token, then recipe binding | the same, in strictly increasing type order |
| InputShareAad | task_id, metadata, public_share | task_id, TaskConfiguration, metadata, ... |
| HPKE info | "dap-09 input share" ‖ 01 ‖ role | "dap-19 input share" ‖ 01 ‖ role |
| VDAF | VDAF-08, no context | VDAF-20, ctx "dap-19" ‖ task_id (digest §10) |

sagg's private extensions (0xFE00 token, 0xFE01 recipe binding) are emitted in that order, so
the DAP-19 rule that a list be strictly increasing holds by construction.
"""

from __future__ import annotations

import functools
import secrets
from collections.abc import Sequence
from dataclasses import dataclass, field

from client_sdk.errors import ClientError
from shared import hpke
from shared.b64url import b64url_decode
from shared.dap import messages19 as m19
from shared.dap.ids import ReportId, TaskId
from shared.dap.messages import Extension, HpkeCiphertext, HpkeConfig, HpkeConfigList, Role
from shared.dap.task import DapVersion
from shared.dap.version import AnyReport, Dap09Wire, Dap19Wire, DapWire
from shared.vdaf.prio3 import Prio3

__all__ = [
    "AnyReport",
    "NoUsableConfigError",
    "ReportInput",
    "ReportWire",
    "build_reports",
    "choose_config",
]


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
class ReportWire:
    """How one task's reports look on the wire: its version's `shared.dap.version.DapWire`
    (the table of the module docstring), from the task's published fields.

    `configuration` is a DAP-19 task's encoded TaskConfiguration, exactly as provisioned and
    published (it goes into every AAD: one different byte and no aggregator can decrypt);
    None makes a DAP-09 task.
    """

    task_id: TaskId
    time_precision: int
    configuration: bytes | None = field(default=None, repr=False)
    version: DapWire = field(init=False, repr=False)

    def __post_init__(self) -> None:
        version: DapWire
        if self.configuration is None:
            version = Dap09Wire(self.task_id, self.time_precision)
        else:
            config = m19.TaskConfiguration.decode(self.configuration)
            # The codec is strict, so the struct re-encodes to the provisioned bytes, the
            # ones the AAD binds (digest §3).
            assert config.encode() == self.configuration
            if config.time_precision != self.time_precision:
                raise ValueError("task_configuration has another time_precision")
            version = Dap19Wire(self.task_id, config, self.configuration)
        object.__setattr__(self, "version", version)

    @classmethod
    @functools.lru_cache(maxsize=256)
    def of(
        cls,
        task_id: str,
        time_precision: int,
        dap: DapVersion = "dap-09",
        task_configuration: str | None = None,
    ) -> ReportWire:
        """From a task's JSON fields (unpadded base64url id and configuration). Cached (a
        `ReportWire` is immutable): a simulator's devices answer a handful of tasks, and each
        decoded its task's id, and a DAP-19 task's configuration, twice."""
        if (dap == "dap-19") != (task_configuration is not None):
            raise ValueError("a dap-19 task needs its task_configuration, a dap-09 one has none")
        raw = None
        if task_configuration is not None:
            raw = b64url_decode(task_configuration, "task_configuration")
        return cls(TaskId.from_b64url(task_id), time_precision, raw)

    @property
    def dap(self) -> DapVersion:
        return self.version.dap

    @property
    def vdaf_context(self) -> bytes:
        """The VDAF application context: none for VDAF-08 (DAP-09)."""
        return self.version.ctx

    def time(self, seconds: int) -> int:
        """The `Time` of a report made at `seconds` (DAP-09 rounds it down to a multiple of
        time_precision, DAP-09 §4.4.1)."""
        return self.version.report_time(seconds)

    def seconds(self, time: int) -> int:
        """The first second of a report's `Time`."""
        return self.version.seconds(time)

    def decode_report(self, data: bytes) -> AnyReport:
        return self.version.decode_report(data)

    def _seal(
        self,
        config: HpkeConfig,
        role: Role,
        aad: bytes,
        extensions: tuple[Extension, ...],
        share: bytes,
    ) -> HpkeCiphertext:
        enc, ciphertext = hpke.seal(
            config.public_key,
            self.version.input_share_info(role),
            aad,
            self.version.plaintext_input_share(extensions, share),
        )
        return HpkeCiphertext(config.id, enc, ciphertext)

    def report(
        self,
        item: ReportInput,
        report_id: ReportId,
        public_share: bytes,
        shares: tuple[bytes, bytes],
        configs: tuple[HpkeConfig, HpkeConfig],
    ) -> AnyReport:
        """One sealed report (the public share and the two input shares of `report_id`)."""
        metadata = self.version.report_metadata(report_id, self.time(item.time))
        aad = self.version.input_share_aad(metadata.encode(), public_share)
        leader = self._seal(configs[0], Role.LEADER, aad, item.leader_extensions, shares[0])
        helper = self._seal(configs[1], Role.HELPER, aad, item.helper_extensions, shares[1])
        return self.version.report(metadata, public_share, leader, helper)


@dataclass(frozen=True, slots=True)
class ReportInput:
    measurement: object
    time: int
    leader_extensions: tuple[Extension, ...] = ()
    helper_extensions: tuple[Extension, ...] = ()
    report_id: ReportId | None = None


def build_reports(
    vdaf: Prio3,
    wire: ReportWire,
    inputs: Sequence[ReportInput],
    leader_config: HpkeConfig,
    helper_config: HpkeConfig,
) -> list[AnyReport]:
    """One report per input (ValueError for a measurement the VDAF does not take)."""
    ids = [i.report_id or ReportId.random() for i in inputs]
    sharded = vdaf.shard_batch(
        [i.measurement for i in inputs],
        [rid.value for rid in ids],
        [secrets.token_bytes(vdaf.RAND_SIZE) for _ in inputs],
        wire.vdaf_context,
    )
    return [
        wire.report(item, rid, public_share, (shares[0], shares[1]), (leader_config, helper_config))
        for item, rid, (public_share, shares) in zip(inputs, ids, sharded, strict=True)
    ]
