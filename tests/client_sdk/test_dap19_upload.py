"""DAP-19 reports and uploads from the SDK, checked against the digest's byte layouts (dap-19.md
§5.2, §5.3, §10) parsed and decrypted by hand here, and a device answering a DAP-19 recipe."""

from __future__ import annotations

import base64
import hashlib
import struct
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import pytest

from client_sdk.device import DeviceConfig
from client_sdk.manufacturer import SimulatedDevice
from client_sdk.reports import ReportInput, ReportWire, build_reports
from client_sdk.sampling import DonationSchedule
from client_sdk.simulator import Simulator
from client_sdk.upload import ClientTask, Uploader, upload_reports
from shared import hpke
from shared.b64url import b64url_decode, b64url_encode
from shared.dap import messages19 as m19
from shared.dap.extensions import EXTENSION_PRIVACY_PASS_TOKEN, EXTENSION_RECIPE_BINDING
from shared.dap.ids import TaskId
from shared.dap.messages import HpkeConfig, HpkeConfigList, Url
from shared.vdaf import ping_pong
from shared.vdaf.spec import VdafSpec
from tests.client_sdk.harness import NOW, RECIPES, TRUSTED, World, verified

TP = 3600
HIST = VdafSpec(version="VDAF-20", type="Prio3Histogram", length=4, chunk_length=2)


def _configuration(vdaf_type: int = 4, config: bytes = bytes.fromhex("0000000400000002")) -> bytes:
    return m19.TaskConfiguration(
        b"info", Url(b"http://l.test"), Url(b"http://h.test"), TP, 2, 1, b"", vdaf_type, config
    ).encode()


def _keys() -> tuple[hpke.HpkeKeyPair, hpke.HpkeKeyPair]:
    return hpke.generate_keypair(7), hpke.generate_keypair(9)


def _config(key: hpke.HpkeKeyPair) -> HpkeConfig:
    return HpkeConfig(key.config_id, key.kem_id, key.kdf_id, key.aead_id, key.public_key)


class _Reader:
    """Big-endian TLS fields read off by hand (the oracle for the codec under test)."""

    def __init__(self, data: bytes) -> None:
        self.data, self.at = data, 0

    def take(self, n: int) -> bytes:
        out = self.data[self.at : self.at + n]
        assert len(out) == n
        self.at += n
        return out

    def u(self, n: int) -> int:
        return int.from_bytes(self.take(n), "big")

    def opaque(self, n: int) -> bytes:
        return self.take(self.u(n))


def _open_by_hand(
    body: bytes, task_id: bytes, configuration: bytes, keys: dict[int, hpke.HpkeKeyPair]
) -> tuple[int, bytes, list[tuple[int, list[tuple[int, bytes]], bytes]]]:
    """Parse one Report (digest §5.2), decrypt both shares with the -19 info and AAD (§5.3).
    Returns (time, public_share, [(config_id, private extensions, payload)] per aggregator)."""
    r = _Reader(body)
    report_id, time = r.take(16), r.u(8)
    assert r.opaque(2) == b""  # no public extensions
    metadata = report_id + struct.pack(">Q", time) + b"\x00\x00"
    public = r.opaque(4)
    aad = task_id + configuration + metadata + struct.pack(">I", len(public)) + public
    shares = []
    for role in (2, 3):
        config_id, enc, payload = r.u(1), r.opaque(2), r.opaque(4)
        info = b"dap-19 input share" + bytes([1, role])
        plain = _Reader(hpke.open(keys[config_id], enc, info, aad, payload))
        ext_bytes = _Reader(plain.opaque(2))
        extensions = []
        while ext_bytes.at < len(ext_bytes.data):
            extensions.append((ext_bytes.u(2), ext_bytes.opaque(2)))
        shares.append((config_id, extensions, plain.opaque(4)))
        assert plain.at == len(plain.data)
    assert r.at == len(body)
    return time, public, shares


