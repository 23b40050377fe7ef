"""Building tasks, keys and client reports for the aggregator tests, like a real client would."""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from typing import Any

import httpx

from services.aggregator.settings import AggregatorSettings
from shared import hpke
from shared.b64url import b64url_encode
from shared.dap.hpke_context import (
    aggregate_share_aad,
    aggregate_share_info,
    input_share_aad,
    input_share_info,
)
from shared.dap.ids import ReportId, TaskId
from shared.dap.messages import (
    MEDIA_REPORT,
    BatchSelector,
    HpkeCiphertext,
    HpkeConfig,
    HpkeConfigList,
    PlaintextInputShare,
    PrepareInit,
    Report,
    ReportMetadata,
    ReportShare,
    Role,
)
from shared.vdaf import ping_pong
from shared.vdaf.prio3 import Prio3
from shared.vdaf.spec import VdafSpec

ADMIN_TOKEN = "admin-token-0123456789"
AGGREGATOR_TOKEN = "aggregator-token-0123456789"
COLLECTOR_TOKEN = "collector-token-0123456789"
LEADER_URL = "http://leader.test/"
HELPER_URL = "http://helper.test/"

VDAFS: dict[str, dict[str, Any]] = {
    "count": {"type": "Prio3Count"},
    "sum": {"type": "Prio3Sum", "bits": 8},
    "sumvec": {"type": "Prio3SumVec", "length": 4, "bits": 4, "chunk_length": 2},
    "histogram": {"type": "Prio3Histogram", "length": 5, "chunk_length": 2},
}


def b64(data: bytes) -> str:
    return b64url_encode(data)


def settings(db_url: str, **overrides: Any) -> AggregatorSettings:
    values: dict[str, Any] = {
        "database_url": db_url,
        "admin_token": ADMIN_TOKEN,
        "run_drivers": False,
        "min_job_size": 1,
        "max_job_size": 50,
        "max_report_wait_s": 0,
        "collection_retry_s": 1,
        "batch_shards": 3,
        # The in-process issuer of `tests.aggregator.issuer`.
        "token_issuers": ["http://issuer.test"],
    }
    values.update(overrides)
    return AggregatorSettings(**values)


def admin_headers() -> dict[str, str]:
    return {"Authorization": f"Bearer {ADMIN_TOKEN}"}


@dataclass
class TaskParams:
    """Both aggregators' definitions of one task, and the collector's key."""

    vdaf: dict[str, Any] = field(default_factory=lambda: dict(VDAFS["count"]))
    query_type: str = "time_interval"
    min_batch_size: int = 1
    max_batch_size: int | None = None
    time_precision: int = 3600
    max_batch_query_count: int = 1
    task_expiration: int | None = None
    task_id: TaskId = field(default_factory=TaskId.random)
    verify_key: bytes = field(default_factory=lambda: secrets.token_bytes(16))
    collector_key: hpke.HpkeKeyPair = field(default_factory=lambda: hpke.generate_keypair(9))
    #: sagg's extensions policy: the recipe digest and the token policy (TokenPolicy fields).
    recipe_digest: bytes | None = None
    tokens: dict[str, Any] | None = None
    #: Per-role changes to the definition (a leader provisioned unlike the helper).
    overrides: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def collector_config(self) -> HpkeConfig:
        k = self.collector_key
        return HpkeConfig(k.config_id, k.kem_id, k.kdf_id, k.aead_id, k.public_key)

    @property
    def prio3(self) -> Prio3:
        return VdafSpec.model_validate(self.vdaf).instance()

    def definition(self, role: str) -> dict[str, Any]:
        d: dict[str, Any] = {
            "task_id": self.task_id.to_b64url(),
            "role": role,
            "leader_endpoint": LEADER_URL,
            "helper_endpoint": HELPER_URL,
            "query_type": self.query_type,
            "vdaf": self.vdaf,
            "vdaf_verify_key": b64(self.verify_key),
            "min_batch_size": self.min_batch_size,
            "max_batch_size": self.max_batch_size,
            "time_precision": self.time_precision,
            "max_batch_query_count": self.max_batch_query_count,
            "task_expiration": self.task_expiration,
            "collector_hpke_config": b64(self.collector_config.encode()),
            "aggregator_auth_token": AGGREGATOR_TOKEN,
        }
        if role == "leader":
            d["collector_auth_token"] = COLLECTOR_TOKEN
        if self.recipe_digest is not None:
            d["recipe_digest"] = b64(self.recipe_digest)
        if self.tokens is not None:
            d["tokens"] = self.tokens
        d.update(self.overrides.get(role, {}))
        return d


