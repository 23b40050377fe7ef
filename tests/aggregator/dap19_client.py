"""A DAP-19 client and collector for the aggregator tests, written from the digest
(/work/shared/specs/dap-19.md) with the wire structs of `shared.dap.messages19`, VDAF-20
Prio3 and HPKE, and nothing of the aggregator: the task's TaskConfiguration is encoded here
field by field (digest §3), the AADs and info strings are built here (digest §5.3, §7.4), and
the aggregate is unsharded here."""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass, field
from typing import Any

import httpx

from shared import hpke
from shared.b64url import b64url_encode
from shared.dap.ids import ReportId
from shared.dap.messages import HpkeCiphertext, HpkeConfig, HpkeConfigList, Interval, Url
from shared.dap.messages19 import (
    CollectionJobReq,
    CollectionJobResp,
    Extension,
    InputShareAad,
    PlaintextInputShare,
    Query,
    Report,
    ReportMetadata,
    ReportShare,
    TaskConfiguration,
    TaskExtension,
    VerifyInit,
)
from shared.vdaf import ping_pong
from shared.vdaf.prio3 import Prio3
from shared.vdaf.spec import VdafSpec
from tests.aggregator.env import Env, collector_auth
from tests.aggregator.helpers import HELPER_URL, LEADER_URL, TaskParams

UPLOAD_REQ = "application/ppm-dap;message=upload-req"
COLLECTION_JOB_REQ = "application/ppm-dap;message=collection-job-req"
COLLECTION_JOB_RESP = "application/ppm-dap;message=collection-job-resp"
INIT_REQ = "application/ppm-dap;message=aggregation-job-init-req"
JOB_RESP = "application/ppm-dap;message=aggregation-job-resp"
AGG_SHARE_REQ = "application/ppm-dap;message=aggregate-share-req"
LEADER, HELPER, CLIENT, COLLECTOR = 2, 3, 1, 0

#: DAP App. B codepoints and configurations, by hand (digest §3).
VDAF_CODEPOINTS: dict[str, tuple[int, list[tuple[str, int]]]] = {
    "Prio3Count": (1, []),
    "Prio3Sum": (2, [("max_measurement", 8)]),
    "Prio3SumVec": (3, [("length", 4), ("max_measurement", 8), ("chunk_length", 4)]),
    "Prio3Histogram": (4, [("length", 4), ("chunk_length", 4)]),
}


@dataclass
class Task19:
    """A DAP-19 task as both aggregators are provisioned with it, and its exact
    TaskConfiguration bytes."""

    params: TaskParams
    config: TaskConfiguration
    config_bytes: bytes = field(repr=False)

    @property
    def tp(self) -> int:
        return self.params.time_precision

    @property
    def vdaf(self) -> Prio3:
        return VdafSpec.model_validate(self.params.vdaf).instance()

    @property
    def ctx(self) -> bytes:
        return b"dap-19" + self.params.task_id.value


def make_task(
    vdaf: dict[str, Any],
    *,
    query_type: str = "time_interval",
    min_batch_size: int = 1,
    time_precision: int = 3600,
    task_interval: Interval | None = None,
    task_info: bytes | None = None,
    provision_blob: bool = True,
    definition: dict[str, Any] | None = None,
    leader_url: str = LEADER_URL,
    helper_url: str = HELPER_URL,
    **kw: Any,
) -> Task19:
    """`provision_blob` False: the aggregators derive the configuration themselves (empty
    task_info); the bytes here must then be what they derive. `definition` adds fields to
    both aggregators' TaskDefinition."""
    vdaf = {**vdaf, "version": "VDAF-20"}
    vdaf_type, fields = VDAF_CODEPOINTS[vdaf["type"]]
    vdaf_config = b"".join(int(vdaf[name]).to_bytes(width, "big") for name, width in fields)
    config = TaskConfiguration(
        task_info=secrets.token_bytes(16) if task_info is None else task_info,
        leader_aggregator_endpoint=Url(leader_url.encode()),
        helper_aggregator_endpoint=Url(helper_url.encode()),
        time_precision=time_precision,
        min_batch_size=min_batch_size,
        batch_mode=1 if query_type == "time_interval" else 2,
        batch_config=b"",
        vdaf_type=vdaf_type,
        vdaf_configuration=vdaf_config,
        extensions=() if task_interval is None else (TaskExtension(1, task_interval.encode()),),
    )
    raw = config.encode()
    extra: dict[str, Any] = {
        "dap": "dap-19",
        "leader_endpoint": leader_url,
        "helper_endpoint": helper_url,
        **(definition or {}),
    }
    if provision_blob:
        extra["task_configuration"] = b64url_encode(raw)
    params = TaskParams(
        vdaf=vdaf,
        query_type=query_type,
        min_batch_size=min_batch_size,
        time_precision=time_precision,
        verify_key=secrets.token_bytes(32),
        overrides={"leader": extra, "helper": extra},
        **kw,
    )
    return Task19(params, config, raw)


def hpke_config(client: httpx.Client, base: str = "") -> HpkeConfig:
    response = client.get(f"{base}/hpke_config", headers={"Accept": "application/ppm-dap"})
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "application/ppm-dap;message=hpke-config-list"
    return HpkeConfigList.decode(response.content).configs[0]