def test_a_report_decrypts_and_verifies_by_the_digest() -> None:
    leader, helper = _keys()
    raw = _configuration()
    task_id = TaskId.random()
    wire = ReportWire(task_id, TP, raw)
    token_ext = m19.Extension(EXTENSION_PRIVACY_PASS_TOKEN, b"tok")
    binding_ext = m19.Extension(EXTENSION_RECIPE_BINDING, b"bind")
    t = 1_700_000_123
    (report,) = build_reports(
        HIST.instance(),
        wire,
        [ReportInput(2, t, (token_ext, binding_ext), (binding_ext,))],
        _config(leader),
        _config(helper),
    )
    time, public, shares = _open_by_hand(
        report.encode(), task_id.value, raw, {7: leader, 9: helper}
    )
    assert time == t // TP  # time_precision units, not seconds (§1)
    assert [s[0] for s in shares] == [7, 9]
    assert shares[0][1] == [(0xFE00, b"tok"), (0xFE01, b"bind")]  # strictly increasing
    assert shares[1][1] == [(0xFE01, b"bind")]
    # VDAF-20 with ctx "dap-19" || task_id (§10): preparing the decrypted shares gives 2.
    vdaf, ctx = HIST.instance(), b"dap-19" + task_id.value
    nonce = report.report_metadata.report_id.value
    key = bytes(range(32))
    state, out = ping_pong.leader_init(vdaf, key, [nonce], [public], [shares[0][2]], ctx)
    back_state, back = ping_pong.helper_init(
        vdaf, key, [nonce], [public], [shares[1][2]], [m or b"" for m in out], ctx
    )
    assert ping_pong.leader_continued(vdaf, state, back).all()
    aggs = [vdaf.encode_agg_share(vdaf.aggregate(s.out_shares)) for s in (state, back_state)]
    assert vdaf.unshard(aggs, 1) == [0, 0, 1, 0]
    # Another context (DAP-09's none, or another task) does not verify.
    other = b"dap-19" + TaskId.random().value
    state2, out2 = ping_pong.leader_init(vdaf, key, [nonce], [public], [shares[0][2]], other)
    _, back2 = ping_pong.helper_init(
        vdaf, key, [nonce], [public], [shares[1][2]], [m or b"" for m in out2], other
    )
    assert back2 == [None]  # the helper's verification fails
    assert not ping_pong.leader_continued(vdaf, state2, back2).any()


def test_the_aad_binds_the_configuration_bytes() -> None:
    leader, helper = _keys()
    raw = _configuration()
    task_id = TaskId.random()
    (report,) = build_reports(
        HIST.instance(),
        ReportWire(task_id, TP, raw),
        [ReportInput(0, NOW)],
        _config(leader),
        _config(helper),
    )
    other = _configuration(4, bytes.fromhex("0000000400000001"))  # one byte differs
    with pytest.raises(hpke.HpkeError):
        _open_by_hand(report.encode(), task_id.value, other, {7: leader, 9: helper})


class _Leader:
    """A leader that records each request and answers with the next scripted response."""

    def __init__(self, *answers: httpx.Response) -> None:
        self.answers = list(answers)
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        return self.answers.pop(0)


def _reports(n: int) -> tuple[list[bytes], list[bytes]]:
    """n DAP-19 reports' bytes and their report ids."""
    task_id = TaskId.random()
    built = build_reports(
        HIST.instance(),
        ReportWire(task_id, TP, _configuration()),
        [ReportInput(i % 4, NOW) for i in range(n)],
        *(_config(k) for k in _keys()),
    )
    return [r.encode() for r in built], [r.report_metadata.report_id.value for r in built]


def _uploader(leader: _Leader) -> Uploader:
    http = httpx.Client(transport=httpx.MockTransport(leader))
    return Uploader(http, retries=1, sleep=lambda _: None)


ERRORS = "application/ppm-dap;message=upload-errors"


def test_bulk_upload_reads_upload_errors_per_report() -> None:
    bodies, ids = _reports(4)
    # UploadErrors by hand (digest §5.2): 17 bytes per refused report, no prefix; report 1 is
    # sealed to an unknown config (4), report 3 replayed (2).
    errors = ids[1] + b"\x04" + ids[3] + b"\x02"
    leader = _Leader(httpx.Response(200, content=errors, headers={"Content-Type": ERRORS}))
    results = _uploader(leader).post("http://l.test", "T", bodies)
    (request,) = leader.requests
    assert request.method == "POST" and request.url.path == "/tasks/T/reports"
    assert request.headers["Content-Type"] == "application/ppm-dap;message=upload-req"
    assert request.content == b"".join(bodies)  # UploadRequest: the reports, no prefix
    assert [r.status for r in results] == ["sent", "outdated_config", "sent", "rejected"]
    assert results[3].detail == "leader refused the report: report_replayed"