def provision(client: httpx.Client, params: TaskParams, role: str) -> None:
    response = client.put(
        f"/internal/tasks/{params.task_id.to_b64url()}",
        json=params.definition(role),
        headers=admin_headers(),
    )
    assert response.status_code == 201, response.text


def hpke_config(client: httpx.Client, task_id: TaskId) -> HpkeConfig:
    response = client.get("/hpke_config", params={"task_id": task_id.to_b64url()})
    assert response.status_code == 200, response.text
    return HpkeConfigList.decode(response.content).configs[0]


def seal_share(
    config: HpkeConfig,
    role: Role,
    task_id: TaskId,
    metadata: ReportMetadata,
    public_share: bytes,
    payload: bytes,
    extensions: tuple[Any, ...] = (),
) -> HpkeCiphertext:
    plaintext = PlaintextInputShare(extensions, payload).encode()
    enc, ct = hpke.seal(
        config.public_key,
        input_share_info(role),
        input_share_aad(task_id, metadata, public_share),
        plaintext,
    )
    return HpkeCiphertext(config.id, enc, ct)


def make_report(
    params: TaskParams,
    leader_config: HpkeConfig,
    helper_config: HpkeConfig,
    measurement: Any,
    time: int,
    *,
    report_id: ReportId | None = None,
    extensions: tuple[Any, ...] = (),
    helper_extensions: tuple[Any, ...] | None = None,
) -> Report:
    """Shard and seal one measurement exactly like a DAP-09 client; `extensions` go into
    both input shares unless `helper_extensions` gives the helper's apart."""
    vdaf = params.prio3
    rid = report_id or ReportId.random()
    public_share, shares = vdaf.shard(measurement, rid.value, secrets.token_bytes(vdaf.RAND_SIZE))
    metadata = ReportMetadata(rid, time)
    return Report(
        metadata,
        public_share,
        seal_share(
            leader_config,
            Role.LEADER,
            params.task_id,
            metadata,
            public_share,
            shares[0],
            extensions,
        ),
        seal_share(
            helper_config,
            Role.HELPER,
            params.task_id,
            metadata,
            public_share,
            shares[1],
            extensions if helper_extensions is None else helper_extensions,
        ),
    )


def upload(client: httpx.Client, params: TaskParams, report: Report) -> httpx.Response:
    return client.put(
        f"/tasks/{params.task_id.to_b64url()}/reports",
        content=report.encode(),
        headers={"Content-Type": MEDIA_REPORT},
    )


def prepare_init(
    params: TaskParams,
    helper_config: HpkeConfig,
    measurement: Any,
    time: int,
    *,
    report_id: ReportId | None = None,
    extensions: tuple[Any, ...] = (),
) -> PrepareInit:
    """What a leader sends the helper for one fresh report (DAP-09 §4.5.1.1)."""
    vdaf = params.prio3
    rid = report_id or ReportId.random()
    public_share, shares = vdaf.shard(measurement, rid.value, secrets.token_bytes(vdaf.RAND_SIZE))
    metadata = ReportMetadata(rid, time)
    _, outbound = ping_pong.leader_init(
        vdaf, params.verify_key, [rid.value], [public_share], [shares[0]]
    )
    assert outbound[0] is not None
    sealed = seal_share(
        helper_config, Role.HELPER, params.task_id, metadata, public_share, shares[1], extensions
    )
    return PrepareInit(ReportShare(metadata, public_share, sealed), outbound[0])


def decrypt_agg_share(
    params: TaskParams, role: Role, selector: BatchSelector, ciphertext: HpkeCiphertext
) -> bytes:
    return hpke.open(
        params.collector_key,
        ciphertext.enc,
        aggregate_share_info(role),
        aggregate_share_aad(params.task_id, b"", selector),
        ciphertext.payload,
    )


def task_stats(client: httpx.Client, tid: str) -> dict[str, Any]:
    """The admin API's counters of one task."""
    r = client.get(f"/internal/tasks/{tid}/stats", headers=admin_headers())
    assert r.status_code == 200, r.text
    doc: dict[str, Any] = r.json()
    return doc


def problem_type(response: httpx.Response) -> str:
    """The DAP problem type of a 400 answer (413: longer than any report of the task), without
    its URN prefix."""
    assert response.status_code in (400, 413), response.text
    kind: str = response.json()["type"].rsplit(":", 1)[-1]
    return kind
