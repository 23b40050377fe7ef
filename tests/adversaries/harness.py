"""An in-process leader and helper (each on its own SQLite store) and the parties around them,
for the adversary tests. Self-contained on purpose: it uses only the services' public entry
points (`create_app`, the admin API, the drivers), so an attack test reads as what the attacker
sends over the wire."""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from fastapi.testclient import TestClient

from services.aggregator.app import create_app
from services.aggregator.drivers.runner import DriverRunner
from services.aggregator.service import Aggregator
from services.aggregator.settings import AggregatorSettings
from services.common.clock import TestClock
from shared import hpke
from shared.b64url import b64url_encode
from shared.dap.hpke_context import (
    aggregate_share_aad,
    aggregate_share_info,
    input_share_aad,
    input_share_info,
)
from shared.dap.ids import AggregationJobId, CollectionJobId, ReportId, TaskId
from shared.dap.messages import (
    MEDIA_AGGREGATE_SHARE_REQ,
    MEDIA_AGGREGATION_JOB_INIT_REQ,
    MEDIA_COLLECT_REQ,
    MEDIA_REPORT,
    AggregateShare,
    AggregateShareReq,
    AggregationJobInitReq,
    AggregationJobResp,
    BatchSelector,
    Collection,
    CollectionReq,
    Extension,
    HpkeCiphertext,
    HpkeConfig,
    HpkeConfigList,
    Interval,
    PartialBatchSelector,
    PlaintextInputShare,
    PrepareInit,
    Query,
    Report,
    ReportMetadata,
    ReportShare,
    Role,
)
from shared.dap.problems import MEDIA_PROBLEM
from shared.vdaf import ping_pong
from shared.vdaf.prio3 import Prio3
from shared.vdaf.spec import VdafSpec
from tests.aggregator.env import drive

NOW = 1_700_006_400  # a multiple of every time precision used here
PRECISION = 3600
ADMIN_TOKEN = "adversaries-admin-token-0123"
AGGREGATOR_TOKEN = "adversaries-aggregator-token-0123"
COLLECTOR_TOKEN = "adversaries-collector-token-0123"
DAP_ERROR = "urn:ietf:params:ppm:dap:error:"


def b64(data: bytes) -> str:
    return b64url_encode(data)


def aggregator_auth() -> dict[str, str]:
    return {"DAP-Auth-Token": AGGREGATOR_TOKEN}


def collector_auth() -> dict[str, str]:
    return {"Authorization": f"Bearer {COLLECTOR_TOKEN}"}


def admin_auth() -> dict[str, str]:
    return {"Authorization": f"Bearer {ADMIN_TOKEN}"}


def problem_type(response: httpx.Response) -> str:
    """The DAP error token of a problem document (asserting it is one)."""
    assert response.status_code >= 400, response.text
    assert response.headers["content-type"].startswith(MEDIA_PROBLEM), response.headers
    kind = response.json()["type"]
    assert isinstance(kind, str) and kind.startswith(DAP_ERROR), kind
    return kind.removeprefix(DAP_ERROR)


@dataclass
class Task:
    """One task as both aggregators are told it (`per_role` lets them disagree)."""

    vdaf: dict[str, Any]
    min_batch_size: int = 1
    max_batch_query_count: int = 1
    task_id: TaskId = field(default_factory=TaskId.random)
    verify_key: bytes = field(default_factory=lambda: secrets.token_bytes(16))
    collector_key: hpke.HpkeKeyPair = field(default_factory=lambda: hpke.generate_keypair(9))
    per_role: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def prio3(self) -> Prio3:
        return VdafSpec.model_validate(self.vdaf).instance()

    def definition(self, role: str) -> dict[str, Any]:
        k = self.collector_key
        collector = HpkeConfig(k.config_id, k.kem_id, k.kdf_id, k.aead_id, k.public_key)
        d: dict[str, Any] = {
            "task_id": self.task_id.to_b64url(),
            "role": role,
            "leader_endpoint": "http://leader.test/",
            "helper_endpoint": "http://helper.test/",
            "query_type": "time_interval",
            "vdaf": self.vdaf,
            "vdaf_verify_key": b64(self.verify_key),
            "min_batch_size": self.min_batch_size,
            "time_precision": PRECISION,
            "max_batch_query_count": self.max_batch_query_count,
            "collector_hpke_config": b64(collector.encode()),
            "aggregator_auth_token": AGGREGATOR_TOKEN,
        }
        if role == "leader":
            d["collector_auth_token"] = COLLECTOR_TOKEN
        d.update(self.per_role.get(role, {}))
        return d


def settings(db_url: str) -> AggregatorSettings:
    return AggregatorSettings(
        database_url=db_url,
        admin_token=ADMIN_TOKEN,  # type: ignore[arg-type]
        run_drivers=False,
        min_job_size=1,
        max_job_size=50,
        max_report_wait_s=0,
        collection_retry_s=1,
        batch_shards=2,
        # The in-process token issuer of the token tests.
        token_issuers=["http://issuer.test"],
    )