@pytest.mark.parametrize(
    ("answer", "statuses"),
    [
        (httpx.Response(200), ["sent", "sent"]),
        (httpx.Response(201, content=b""), ["sent", "sent"]),
        (
            httpx.Response(
                400,
                json={"type": "urn:ietf:params:ppm:dap:error:invalidMessage"},
                headers={"Content-Type": "application/problem+json"},
            ),
            ["rejected", "rejected"],
        ),
        # A truncated entry, an unknown code (0 is reserved), a report not sent, no media type.
        (httpx.Response(200, content=b"\x01" * 16, headers={"Content-Type": ERRORS}), None),
        (
            httpx.Response(200, content=b"\x01" * 16 + b"\x00", headers={"Content-Type": ERRORS}),
            None,
        ),
        (
            httpx.Response(200, content=b"\x01" * 16 + b"\x02", headers={"Content-Type": ERRORS}),
            None,
        ),
        (httpx.Response(200, content=b"\x01" * 17), None),
    ],
)
def test_whole_request_answers(answer: httpx.Response, statuses: list[str] | None) -> None:
    bodies, _ = _reports(2)
    results = _uploader(_Leader(answer)).post("http://l.test", "T", bodies)
    assert [r.status for r in results] == (statuses or ["failed", "failed"])


def test_server_errors_are_retried_then_given_up() -> None:
    bodies, _ = _reports(1)
    leader = _Leader(httpx.Response(503), httpx.Response(200))
    assert [r.status for r in _uploader(leader).post("http://l", "T", bodies)] == ["sent"]
    assert len(leader.requests) == 2
    leader = _Leader(httpx.Response(503), httpx.Response(502))
    (result,) = _uploader(leader).post("http://l", "T", bodies)
    assert (result.status, result.detail) == ("failed", "leader answered 502")


def test_replayed_on_a_resend_means_stored_before() -> None:
    """A leader that stored the reports and then answered 503 answers the resend with
    report_replayed (2) for them: they count as sent. A collected batch (1) stays refused."""
    bodies, ids = _reports(2)
    errors = ids[0] + b"\x02" + ids[1] + b"\x01"
    answer = httpx.Response(200, content=errors, headers={"Content-Type": ERRORS})
    leader = _Leader(httpx.Response(503), answer)
    results = _uploader(leader).post("http://l", "T", bodies)
    assert [r.status for r in results] == ["sent", "rejected"]
    assert results[1].detail == "leader refused the report: batch_collected"

    # Sent in an earlier round (the device's `resent`), not in an earlier attempt of this call.
    leader = _Leader(httpx.Response(200, content=errors, headers={"Content-Type": ERRORS}))
    uploader = _uploader(leader)
    resent = [True, True]
    assert [r.status for r in uploader.post("http://l", "T", bodies, resent=resent)] == [
        "sent",
        "rejected",
    ]
    # The first send of a report with a seen id is a real replay.
    replayed = ids[0] + b"\x02" + ids[1] + b"\x02"
    leader = _Leader(httpx.Response(200, content=replayed, headers={"Content-Type": ERRORS}))
    results = _uploader(leader).upload("dap-19", "http://l", "T", bodies, resent=[False, True])
    assert [r.status for r in results] == ["rejected", "sent"]


