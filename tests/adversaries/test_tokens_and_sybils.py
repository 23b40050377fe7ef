"""Rate limiting by anonymous tokens (001 §4.4): token reuse and sybil devices are contained.

The deployment is the joint token issuer + attester (one process, RFC 9576 §4) in front of an
in-process leader and helper whose task requires a Privacy Pass token in each input share.

Each report carries two tokens, one per aggregator, each bound to its aggregator's role and
only inside that aggregator's input share (`shared.dap.extensions`).

- A malicious leader copies the token of an honest report's leader share into a helper share
  of its own making (substituting its report for the honest one): the helper refuses it and
  counts it, because a leader token never verifies at the helper (nor a helper token at the
  leader).
- A token spent twice: the leader refuses the second report at upload; a leader that forwards
  a helper token twice is stopped by the helper's own spent-token set.
- A forged or foreign token (another task's challenge): refused.
- Many "devices" behind one attestation (one manufacturer certificate / key, i.e. a sybil farm
  sharing a device): every token request is charged to that one device id, so the farm gets
  the quota of one device (429 + Retry-After after that), and contributes at most half that
  many reports (two tokens a report) to the aggregate. A farm that makes up its own
  certificates cannot enroll at all.
"""

from __future__ import annotations

import itertools
import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from client_sdk.manufacturer import ManufacturerCA, SimulatedDevice
from client_sdk.reports import ReportInput, ReportWire, build_reports
from services.common.clock import TestClock
from services.common.db import Database
from services.token_issuer.app import create_app
from services.token_issuer.keys import KeySchedule, KeyStore
from services.token_issuer.settings import TokenIssuerSettings
from shared import hpke
from shared.b64url import b64url_decode, b64url_encode
from shared.dap.extensions import decode_extensions, encode_extensions, token_challenge
from shared.dap.hpke_context import input_share_aad, input_share_info
from shared.dap.ids import TaskId
from shared.dap.messages import PlaintextInputShare, PrepareError, PrepareRespState, Report, Role
from shared.dap.task import TokenPolicy
from shared.privacypass.attestation import DEVICE_ID_HEADER, NONCE_HEADER, SIGNATURE_HEADER
from shared.privacypass.client import create_token_request, finalize_token
from shared.privacypass.directory import ISSUER_DIRECTORY_PATH, IssuerDirectory
from shared.privacypass.issuance import IssuerKey
from shared.privacypass.messages import MEDIA_TOKEN_REQUEST, Token
from tests.adversaries.harness import (
    BUCKET,
    NOW,
    PRECISION,
    Deployment,
    Task,
    deploy,
    problem_type,
)

QUOTA = 6  # tokens per device and window: 3 reports
POLICY = {"issuer_url": "http://issuer.test/", "issuer_name": "issuer.test"}


def _b64(data: bytes) -> str:
    return b64url_encode(data)


@pytest.fixture(scope="module")
def issuer_keys() -> list[IssuerKey]:
    """Keys for the issuer's epochs: distinct truncated ids (the store redraws on a clash)."""
    keys: list[IssuerKey] = []
    while len(keys) < 3:
        key = IssuerKey.generate()
        if all(
            k.token_key.truncated_token_key_id != key.token_key.truncated_token_key_id for k in keys
        ):
            keys.append(key)
    return keys


@pytest.fixture(scope="module")
def manufacturer() -> ManufacturerCA:
    return ManufacturerCA.generate(now=NOW)