def seal(
    config: HpkeConfig,
    role: Role,
    task_id: TaskId,
    metadata: ReportMetadata,
    public_share: bytes,
    payload: bytes,
    extensions: tuple[Extension, ...] = (),
) -> HpkeCiphertext:
    enc, ct = hpke.seal(
        config.public_key,
        input_share_info(role),
        input_share_aad(task_id, metadata, public_share),
        PlaintextInputShare(extensions, payload).encode(),
    )
    return HpkeCiphertext(config.id, enc, ct)


@dataclass
class Sharded:
    """One client's output before encryption: what a cheating client controls."""

    report_id: ReportId
    time: int
    public_share: bytes
    leader_share: bytes
    helper_share: bytes


@dataclass
class Deployment:
    task: Task
    clock: TestClock
    leader: TestClient
    helper: TestClient
    runner: DriverRunner
    leader_config: HpkeConfig
    helper_config: HpkeConfig

    @property
    def tid(self) -> str:
        return self.task.task_id.to_b64url()

    @property
    def leader_agg(self) -> Aggregator:
        agg: Aggregator = self.leader.app.state.aggregator  # type: ignore[attr-defined]
        return agg

    # --- clients ------------------------------------------------------------------------------

    def shard(
        self,
        measurement: Any,
        *,
        report_id: ReportId | None = None,
        time: int = NOW,
        encoder: Callable[[Any], list[int]] | None = None,
    ) -> Sharded:
        """Shard like a client. With `encoder`, the client encodes the measurement its own way
        (e.g. to an invalid vector) and then runs the honest FLP prover over that encoding."""
        vdaf = self.task.prio3
        if encoder is not None:
            # The prover is honest; only the encoding it proves is not in the circuit's language.
            vdaf.valid.encode = encoder  # type: ignore[method-assign,assignment]
        rid = report_id or ReportId.random()
        public, shares = vdaf.shard(measurement, rid.value, secrets.token_bytes(vdaf.RAND_SIZE))
        return Sharded(rid, time, public, shares[0], shares[1])

    def seal_report(
        self,
        s: Sharded,
        extensions: tuple[Extension, ...] = (),
        helper_extensions: tuple[Extension, ...] | None = None,
    ) -> Report:
        """Encrypt like a client; `extensions` go into both input shares unless
        `helper_extensions` gives the helper's apart."""
        meta = ReportMetadata(s.report_id, s.time)
        tid = self.task.task_id
        return Report(
            meta,
            s.public_share,
            seal(
                self.leader_config,
                Role.LEADER,
                tid,
                meta,
                s.public_share,
                s.leader_share,
                extensions,
            ),
            seal(
                self.helper_config,
                Role.HELPER,
                tid,
                meta,
                s.public_share,
                s.helper_share,
                extensions if helper_extensions is None else helper_extensions,
            ),
        )

    def upload(self, report: Report) -> httpx.Response:
        response: httpx.Response = self.leader.put(
            f"/tasks/{self.tid}/reports",
            content=report.encode(),
            headers={"Content-Type": MEDIA_REPORT},
        )
        return response

    def upload_measurements(self, measurements: Sequence[Any]) -> None:
        for value in measurements:
            response = self.upload(self.seal_report(self.shard(value)))
            assert response.status_code in (200, 201), response.text

    # --- the honest leader's machinery ----------------------------------------------------------

    def drive(self, rounds: int = 50) -> None:
        drive(self.runner, rounds)

    def start_collection(self, interval: Interval) -> str:
        job = CollectionJobId.random().to_b64url()
        response = self.leader.put(
            f"/tasks/{self.tid}/collection_jobs/{job}",
            content=CollectionReq(Query.time_interval(interval), b"").encode(),
            headers={"Content-Type": MEDIA_COLLECT_REQ, **collector_auth()},
        )
        assert response.status_code == 201, response.text
        return job

    def poll(self, job: str, *, rounds: int = 10) -> httpx.Response:
        """Drive and poll until the job is no longer pending (202)."""
        response: httpx.Response | None = None
        for _ in range(rounds):
            self.drive()
            response = self.leader.post(
                f"/tasks/{self.tid}/collection_jobs/{job}", headers=collector_auth()
            )
            if response.status_code != 202:
                return response
            self.clock.advance(1)
        assert response is not None
        return response

    def collect(self, interval: Interval) -> tuple[int, Any]:
        """(report_count, unsharded result) of an honest collection."""
        response = self.poll(self.start_collection(interval))
        assert response.status_code == 200, response.text
        collection = Collection.decode(response.content)
        shares = [
            self.open_agg_share(role, BatchSelector.time_interval(interval), ct)
            for role, ct in (
                (Role.LEADER, collection.leader_encrypted_agg_share),
                (Role.HELPER, collection.helper_encrypted_agg_share),
            )
        ]
        return collection.report_count, self.task.prio3.unshard(shares, collection.report_count)

    def open_agg_share(self, role: Role, selector: BatchSelector, ct: HpkeCiphertext) -> bytes:
        return hpke.open(
            self.task.collector_key,
            ct.enc,
            aggregate_share_info(role),
            aggregate_share_aad(self.task.task_id, b"", selector),
            ct.payload,
        )

    def stats(self, client: TestClient) -> dict[str, Any]:
        response = client.get(f"/internal/tasks/{self.tid}/stats", headers=admin_auth())
        assert response.status_code == 200, response.text
        doc: dict[str, Any] = response.json()
        return doc

    # --- a leader of its own making, talking to the helper directly ----------------------------

    def prepare_init(
        self,
        s: Sharded,
        helper_ct: HpkeCiphertext | None = None,
        extensions: tuple[Extension, ...] = (),
    ) -> PrepareInit:
        """What an honest leader sends the helper for `s` (or with another ciphertext)."""
        vdaf = self.task.prio3
        _, outbound = ping_pong.leader_init(
            vdaf, self.task.verify_key, [s.report_id.value], [s.public_share], [s.leader_share]
        )
        assert outbound[0] is not None
        meta = ReportMetadata(s.report_id, s.time)
        if helper_ct is None:
            helper_ct = seal(
                self.helper_config,
                Role.HELPER,
                self.task.task_id,
                meta,
                s.public_share,
                s.helper_share,
                extensions,
            )
        return PrepareInit(ReportShare(meta, s.public_share, helper_ct), outbound[0])

    def helper_init(
        self, inits: Sequence[PrepareInit], job: AggregationJobId | None = None
    ) -> httpx.Response:
        body = AggregationJobInitReq(b"", PartialBatchSelector.time_interval(), tuple(inits))
        job = job or AggregationJobId.random()
        response: httpx.Response = self.helper.put(
            f"/tasks/{self.tid}/aggregation_jobs/{job.to_b64url()}",
            content=body.encode(),
            headers={"Content-Type": MEDIA_AGGREGATION_JOB_INIT_REQ, **aggregator_auth()},
        )
        return response

    def helper_resps(self, inits: Sequence[PrepareInit]) -> AggregationJobResp:
        response = self.helper_init(inits)
        assert response.status_code in (200, 201), response.text
        return AggregationJobResp.decode(response.content)

    def aggregate_share(
        self, interval: Interval, report_count: int, checksum: bytes
    ) -> httpx.Response:
        body = AggregateShareReq(BatchSelector.time_interval(interval), b"", report_count, checksum)
        response: httpx.Response = self.helper.post(
            f"/tasks/{self.tid}/aggregate_shares",
            content=body.encode(),
            headers={"Content-Type": MEDIA_AGGREGATE_SHARE_REQ, **aggregator_auth()},
        )
        return response

    def decode_aggregate_share(self, response: httpx.Response, interval: Interval) -> Any:
        share = AggregateShare.decode(response.content).encrypted_aggregate_share
        return self.open_agg_share(Role.HELPER, BatchSelector.time_interval(interval), share)