def test_upload_reports_sends_per_request_reports_per_upload_request() -> None:
    leader_key, helper_key = _keys()
    lists = {
        "l.test": HpkeConfigList((_config(leader_key),)),
        "h.test": HpkeConfigList((_config(helper_key),)),
    }
    raw = _configuration()
    task = ClientTask(
        task_id=TaskId.random().to_b64url(),
        leader="http://l.test",
        helper="http://h.test",
        vdaf=HIST,
        time_precision=TP,
        dap="dap-19",
        task_configuration=b64url_encode(raw),
    )
    seen: list[httpx.Request] = []

    def serve(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if request.url.path == "/hpke_config":
            assert "task_id" not in request.url.params  # DAP-19: no per-task configs
            return httpx.Response(
                200,
                content=lists[request.url.host].encode(),
                headers={"Content-Type": "application/ppm-dap;message=hpke-config-list"},
            )
        return httpx.Response(200)

    with httpx.Client(transport=httpx.MockTransport(serve)) as http:
        summary = upload_reports(task, [0, 1, 2, 3, 1, 2, 3], http=http, per_request=3)
    assert (summary.uploaded, summary.rejected) == (7, [])
    posts = [r for r in seen if r.method == "POST"]
    sizes = [len(m19.UploadRequest.decode(r.content).reports) for r in posts]
    assert sorted(sizes) == [1, 3, 3]
    key = {7: leader_key, 9: helper_key}
    for request in posts:
        for report in m19.UploadRequest.decode(request.content).reports:
            _open_by_hand(report.encode(), b64url_decode(task.task_id, "id"), raw, key)


def test_client_task_refuses_a_dap_19_task_without_its_configuration() -> None:
    base: dict[str, Any] = {
        "task_id": TaskId.random().to_b64url(),
        "leader": "http://l",
        "helper": "http://h",
        "vdaf": HIST.model_dump(),
        "time_precision": TP,
    }
    with pytest.raises(ValueError, match="task_configuration"):
        ClientTask.model_validate({**base, "dap": "dap-19"})
    with pytest.raises(ValueError, match="time_precision"):
        ClientTask.model_validate(
            {
                **base,
                "dap": "dap-19",
                "time_precision": 60,
                "task_configuration": b64url_encode(_configuration()),
            }
        )


def test_a_device_answers_a_dap_19_recipe(tmp_path: Path) -> None:
    world = World(tmp_path)
    world.publish(task={"time_precision": 3600, "dap": "dap-19"})
    device = world.device(tmp_path / "d")
    device.events.add("emoji", {"emoji": "fire"}, NOW - 60)
    found = verified(world, device)
    task = found.recipe.task
    assert task.dap == "dap-19" and task.vdaf.type == "Prio3MultihotCountVec"
    raw = b64url_decode(task.task_configuration or "", "configuration")
    # The recipe's task id is taskprov's, from the published bytes (digest §11).
    label = hashlib.sha256(b"dap-taskprov task id").digest()
    assert task.task_id == TaskId(hashlib.sha256(label + raw).digest()).to_b64url()
    # The task the recipe server provisions is made of the very bytes it published.
    created = world.provisioners["recipes.sqlite3"].created
    assert (created.task_id, created.task_configuration) == (task.task_id, raw)
    assert device.answer(found).status == "queued"
    assert [r.status for r in device.run_due()] == ["sent"]
    (report,) = world.leader.uploads
    assert isinstance(report, m19.Report)
    keys = {k.config_id: k for k in world.leader.keys + world.helper.keys}
    time, _, shares = _open_by_hand(report.encode(), b64url_decode(task.task_id, "id"), raw, keys)
    (sent,) = device.audit.entries("sent")
    assert sent.detail["report_time"] == time * 3600  # the audit speaks seconds
    for _, extensions, _ in shares:
        assert [kind for kind, _ in extensions] == [
            EXTENSION_PRIVACY_PASS_TOKEN,
            EXTENSION_RECIPE_BINDING,
        ]


def test_hpke_unknown_config_id_takes_the_outdated_config_path(tmp_path: Path) -> None:
    world = World(tmp_path)
    world.publish(task={"time_precision": 3600, "dap": "dap-19"})
    device = world.device(tmp_path / "d")
    device.events.add("emoji", {"emoji": "fire"}, NOW - 60)
    device.answer(verified(world, device))
    world.leader.outdated.add(1)  # the recipe's only leader config: nothing new to seal to
    (result,) = device.run_due()
    assert result.status == "rejected" and "still lists leader config 1" in result.detail


@pytest.mark.parametrize("relay", [False, True])
def test_the_simulator_merges_dap_19_reports_in_relay_mode_only(
    tmp_path: Path, relay: bool
) -> None:
    """Each device sends its own UploadRequest; in relay mode a chunk's go in one."""
    world = World(tmp_path)
    world.publish(task={"time_precision": 3600, "dap": "dap-19"}, min_batch_size=2000)
    requests: list[int] = []
    leader = world.leader

    def counting(request: httpx.Request) -> httpx.Response:
        if request.method == "POST":
            requests.append(len(m19.UploadRequest.decode(request.read()).reports))
        return leader(request)

    world.router.apps["leader.test"] = counting
    config = DeviceConfig(
        recipe_server_url=RECIPES,
        recipe_server_key=world.signer.public_key,
        donation=DonationSchedule(1, 0),
    )
    simulator = Simulator(
        config,
        trusted=TRUSTED,
        http=world.http,
        identities=lambda: SimulatedDevice.manufacture(world.ca),
        clock=world.clock.now,
        progress=None,
        relay=relay,
    )
    summary = simulator.run("emoji.daily", 70, "emoji")
    assert summary.uploaded == summary.sampled == 70 == len(leader.uploads)
    assert not summary.failed
    # Relay: one UploadRequest per chunk of 64 devices; else one per device.
    assert sorted(requests) == ([6, 64] if relay else [1] * 70)
    assert all(isinstance(r, m19.Report) for r in leader.uploads)


def test_a_device_sends_its_due_reports_of_one_task_in_one_upload_request(
    tmp_path: Path,
) -> None:
    """A device that answered twice before uploading (offline for a day) sends both reports
    of the DAP-19 task in one UploadRequest (DAP-19 §4.4.2), each audited as sent."""
    world = World(tmp_path)
    world.publish(task={"time_precision": 3600, "dap": "dap-19"})
    posts: list[int] = []
    leader = world.leader

    def counting(request: httpx.Request) -> httpx.Response:
        if request.method == "POST":
            posts.append(len(m19.UploadRequest.decode(request.read()).reports))
            assert "DAP-Taskprov" not in request.headers  # provisioned out of band
        return leader(request)

    world.router.apps["leader.test"] = counting
    device = world.device(tmp_path / "d")
    for day in range(2):
        device.events.add("emoji", {"emoji": "fire"}, world.clock.now() - 60)
        assert device.answer(verified(world, device)).status == "queued", day
        world.clock.advance(86400)
    assert len(device.pending()) == 2
    assert [r.status for r in device.run_due()] == ["sent", "sent"]
    assert posts == [2] and len(leader.uploads) == 2
    assert len(device.audit.entries("sent")) == 2 and device.pending() == []


def test_refused_reports_of_one_task_are_resealed_together(tmp_path: Path) -> None:
    """outdatedConfig for both due reports of a task: the recipe is fetched and verified again
    once, and both go again sealed to the config it now lists. (A DAP-09 recipe: republishing
    a DAP-19 one makes a new task, whose TaskConfiguration the old reports do not bind.)"""
    world = World(tmp_path)
    world.publish()
    device = world.device(tmp_path / "d")
    for _ in range(2):
        device.events.add("emoji", {"emoji": "fire"}, world.clock.now() - 60)
        device.answer(verified(world, device))
        world.clock.advance(86400)
    leader = world.leader
    leader.outdated.add(1)
    leader.keys.append(hpke.generate_keypair(9))
    provisioner = world.provisioners["recipes.sqlite3"]
    provisioner.task = replace(
        provisioner.task, leader_hpke_configs=b64url_encode(leader.config_list().encode())
    )
    world.publish(version=2)
    follows: list[int] = []
    follow = device._follow_recipe

    def counting(recipe: Any, refused: Any) -> Any:
        follows.append(refused.leader_encrypted_input_share.config_id)
        return follow(recipe, refused)

    device._follow_recipe = counting  # type: ignore[method-assign]
    results = device.run_due()
    assert [r.status for r in results] == ["sent", "sent"], results
    assert [r.leader_encrypted_input_share.config_id for r in leader.uploads] == [9, 9]
    assert follows == [1]


def test_uploads_of_a_taskprov_task_announce_it() -> None:
    """Digest §11: every UploadRequest of a taskprov task carries its DAP-Taskprov header,
    the RFC 9651 Byte Sequence of the exact configuration bytes."""
    leader_key, helper_key = _keys()
    raw = _configuration()
    label = hashlib.sha256(b"dap-taskprov task id").digest()
    task = ClientTask(
        task_id=TaskId(hashlib.sha256(label + raw).digest()).to_b64url(),
        leader="http://l.test",
        helper="http://h.test",
        vdaf=HIST,
        time_precision=TP,
        dap="dap-19",
        task_configuration=b64url_encode(raw),
        taskprov=True,
    )
    announced: list[str | None] = []

    def serve(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/hpke_config":
            key = leader_key if request.url.host == "l.test" else helper_key
            return httpx.Response(
                200,
                content=HpkeConfigList((_config(key),)).encode(),
                headers={"Content-Type": "application/ppm-dap;message=hpke-config-list"},
            )
        announced.append(request.headers.get("DAP-Taskprov"))
        return httpx.Response(200)

    with httpx.Client(transport=httpx.MockTransport(serve)) as http:
        summary = upload_reports(task, [0, 1, 2], http=http, per_request=2)
    assert summary.uploaded == 3
    assert announced == [":" + base64.b64encode(raw).decode() + ":"] * 2
    with pytest.raises(ValueError, match="taskprov derives"):
        ClientTask.model_validate({**task.model_dump(), "task_id": TaskId.random().to_b64url()})