@dataclass
class World:
    clock: TestClock
    issuer: TestClient
    dep: Deployment

    def enroll(self, device: SimulatedDevice) -> None:
        r = self.issuer.post("/attester/enroll", json={"certificate": device.certificate_pem()})
        assert r.status_code in (200, 201), r.text

    def request_token(
        self, device: SimulatedDevice, task_id: TaskId | None = None, role: Role = Role.LEADER
    ) -> Token | int:
        """A token for `role`'s share of a report now (or the attester's refusal status)."""
        policy = TokenPolicy.model_validate(POLICY)
        challenge = token_challenge(task_id or self.dep.task.task_id, NOW, policy, role)
        doc = IssuerDirectory.decode(self.issuer.get(ISSUER_DIRECTORY_PATH).content)
        selected = doc.select_key(self.clock.now())
        assert selected is not None
        request, state = create_token_request(challenge, selected.token_key_object())
        body = request.encode()
        r = self.issuer.post("/attester/challenge", json={"device_id": _b64(device.device_id)})
        assert r.status_code == 200, r.text
        nonce = b64url_decode(r.json()["nonce"], "nonce", padding_allowed=True)
        r = self.issuer.post(
            "/attester/token-request",
            content=body,
            headers={
                "Content-Type": MEDIA_TOKEN_REQUEST,
                DEVICE_ID_HEADER: _b64(device.device_id),
                NONCE_HEADER: _b64(nonce),
                SIGNATURE_HEADER: _b64(device.sign(nonce, body)),
            },
        )
        if r.status_code != 200:
            status: int = r.status_code
            return status
        return finalize_token(state, r.content)

    def request_pair(self, device: SimulatedDevice) -> tuple[Token, Token] | int:
        """The leader's and the helper's token for one report, as the SDK's wallet gets them:
        two separate issuances (or the first refusal status)."""
        leader = self.request_token(device, role=Role.LEADER)
        if not isinstance(leader, Token):
            return leader
        helper = self.request_token(device, role=Role.HELPER)
        if not isinstance(helper, Token):
            return helper
        return leader, helper

    def upload_with(self, pair: tuple[Token, Token], measurement: int = 1) -> int:
        leader, helper = pair
        s = self.dep.shard(measurement)
        report = self.dep.seal_report(
            s, encode_extensions(token=leader), encode_extensions(token=helper)
        )
        return self.dep.upload(report).status_code

    def device_report(self, pair: tuple[Token, Token], measurement: int = 1) -> Report:
        """A report as an honest device builds it (`client_sdk.reports`)."""
        leader, helper = pair
        dep = self.dep
        item = ReportInput(
            measurement, NOW, encode_extensions(token=leader), encode_extensions(token=helper)
        )
        (report,) = build_reports(
            dep.task.prio3,
            ReportWire(dep.task.task_id, PRECISION),
            [item],
            dep.leader_config,
            dep.helper_config,
        )
        assert isinstance(report, Report)  # a DAP-09 task
        return report


@pytest.fixture
def world(
    tmp_path: Path, issuer_keys: list[IssuerKey], manufacturer: ManufacturerCA
) -> Iterator[World]:
    clock = TestClock(NOW)
    pool = itertools.cycle(issuer_keys)

    def keys(db: Database, schedule: KeySchedule, c: TestClock) -> KeyStore:
        return KeyStore(db, schedule, c, generate=pool.__next__)

    settings = TokenIssuerSettings(
        role="joint",
        issuer_database_url=f"sqlite:///{tmp_path / 'issuer.db'}",
        attester_database_url=f"sqlite:///{tmp_path / 'attester.db'}",
        quota_tokens=QUOTA,
    )
    app = create_app(
        settings,
        clock=clock,
        trust_anchors=[manufacturer.certificate],
        key_store_factory=keys,  # type: ignore[arg-type]
    )
    with TestClient(app, base_url="http://issuer.test") as issuer:
        # The task pins the keys the issuer's directory lists (as the recipe server does).
        directory = IssuerDirectory.decode(issuer.get(ISSUER_DIRECTORY_PATH).content)
        key_ids = [_b64(k.token_key_object().token_key_id) for k in directory.keys_of_type()]
        task = Task({"type": "Prio3Count"}, per_role={})
        for role in ("leader", "helper"):
            task.per_role[role] = {"tokens": {**POLICY, "key_ids": key_ids}}
        yield World(clock, issuer, deploy(tmp_path, task, clock, issuer_http=issuer))


def _copied_token(dep: Deployment, report: Report) -> Token:
    """What a malicious leader finds in its own share of an honest report."""
    ct = report.leader_encrypted_input_share
    keypair = dep.leader_agg.keypair(ct.config_id)
    assert keypair is not None
    aad = input_share_aad(dep.task.task_id, report.report_metadata, report.public_share)
    plain = hpke.open(keypair, ct.enc, input_share_info(Role.LEADER), aad, ct.payload)
    token = decode_extensions(PlaintextInputShare.decode(plain).extensions).token
    assert token is not None
    return token


def _with_token(token: Token) -> tuple[Any, ...]:
    return encode_extensions(token=token)