def checksum(report_ids: Sequence[ReportId]) -> bytes:
    acc = 0
    for rid in report_ids:
        acc ^= int.from_bytes(hashlib.sha256(rid.value).digest(), "big")
    return acc.to_bytes(32, "big")


def hpke_config(client: TestClient, task_id: TaskId) -> HpkeConfig:
    response = client.get("/hpke_config", params={"task_id": task_id.to_b64url()})
    assert response.status_code == 200, response.text
    return HpkeConfigList.decode(response.content).configs[0]


def deploy(
    tmp_path: Path,
    task: Task,
    clock: TestClock | None = None,
    *,
    issuer_http: httpx.Client | None = None,
    databases: Callable[[str], str] | None = None,
) -> Deployment:
    """A leader and a helper provisioned with `task`; `issuer_http` reaches the token issuer,
    `databases` makes each role's database URL (default: SQLite files in `tmp_path`)."""
    clock = clock or TestClock(NOW)
    apps: dict[str, TestClient] = {}
    for role in ("leader", "helper"):
        url = databases(role) if databases is not None else f"sqlite:///{tmp_path / f'{role}.db'}"
        app = create_app(settings(url), clock=clock, issuer_http=issuer_http)
        client = TestClient(app)
        response = client.put(
            f"/internal/tasks/{task.task_id.to_b64url()}",
            json=task.definition(role),
            headers=admin_auth(),
        )
        assert response.status_code == 201, response.text
        apps[role] = client
    leader, helper = apps["leader"], apps["helper"]
    runner = DriverRunner(leader.app.state.aggregator, http=helper)  # type: ignore[attr-defined]
    return Deployment(
        task,
        clock,
        leader,
        helper,
        runner,
        hpke_config(leader, task.task_id),
        hpke_config(helper, task.task_id),
    )


BUCKET = Interval(NOW, PRECISION)