def seal(
    task: Task19,
    config: HpkeConfig,
    role: int,
    metadata: ReportMetadata,
    public_share: bytes,
    payload: bytes,
    extensions: tuple[Extension, ...] = (),
) -> HpkeCiphertext:
    aad = InputShareAad(task.params.task_id, task.config, metadata, public_share).encode()
    # The AAD carries the provisioned configuration bytes (digest §5.2).
    assert task.config_bytes in aad
    info = b"dap-19 input share" + bytes((CLIENT, role))
    plaintext = PlaintextInputShare(extensions, payload).encode()
    enc, ct = hpke.seal(config.public_key, info, aad, plaintext)
    return HpkeCiphertext(config.id, enc, ct)


def make_report(
    task: Task19,
    leader_config: HpkeConfig,
    helper_config: HpkeConfig,
    measurement: Any,
    time_s: int,
    *,
    report_id: ReportId | None = None,
    public_extensions: tuple[Extension, ...] = (),
    extensions: tuple[Extension, ...] = (),
    helper_extensions: tuple[Extension, ...] | None = None,
) -> Report:
    """Shard and seal like a DAP-19 client (digest §5.3): time in units, ctx "dap-19" ||
    task_id, "dap-19 input share" labels, the TaskConfiguration in the AAD."""
    vdaf = task.vdaf
    rid = report_id or ReportId.random()
    public, shares = vdaf.shard(
        measurement, rid.value, secrets.token_bytes(vdaf.RAND_SIZE), task.ctx
    )
    metadata = ReportMetadata(rid, time_s // task.tp, public_extensions)
    helper_ext = extensions if helper_extensions is None else helper_extensions
    return Report(
        metadata,
        public,
        seal(task, leader_config, LEADER, metadata, public, shares[0], extensions),
        seal(task, helper_config, HELPER, metadata, public, shares[1], helper_ext),
    )


def upload(
    client: httpx.Client, task: Task19, reports: list[Report], base: str = ""
) -> httpx.Response:
    """POST the reports as one UploadRequest to the leader (at `base`, or the client's)."""
    response: httpx.Response = client.post(
        f"{base}/tasks/{task.params.task_id.to_b64url()}/reports",
        content=b"".join(r.encode() for r in reports),
        headers={"Content-Type": UPLOAD_REQ},
    )
    return response


def open_share(task: Task19, role: int, request: bytes, ciphertext: HpkeCiphertext) -> bytes:
    """Decrypt an aggregate share (digest §7.4): AAD = task_id || TaskConfiguration ||
    the collector's CollectionJobReq bytes."""
    aad = task.params.task_id.value + task.config_bytes + request
    info = b"dap-19 aggregate share" + bytes((role, COLLECTOR))
    return hpke.open(task.params.collector_key, ciphertext.enc, info, aad, ciphertext.payload)


def unshard(task: Task19, request: CollectionJobReq, resp: CollectionJobResp) -> Any:
    raw = request.encode()
    leader = open_share(task, LEADER, raw, resp.leader_encrypted_agg_share)
    helper = open_share(task, HELPER, raw, resp.helper_encrypted_agg_share)
    return task.vdaf.unshard([leader, helper], resp.report_count)


def verify_init(
    task: Task19,
    helper_config: HpkeConfig,
    measurement: Any,
    time_s: int,
    *,
    report_id: ReportId | None = None,
    public_extensions: tuple[Extension, ...] = (),
    extensions: tuple[Extension, ...] = (),
) -> VerifyInit:
    """What a DAP-19 leader sends the helper for one fresh report (digest §6.2, §6.8)."""
    vdaf = task.vdaf
    rid = report_id or ReportId.random()
    rand = secrets.token_bytes(vdaf.RAND_SIZE)
    public, shares = vdaf.shard(measurement, rid.value, rand, task.ctx)
    metadata = ReportMetadata(rid, time_s // task.tp, public_extensions)
    _, outbound = ping_pong.leader_init(
        vdaf, task.params.verify_key, [rid.value], [public], [shares[0]], task.ctx
    )
    assert outbound[0] is not None
    sealed = seal(task, helper_config, HELPER, metadata, public, shares[1], extensions)
    return VerifyInit(ReportShare(metadata, public, sealed), outbound[0])


def checksum(report_ids: list[ReportId]) -> bytes:
    """XOR of SHA-256(report_id) (digest §6.6)."""
    acc = 0
    for rid in report_ids:
        acc ^= int.from_bytes(hashlib.sha256(rid.value).digest(), "big")
    return acc.to_bytes(32, "big")


def create_collection(env: Env, task: Task19, now: int) -> tuple[CollectionJobReq, str]:
    """POST a collection job for the time_precision bucket of `now`: (the request, Location)."""
    request = CollectionJobReq(Query.time_interval(Interval(now // task.tp, 1)), b"")
    created = env.leader.post(
        f"/tasks/{env.tid}/collection_jobs",
        content=request.encode(),
        headers={"Content-Type": COLLECTION_JOB_REQ, **collector_auth()},
    )
    assert created.status_code == 201, created.text
    return request, created.headers["location"]


def poll_collection(env: Env, location: str, rounds: int = 20) -> httpx.Response:
    """Drive the jobs and GET the collection job until the leader answers other than
    "pending" (an empty 200): with the collection, or with a problem."""
    for _ in range(rounds):
        env.drive()
        polled: httpx.Response = env.leader.get(location, headers=collector_auth())
        if polled.status_code != 200 or polled.content:
            return polled
        env.advance(1)
    raise AssertionError("the collection did not finish")