def test_leader_cannot_substitute_a_report_with_the_copied_token(
    world: World, manufacturer: ManufacturerCA
) -> None:
    """An honest device's report reaches the (malicious) leader, which opens its own share,
    copies the token, drops the report and sends the helper a report of its choosing whose
    helper share (HPKE is public-key: anyone can seal to the helper) carries the copy. With
    B-1 such substitutions a batch would hold one honest report."""
    device = SimulatedDevice.manufacture(manufacturer)
    world.enroll(device)
    pair = world.request_pair(device)
    assert isinstance(pair, tuple)
    dep = world.dep
    honest = world.device_report(pair, measurement=1)
    copied = _copied_token(dep, honest)
    chosen = dep.prepare_init(dep.shard(0), extensions=encode_extensions(token=copied))
    (resp,) = dep.helper_resps([chosen]).prepare_resps
    assert resp.prepare_resp_state == PrepareRespState.REJECT
    assert resp.prepare_error == PrepareError.INVALID_MESSAGE  # sagg's extension refusals
    assert dep.stats(dep.helper)["rejections"]["aggregation"] == {"token_invalid": 1}
    # The honest report, had the leader forwarded it, goes through on its own helper token.
    assert dep.upload(honest).status_code == 201
    assert dep.collect(BUCKET) == (1, 1)


def test_tokens_verify_only_at_their_own_aggregator(
    world: World, manufacturer: ManufacturerCA
) -> None:
    """A leader token is no good at the helper, a helper token no good at the leader."""
    device = SimulatedDevice.manufacture(manufacturer)
    world.enroll(device)
    pair = world.request_pair(device)
    assert isinstance(pair, tuple)
    leader, helper = pair
    dep = world.dep
    assert world.upload_with((helper, leader)) == 400  # swapped: the leader refuses its share
    assert dep.stats(dep.leader)["rejections"]["upload"] == {"token_invalid": 1}
    init = dep.prepare_init(dep.shard(1), extensions=encode_extensions(token=leader))
    (resp,) = dep.helper_resps([init]).prepare_resps
    assert resp.prepare_error == PrepareError.INVALID_MESSAGE
    assert dep.stats(dep.helper)["rejections"]["aggregation"] == {"token_invalid": 1}
    # Each in its own share: accepted (neither was spent by the refusals).
    assert world.upload_with(pair) == 201
    assert dep.collect(BUCKET) == (1, 1)


def test_token_spent_twice_is_refused_at_upload(world: World, manufacturer: ManufacturerCA) -> None:
    device = SimulatedDevice.manufacture(manufacturer)
    world.enroll(device)
    pair = world.request_pair(device)
    assert isinstance(pair, tuple)
    assert world.upload_with(pair) in (200, 201)
    s = world.dep.shard(1)
    second = world.dep.upload(world.dep.seal_report(s, *map(_with_token, pair)))
    assert problem_type(second) == "reportRejected"
    assert world.dep.collect(BUCKET) == (1, 1)


def test_helper_refuses_a_token_the_leader_lets_through_twice(
    world: World, manufacturer: ManufacturerCA
) -> None:
    """A malicious leader skips its own spent-token check and sends the helper two reports
    carrying the same helper token: the helper keeps its own spent set and rejects the
    second."""
    device = SimulatedDevice.manufacture(manufacturer)
    world.enroll(device)
    token = world.request_token(device, role=Role.HELPER)
    assert isinstance(token, Token)
    dep = world.dep
    exts = encode_extensions(token=token)
    first = dep.prepare_init(dep.shard(1), extensions=exts)
    second = dep.prepare_init(dep.shard(1), extensions=exts)
    resps = dep.helper_resps([first]).prepare_resps
    assert resps[0].prepare_resp_state == PrepareRespState.CONTINUE
    resps = dep.helper_resps([second]).prepare_resps
    assert resps[0].prepare_resp_state == PrepareRespState.REJECT
    # Within one job too: the first use is spent, the second refused.
    third, fourth = (dep.prepare_init(dep.shard(1), extensions=exts) for _ in range(2))
    resps = dep.helper_resps([third, fourth]).prepare_resps
    assert [r.prepare_resp_state for r in resps] == [PrepareRespState.REJECT] * 2
    assert dep.stats(dep.helper)["rejections"]["aggregation"] == {"token_spent": 3}


def test_forged_and_foreign_tokens_are_refused(world: World, manufacturer: ManufacturerCA) -> None:
    device = SimulatedDevice.manufacture(manufacturer)
    world.enroll(device)
    foreign = world.request_token(device, TaskId.random())  # another task's challenge
    assert isinstance(foreign, Token)
    real = world.request_pair(device)
    assert isinstance(real, tuple)
    assert world.upload_with((foreign, real[1])) == 400
    forged = Token(
        secrets.token_bytes(32),
        real[0].challenge_digest,
        real[0].token_key_id,
        secrets.token_bytes(256),
    )
    assert world.upload_with((forged, real[1])) == 400
    no_token = world.dep.upload(world.dep.seal_report(world.dep.shard(1)))
    assert problem_type(no_token) == "reportRejected"
    # A malicious leader forwarding the forged token: the helper checks it itself.
    init = world.dep.prepare_init(world.dep.shard(1), extensions=encode_extensions(token=forged))
    resp = world.dep.helper_resps([init]).prepare_resps[0]
    assert resp.prepare_resp_state == PrepareRespState.REJECT
    assert resp.prepare_error == PrepareError.INVALID_MESSAGE  # sagg's extension refusals
    assert "token_invalid" in str(world.dep.stats(world.dep.helper)["rejections"])


def test_sybils_behind_one_attestation_share_one_quota(
    world: World, manufacturer: ManufacturerCA
) -> None:
    """Ten virtual devices driven by one attested key: the attester sees one device id, so the
    farm obtains QUOTA tokens in the window, QUOTA / 2 reports' worth, and its reports add at
    most that to the count."""
    device = SimulatedDevice.manufacture(manufacturer)
    world.enroll(device)
    world.enroll(device)  # re-enrolling the same certificate is the same device (no new quota)
    reports = QUOTA // 2
    outcomes = [world.request_pair(device) for _ in range(10)]
    pairs = [p for p in outcomes if isinstance(p, tuple)]
    assert len(pairs) == reports
    assert outcomes[reports:] == [429] * (10 - reports)
    for pair in pairs:
        assert world.upload_with(pair) in (200, 201)
        assert world.upload_with(pair) == 400  # and none of them twice
    honest = SimulatedDevice.manufacture(manufacturer)
    world.enroll(honest)
    other = world.request_pair(honest)  # another device still has its own quota
    assert isinstance(other, tuple)
    assert world.upload_with(other) in (200, 201)
    assert world.dep.collect(BUCKET) == (reports + 1, reports + 1)


def test_quota_refusal_carries_retry_after(world: World, manufacturer: ManufacturerCA) -> None:
    device = SimulatedDevice.manufacture(manufacturer)
    world.enroll(device)
    for _ in range(QUOTA):
        assert isinstance(world.request_token(device), Token)
    policy = TokenPolicy.model_validate(POLICY)
    doc = IssuerDirectory.decode(world.issuer.get(ISSUER_DIRECTORY_PATH).content)
    selected = doc.select_key(NOW)
    assert selected is not None
    request, _ = create_token_request(
        token_challenge(world.dep.task.task_id, NOW, policy, Role.HELPER),
        selected.token_key_object(),
    )
    nonce_doc = world.issuer.post(
        "/attester/challenge", json={"device_id": _b64(device.device_id)}
    ).json()
    nonce = b64url_decode(nonce_doc["nonce"], "nonce", padding_allowed=True)
    r = world.issuer.post(
        "/attester/token-request",
        content=request.encode(),
        headers={
            "Content-Type": MEDIA_TOKEN_REQUEST,
            DEVICE_ID_HEADER: _b64(device.device_id),
            NONCE_HEADER: _b64(nonce),
            SIGNATURE_HEADER: _b64(device.sign(nonce, request.encode())),
        },
    )
    assert r.status_code == 429
    assert int(r.headers["retry-after"]) > 0
    # The quota comes back with the next window, not before.
    world.clock.advance(int(r.headers["retry-after"]))
    assert isinstance(world.request_token(device), Token)


def test_self_made_certificates_cannot_enroll(world: World) -> None:
    """A farm minting device certificates under its own CA gets no device id at all."""
    rogue = ManufacturerCA.generate("rogue factory", now=NOW)
    for _ in range(3):
        device = SimulatedDevice.manufacture(rogue)
        r = world.issuer.post("/attester/enroll", json={"certificate": device.certificate_pem()})
        assert r.status_code == 403
        r = world.issuer.post("/attester/challenge", json={"device_id": _b64(device.device_id)})
        assert r.status_code == 401
