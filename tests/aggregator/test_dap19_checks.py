"""Each check of the DAP-19 "who checks what" table (digest dap-19.md §9) the aggregators
implement, triggered with its exact error: the problem type (and status) of a whole-request
failure, or the ReportError codepoint of one report in UploadErrors or a VerifyResp. The
expected codes are the digest's numbers (§1.2), written out here, not the server's enums."""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from services.common.clock import TestClock
from shared.b64url import b64url_encode
from shared.dap.ids import BatchId, ReportId
from shared.dap.messages import HpkeCiphertext, HpkeConfig, Interval
from shared.dap.messages19 import (
    AggregateShareReq,
    AggregationJobContinueReq,
    AggregationJobExtension,
    AggregationJobInitReq,
    AggregationJobResp,
    BatchSelector,
    CollectionJobExtension,
    CollectionJobReq,
    Extension,
    Query,
    Report,
    ReportShare,
    UploadErrors,
    VerifyContinue,
    VerifyInit,
)
from tests.aggregator import dap19_client as c19
from tests.aggregator.conftest import DbFactory
from tests.aggregator.env import Env, collector_auth, make_env

# ReportError codepoints of DAP-19 (digest §1.2).
BATCH_COLLECTED, REPORT_REPLAYED, REPORT_DROPPED, HPKE_UNKNOWN_CONFIG_ID = 1, 2, 3, 4
HPKE_DECRYPT_ERROR, VDAF_VERIFY_ERROR, INVALID_MESSAGE, REPORT_TOO_EARLY = 5, 6, 7, 8
UNKNOWN_VERIFICATION_KEY_ID, UNSUPPORTED_EXTENSION = 9, 10
# VerifyRespType (digest §6.1).
CONTINUE, REJECT = 0, 2
URN = "urn:ietf:params:ppm:dap:error:"
COUNT = {"type": "Prio3Count"}
AUTH = {"Authorization": "Bearer aggregator-token-0123456789"}
SAGG_TOKEN_EXT = 0xFE00  # sagg's private extensions (shared.dap.extensions)
SAGG_BINDING_EXT = 0xFE01


class Fx:
    """A DAP-19 task on a leader and a helper, and a client for it."""

    def __init__(self, env: Env, task: c19.Task19) -> None:
        self.env, self.task = env, task
        self.lc = c19.hpke_config(env.leader)
        self.hc = c19.hpke_config(env.helper)
        self.now = env.clock.now()
        self.tid = env.tid

    def report(self, time_s: int | None = None, **kw: Any) -> Report:
        t = self.now if time_s is None else time_s
        return c19.make_report(self.task, self.lc, self.hc, 1, t, **kw)

    def upload(self, *reports: Report) -> httpx.Response:
        return c19.upload(self.env.leader, self.task, list(reports))

    def upload_raw(self, body: bytes) -> httpx.Response:
        response: httpx.Response = self.env.leader.post(
            f"/tasks/{self.tid}/reports", content=body, headers={"Content-Type": c19.UPLOAD_REQ}
        )
        return response

    def errors(self, *reports: Report) -> list[tuple[ReportId, int]]:
        """The UploadErrors of one bulk upload, as (id, code)."""
        response = self.upload(*reports)
        assert response.status_code == 200, response.text
        if not response.content:
            return []
        assert response.headers["content-type"] == "application/ppm-dap;message=upload-errors"
        return [(s.report_id, int(s.error)) for s in UploadErrors.decode(response.content).status]

    def init(
        self,
        *inits: VerifyInit,
        key_id: int = 0,
        agg_param: bytes = b"",
        extensions: tuple[AggregationJobExtension, ...] = (),
        body: bytes | None = None,
    ) -> httpx.Response:
        if body is None:
            body = AggregationJobInitReq(key_id, agg_param, extensions, inits).encode()
        response: httpx.Response = self.env.helper.post(
            f"/tasks/{self.tid}/aggregation_jobs",
            content=body,
            headers={"Content-Type": c19.INIT_REQ, **AUTH},
        )
        return response

    def vinit(self, time_s: int | None = None, **kw: Any) -> VerifyInit:
        t = self.now if time_s is None else time_s
        return c19.verify_init(self.task, self.hc, 1, t, **kw)

    def verdicts(self, response: httpx.Response) -> list[tuple[int, int | None]]:
        """(VerifyRespType, ReportError or None) per report of an AggregationJobResp."""
        assert response.status_code == 200, response.text
        assert (
            response.headers["content-type"] == "application/ppm-dap;message=aggregation-job-resp"
        )
        resp = AggregationJobResp.decode(response.content)
        return [
            (int(v.state), None if v.error is None else int(v.error)) for v in resp.verify_resps
        ]

    def collect_req(self, request: CollectionJobReq | bytes) -> httpx.Response:
        body = request if isinstance(request, bytes) else request.encode()
        response: httpx.Response = self.env.leader.post(
            f"/tasks/{self.tid}/collection_jobs",
            content=body,
            headers={"Content-Type": c19.COLLECTION_JOB_REQ, **collector_auth()},
        )
        return response

    def share_req(self, request: AggregateShareReq | bytes) -> httpx.Response:
        body = request if isinstance(request, bytes) else request.encode()
        response: httpx.Response = self.env.helper.post(
            f"/tasks/{self.tid}/aggregate_shares",
            content=body,
            headers={"Content-Type": c19.AGG_SHARE_REQ, **AUTH},
        )
        return response

    def bucket(self) -> Interval:
        return Interval(self.now // self.task.tp, 1)


def problem(response: httpx.Response, kind: str, tid: str | None, status: int = 400) -> None:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/problem+json"
    doc = response.json()
    assert doc["type"] == URN + kind
    if tid is not None:
        assert doc["taskid"] == tid


@pytest.fixture
def fx(db_factory: DbFactory, clock: TestClock) -> Iterator[Fx]:
    task = c19.make_task(COUNT, min_batch_size=1)
    yield Fx(make_env(db_factory, clock, task.params), task)


@pytest.fixture
def fx_interval(db_factory: DbFactory, clock: TestClock) -> Iterator[Fx]:
    """A task whose task_interval ended two buckets ago: [now - 10, now - 2) in units."""
    units = clock.now() // 3600
    task = c19.make_task(COUNT, task_interval=Interval(units - 10, 8))
    yield Fx(make_env(db_factory, clock, task.params), task)


@pytest.fixture
def fx_selected(db_factory: DbFactory, clock: TestClock) -> Iterator[Fx]:
    task = c19.make_task(COUNT, query_type="fixed_size", min_batch_size=1)
    yield Fx(make_env(db_factory, clock, task.params), task)


# --- Leader @upload ------------------------------------------------------------------------


def test_upload_whole_request_failures(fx: Fx) -> None:
    leader = fx.env.leader
    unknown = secrets.token_bytes(32)
    response = leader.post(
        f"/tasks/{b64url_encode(unknown)}/reports",
        content=fx.report().encode(),
        headers={"Content-Type": c19.UPLOAD_REQ},
    )
    problem(response, "unrecognizedTask", b64url_encode(unknown))
    # A partial trailing report, and an empty UploadRequest (digest §16 item 11).
    problem(fx.upload_raw(fx.report().encode()[:-1]), "invalidMessage", fx.tid)
    problem(fx.upload_raw(b""), "invalidMessage", fx.tid)
    response = leader.post(
        f"/tasks/{fx.tid}/reports",
        content=fx.report().encode(),
        headers={"Content-Type": "application/dap-report"},
    )
    problem(response, "invalidMessage", fx.tid, 415)
    # Parameters are read leniently (digest §4).
    response = leader.post(
        f"/tasks/{fx.tid}/reports",
        content=fx.report().encode(),
        headers={"Content-Type": 'application/ppm-dap; version=19; message="upload-req"'},
    )
    assert response.status_code == 200 and response.content == b""


def test_upload_per_report_errors_in_request_order(fx: Fx) -> None:
    good = [fx.report() for _ in range(3)]
    unknown_config = HpkeConfig(
        fx.lc.id ^ 0xFF, fx.lc.kem_id, fx.lc.kdf_id, fx.lc.aead_id, fx.lc.public_key
    )
    bad_config = c19.make_report(fx.task, unknown_config, fx.hc, 1, fx.now)
    ct = bad_config.leader_encrypted_input_share
    undecryptable = fx.report()
    tampered = HpkeCiphertext(
        undecryptable.leader_encrypted_input_share.config_id,
        undecryptable.leader_encrypted_input_share.enc,
        bytes([undecryptable.leader_encrypted_input_share.payload[0] ^ 1])
        + undecryptable.leader_encrypted_input_share.payload[1:],
    )
    undecryptable = Report(
        undecryptable.report_metadata,
        undecryptable.public_share,
        tampered,
        undecryptable.helper_encrypted_input_share,
    )
    too_early = fx.report(fx.now + 3 * 3600)
    ext = Extension(0x1234, b"x")
    public_unknown = fx.report(public_extensions=(ext,))
    # In the leader's share only: a helper share with it has a size no report of the task
    # can have, refused before it is stored (invalid_message).
    private_unknown = fx.report(extensions=(ext,), helper_extensions=())
    both_lists = fx.report(
        public_extensions=(Extension(SAGG_BINDING_EXT, b""),),
        extensions=(Extension(SAGG_BINDING_EXT, b""),),
        helper_extensions=(),
    )
    unordered = fx.report(
        extensions=(Extension(SAGG_BINDING_EXT, b""), Extension(SAGG_TOKEN_EXT, b"")),
        helper_extensions=(),
    )
    oversized_helper = fx.report(helper_extensions=(ext,))
    batch = [
        good[0],
        bad_config,
        undecryptable,
        good[1],
        too_early,
        public_unknown,
        private_unknown,
        both_lists,
        unordered,
        oversized_helper,
        good[2],
        good[0],
    ]
    assert ct.config_id != fx.lc.id
    assert fx.errors(*batch) == [
        (bad_config.report_metadata.report_id, HPKE_UNKNOWN_CONFIG_ID),
        (undecryptable.report_metadata.report_id, HPKE_DECRYPT_ERROR),
        (too_early.report_metadata.report_id, REPORT_TOO_EARLY),
        (public_unknown.report_metadata.report_id, UNSUPPORTED_EXTENSION),
        (private_unknown.report_metadata.report_id, UNSUPPORTED_EXTENSION),
        (both_lists.report_metadata.report_id, INVALID_MESSAGE),
        (unordered.report_metadata.report_id, INVALID_MESSAGE),
        (oversized_helper.report_metadata.report_id, INVALID_MESSAGE),
        # The same id twice in one request (dap-ts flags it too).
        (good[0].report_metadata.report_id, REPORT_REPLAYED),
    ]
    # Uploaded before: replayed.
    assert fx.errors(good[1]) == [(good[1].report_metadata.report_id, REPORT_REPLAYED)]


def test_upload_outside_task_interval_is_dropped(fx_interval: Fx) -> None:
    fx = fx_interval
    units = fx.now // 3600
    inside = fx.report((units - 5) * 3600)
    after_end = fx.report(fx.now)
    before_start = fx.report((units - 11) * 3600)
    assert fx.errors(inside, after_end, before_start) == [
        (after_end.report_metadata.report_id, REPORT_DROPPED),
        (before_start.report_metadata.report_id, REPORT_DROPPED),
    ]


def test_task_interval_bounds_are_its_first_and_last_units(fx_interval: Fx) -> None:
    """[start, end) in time_precision units (DAP-19 §4.2): the first and the last unit are in,
    the units either side are out."""
    fx = fx_interval
    units = fx.now // 3600
    first, last = fx.report((units - 10) * 3600), fx.report((units - 3) * 3600)
    before, after = fx.report((units - 11) * 3600), fx.report((units - 2) * 3600)
    assert fx.errors(first, last, before, after) == [
        (before.report_metadata.report_id, REPORT_DROPPED),
        (after.report_metadata.report_id, REPORT_DROPPED),
    ]


def test_upload_into_collected_bucket_is_batch_collected(fx: Fx) -> None:
    """Ambiguity 9: batch_collected, not the text's optional report_replayed, so a client can
    tell a report stored by its earlier attempt from one too late for its batch."""
    assert fx.errors(fx.report()) == []
    request = CollectionJobReq(Query.time_interval(fx.bucket()), b"")
    created = fx.collect_req(request)
    assert created.status_code == 201
    for _ in range(10):
        fx.env.drive()
        if fx.env.leader.get(created.headers["location"], headers=collector_auth()).content:
            break
        fx.env.advance(1)
    late = fx.report()
    assert fx.errors(late) == [(late.report_metadata.report_id, BATCH_COLLECTED)]


# --- Helper @aggregation-job init ------------------------------------------------------------


def test_unknown_task_everywhere(fx: Fx) -> None:
    """unrecognizedTask at every DAP-19 creation endpoint, with the task id (digest §9)."""
    other = b64url_encode(secrets.token_bytes(32))
    init = AggregationJobInitReq(0, b"", (), (fx.vinit(),)).encode()
    for client, path, media, body in (
        (fx.env.helper, "aggregation_jobs", c19.INIT_REQ, init),
        (fx.env.helper, "aggregate_shares", c19.AGG_SHARE_REQ, b""),
        (fx.env.leader, "collection_jobs", c19.COLLECTION_JOB_REQ, b""),
    ):
        response = client.post(
            f"/tasks/{other}/{path}", content=body, headers={"Content-Type": media, **AUTH}
        )
        problem(response, "unrecognizedTask", other)
    # A known task, the wrong media type: 415 invalidMessage.
    response = fx.env.helper.post(
        f"/tasks/{fx.tid}/aggregation_jobs",
        content=init,
        headers={"Content-Type": "application/dap-aggregation-job-init-req", **AUTH},
    )
    problem(response, "invalidMessage", fx.tid, 415)


def test_helper_init_whole_job_failures(fx: Fx, fx_selected: Fx) -> None:
    tid = fx.tid
    v = fx.vinit()
    problem(fx.init(body=b"\x00\x00\x00\x00\x00\x00\x00"), "invalidMessage", tid)
    problem(fx.init(body=b"\x00\x00\x00\x00\x00\x00\x00" + v.encode()[:-1]), "invalidMessage", tid)
    twice = b"\x00\x00\x00\x00\x00\x00\x00" + v.encode() + v.encode()
    problem(fx.init(body=twice), "invalidMessage", tid)
    problem(fx.init(v, agg_param=b"\x01"), "invalidAggregationParameter", tid)
    unknown_ext = AggregationJobExtension(0x0002, b"")
    problem(fx.init(v, extensions=(unknown_ext,)), "unsupportedExtension", tid)
    batch_ext = AggregationJobExtension.leader_selected_batch_id(BatchId.random())
    # Out of order: encoded by hand (the struct refuses to encode it).
    unordered = (
        b"\x00"
        + b"\x00\x00\x00\x00"
        + (len(unknown_ext.encode()) + len(batch_ext.encode())).to_bytes(2, "big")
        + unknown_ext.encode()
        + batch_ext.encode()
        + v.encode()
    )
    problem(fx.init(body=unordered), "invalidMessage", tid)
    # A batch id in a time-interval task (digest §16 item 10); none in a leader-selected one.
    problem(fx.init(v, extensions=(batch_ext,)), "invalidMessage", tid)
    problem(fx_selected.init(fx_selected.vinit()), "invalidMessage", fx_selected.tid)
    wrong_len = b"\x00\x00\x00\x00\x00\x00\x08\x00\x01\x00\x04abcd" + fx_selected.vinit().encode()
    problem(fx_selected.init(body=wrong_len), "invalidMessage", fx_selected.tid)
    response = fx.env.helper.post(
        f"/tasks/{tid}/aggregation_jobs",
        content=AggregationJobInitReq(0, b"", (), (v,)).encode(),
        headers={"Content-Type": c19.INIT_REQ},
    )
    # No DAP problem type for authentication any more (digest §2): a plain 403.
    assert response.status_code == 403
    assert response.json()["type"] == "about:blank"


def test_helper_init_per_report_errors(fx: Fx) -> None:
    hc = fx.hc
    ok = fx.vinit()
    unknown_config = HpkeConfig(hc.id ^ 0xFF, hc.kem_id, hc.kdf_id, hc.aead_id, hc.public_key)
    bad_config = c19.verify_init(fx.task, unknown_config, 1, fx.now)
    undecryptable = fx.vinit()
    ct = undecryptable.report_share.encrypted_input_share
    undecryptable = VerifyInit(
        ReportShare(
            undecryptable.report_share.report_metadata,
            undecryptable.report_share.public_share,
            HpkeCiphertext(ct.config_id, ct.enc, bytes([ct.payload[0] ^ 1]) + ct.payload[1:]),
        ),
        undecryptable.payload,
    )
    too_early = fx.vinit(fx.now + 3 * 3600)
    ext = Extension(0x1234, b"x")
    unknown_ext = fx.vinit(extensions=(ext,))
    public_ext = fx.vinit(public_extensions=(ext,))
    both = fx.vinit(
        public_extensions=(Extension(SAGG_BINDING_EXT, b""),),
        extensions=(Extension(SAGG_BINDING_EXT, b""),),
    )
    # The leader's verifier share altered: the proof fails.
    forged = fx.vinit()
    payload = bytearray(forged.payload)
    payload[-1] ^= 1
    forged = VerifyInit(forged.report_share, bytes(payload))
    # An input share of the wrong length does not decode per the VDAF.
    short = fx.vinit()
    meta = short.report_share.report_metadata
    sealed = c19.seal(fx.task, hc, c19.HELPER, meta, short.report_share.public_share, b"\x00" * 5)
    short = VerifyInit(ReportShare(meta, short.report_share.public_share, sealed), short.payload)
    inits = [ok, bad_config, undecryptable, too_early, unknown_ext, public_ext, both, forged, short]
    response = fx.init(*inits)
    assert response.headers["location"].startswith(f"/tasks/{fx.tid}/aggregation_jobs/")
    verdicts = fx.verdicts(response)
    assert verdicts[0] == (CONTINUE, None)
    assert verdicts[1:] == [
        (REJECT, HPKE_UNKNOWN_CONFIG_ID),
        (REJECT, HPKE_DECRYPT_ERROR),
        (REJECT, REPORT_TOO_EARLY),
        (REJECT, UNSUPPORTED_EXTENSION),
        (REJECT, UNSUPPORTED_EXTENSION),
        (REJECT, INVALID_MESSAGE),
        (REJECT, VDAF_VERIFY_ERROR),
        (REJECT, INVALID_MESSAGE),
    ]
    # Prio3 in one round trip: continue with finish(verifier message) (digest §6.8).
    resp = AggregationJobResp.decode(response.content).verify_resps[0]
    assert resp.payload == bytes.fromhex("0200000000")

    # Idempotent creation: the identical POST gets the same Location and response.
    again = fx.init(*inits)
    assert again.headers["location"] == response.headers["location"]
    assert again.content == response.content
    # GET of the job answers its response (digest §4 #4).
    got = fx.env.helper.get(response.headers["location"], headers=AUTH)
    assert got.status_code == 200 and got.content == response.content

    # The same report in another job: replayed at commit.
    replay = fx.init(ok, fx.vinit())
    assert fx.verdicts(replay)[0] == (REJECT, REPORT_REPLAYED)


def test_helper_init_outside_task_interval(fx_interval: Fx) -> None:
    fx = fx_interval
    units = fx.now // 3600
    response = fx.init(fx.vinit((units - 5) * 3600), fx.vinit(), fx.vinit((units - 11) * 3600))
    assert fx.verdicts(response) == [
        (CONTINUE, None),
        (REJECT, REPORT_DROPPED),
        (REJECT, REPORT_DROPPED),
    ]


def test_helper_unknown_verification_key_id(fx: Fx) -> None:
    v1, v2 = fx.vinit(), fx.vinit()
    response = fx.init(v1, v2, key_id=7)
    assert fx.verdicts(response) == [(REJECT, UNKNOWN_VERIFICATION_KEY_ID)] * 2
    # Nothing was recorded: the leader may offer them again under the right key (item 8).
    assert fx.verdicts(fx.init(v1, v2)) == [(CONTINUE, None)] * 2


def test_helper_continue_checks(fx: Fx) -> None:
    v = fx.vinit()
    created = fx.init(v)
    location = created.headers["location"]
    rid = v.report_share.report_metadata.report_id
    headers = {"Content-Type": "application/ppm-dap;message=aggregation-job-continue-req", **AUTH}

    def cont(url: str, body: bytes) -> httpx.Response:
        response: httpx.Response = fx.env.helper.post(url, content=body, headers=headers)
        return response

    body1 = AggregationJobContinueReq(1, (VerifyContinue(rid, b"\x01"),)).encode()
    unknown = f"/tasks/{fx.tid}/aggregation_jobs/{ReportId.random().to_b64url()}"
    problem(cont(unknown, body1), "unrecognizedAggregationJob", fx.tid)
    step0 = b"\x00\x00" + VerifyContinue(rid, b"\x01").encode()
    problem(cont(location, step0), "invalidMessage", fx.tid)
    twice = b"\x00\x01" + 2 * VerifyContinue(rid, b"\x01").encode()
    problem(cont(location, twice), "invalidMessage", fx.tid)
    other_task = f"/tasks/{b64url_encode(secrets.token_bytes(32))}/aggregation_jobs/x"
    problem(cont(other_task, body1), "unrecognizedTask", None)
    body2 = AggregationJobContinueReq(2, (VerifyContinue(rid, b"\x01"),)).encode()
    problem(cont(location, body2), "stepMismatch", fx.tid)
    # Prio3 finished every report at init: none has state to continue.
    problem(cont(location, body1), "invalidMessage", fx.tid)


def test_helper_batch_collected_and_aggregate_share_checks(fx: Fx) -> None:
    v = fx.vinit()
    assert fx.verdicts(fx.init(v)) == [(CONTINUE, None)]
    rid = v.report_share.report_metadata.report_id
    bucket = fx.bucket()
    query = CollectionJobReq(Query.time_interval(bucket), b"")
    selector = BatchSelector.time_interval(bucket)

    def req(
        count: int = 1, sel: BatchSelector = selector, q: CollectionJobReq = query
    ) -> AggregateShareReq:
        return AggregateShareReq(q, sel, count, c19.checksum([rid]) if count == 1 else bytes(32))

    problem(fx.share_req(b"\x01\x00"), "invalidMessage", fx.tid)
    mode = BatchSelector.leader_selected(BatchId.random())
    problem(fx.share_req(req(sel=mode)), "invalidMessage", fx.tid)
    zero = BatchSelector.time_interval(Interval(bucket.start, 0))
    problem(fx.share_req(req(sel=zero)), "batchInvalid", fx.tid)
    outside = BatchSelector.time_interval(Interval(bucket.start + 1, 1))
    problem(fx.share_req(req(sel=outside)), "invalidMessage", fx.tid)
    ext = CollectionJobReq(query.query, b"", (CollectionJobExtension(5, b""),))
    problem(fx.share_req(req(q=ext)), "unsupportedExtension", fx.tid)
    unordered = CollectionJobReq(
        query.query, b"", (CollectionJobExtension(6, b""), CollectionJobExtension(5, b""))
    )
    problem(fx.share_req(req(q=unordered)), "invalidExtension", fx.tid)
    problem(fx.share_req(req(count=2)), "batchMismatch", fx.tid)
    empty = BatchSelector.time_interval(Interval(bucket.start - 5, 1))
    wide = CollectionJobReq(Query.time_interval(Interval(bucket.start - 5, 1)), b"")
    problem(fx.share_req(req(sel=empty, q=wide)), "invalidBatchSize", fx.tid)

    first = fx.share_req(req())
    assert first.status_code == 200, first.text
    assert first.headers["location"].startswith(f"/tasks/{fx.tid}/aggregate_shares/")
    # The AAD binds the collector's request bytes (digest §7.4): the collector can open it.
    share = HpkeCiphertext.decode(first.content)
    opened = c19.open_share(fx.task, c19.HELPER, query.encode(), share)
    assert len(opened) == 8
    # An identical retry gets the stored answer, not batchOverlap (digest §7.3).
    assert fx.share_req(req()).content == first.content
    # GET and DELETE of its Location (digest §4 #11, #12); deleting keeps the batch collected.
    resource = first.headers["location"]
    assert fx.env.helper.get(resource, headers=AUTH).content == first.content
    assert fx.env.helper.delete(resource, headers=AUTH).status_code == 200
    assert fx.env.helper.get(resource, headers=AUTH).status_code == 404
    unknown = f"/tasks/{fx.tid}/aggregate_shares/{ReportId.random().to_b64url()}"
    assert fx.env.helper.get(unknown, headers=AUTH).status_code == 404
    # Another selector over the collected bucket overlaps.
    overlap = CollectionJobReq(Query.time_interval(Interval(bucket.start, 2)), b"")
    sel2 = BatchSelector.time_interval(Interval(bucket.start, 2))
    problem(fx.share_req(req(sel=sel2, q=overlap)), "batchOverlap", fx.tid)
    # A later report into the collected bucket: batch_collected at commit.
    assert fx.verdicts(fx.init(fx.vinit())) == [(REJECT, BATCH_COLLECTED)]


# --- Leader @collection job -----------------------------------------------------------------


def test_collection_job_checks(fx: Fx) -> None:
    tid = fx.tid
    bucket = fx.bucket()
    problem(fx.collect_req(b"\x01\x00"), "invalidMessage", tid)
    problem(fx.collect_req(CollectionJobReq(Query.leader_selected(), b"")), "invalidMessage", tid)
    q = Query.time_interval(bucket)
    problem(fx.collect_req(CollectionJobReq(q, b"\x01")), "invalidAggregationParameter", tid)
    zero = CollectionJobReq(Query.time_interval(Interval(bucket.start, 0)), b"")
    problem(fx.collect_req(zero), "batchInvalid", tid)
    ext = CollectionJobReq(q, b"", (CollectionJobExtension(5, b""),))
    problem(fx.collect_req(ext), "unsupportedExtension", tid)
    unordered = CollectionJobReq(
        q, b"", (CollectionJobExtension(6, b""), CollectionJobExtension(5, b""))
    )
    problem(fx.collect_req(unordered), "invalidExtension", tid)
    response = fx.env.leader.post(
        f"/tasks/{tid}/collection_jobs",
        content=CollectionJobReq(q, b"").encode(),
        headers={"Content-Type": c19.COLLECTION_JOB_REQ},
    )
    assert response.status_code == 403

    created = fx.collect_req(CollectionJobReq(q, b""))
    assert created.status_code == 201
    # Idempotent: the identical request names the same job.
    assert (
        fx.collect_req(CollectionJobReq(q, b"")).headers["location"] == created.headers["location"]
    )
    wider = CollectionJobReq(Query.time_interval(Interval(bucket.start, 2)), b"")
    problem(fx.collect_req(wider), "batchOverlap", tid)
    # DELETE, then the job is gone (never an empty 2xx, which would mean pending).
    location = created.headers["location"]
    assert fx.env.leader.delete(location, headers=collector_auth()).status_code == 204
    gone = fx.env.leader.get(location, headers=collector_auth())
    assert gone.status_code == 404


def test_hpke_config_media_types(fx: Fx) -> None:
    old = fx.env.leader.get("/hpke_config")
    assert old.headers["content-type"] == "application/dap-hpke-config-list"
    new = fx.env.leader.get("/hpke_config", headers={"Accept": "application/ppm-dap"})
    assert new.headers["content-type"] == "application/ppm-dap;message=hpke-config-list"
    assert new.content == old.content


def test_content_derived_ids(fx: Fx) -> None:
    """Aggregation-job ids are SHA-256(task_id || request)[0..16] (digest §4.3)."""
    v = fx.vinit()
    body = AggregationJobInitReq(0, b"", (), (v,)).encode()
    response = fx.init(body=body)
    expected = b64url_encode(hashlib.sha256(fx.task.params.task_id.value + body).digest()[:16])
    assert response.headers["location"].endswith("/" + expected)


def test_undecidable_reports_are_dropped(db_factory: DbFactory, clock: TestClock) -> None:
    """A report older than the task's report_expiry_age may have left the replay set, so its
    validity cannot be decided: report_dropped at upload and at the helper (digest §6.5 #8)."""
    task = c19.make_task(COUNT, definition={"report_expiry_age": 7200})
    fx = Fx(make_env(db_factory, clock, task.params), task)
    old = fx.report(fx.now - 3 * 3600)
    assert fx.errors(old, fx.report()) == [(old.report_metadata.report_id, REPORT_DROPPED)]
    response = fx.init(fx.vinit(fx.now - 3 * 3600), fx.vinit())
    assert fx.verdicts(response) == [(REJECT, REPORT_DROPPED), (CONTINUE, None)]


def test_upload_body_cap(db_factory: DbFactory, clock: TestClock) -> None:
    """An UploadRequest longer than `upload_max_reports` of the task's largest report is
    refused with 413 before it is read; one at the cap is taken."""
    task = c19.make_task(COUNT)
    fx = Fx(make_env(db_factory, clock, task.params, upload_max_reports=2), task)
    assert fx.errors(fx.report(), fx.report()) == []
    response = fx.upload(fx.report(), fx.report(), fx.report())
    assert response.status_code == 413
    assert response.json()["taskid"] == fx.tid


def test_aggregate_share_agg_param_after_collection_is_invalid_message(fx: Fx) -> None:
    """An AggregateShareReq whose agg_param is not the (empty) one aggregation used is
    `invalidMessage` (digest §9, "agg_param ≠ eager one"), also after the batch was collected
    once: DAP-19 has no `batchQueriedTooManyTimes` (digest §2), so a DAP-19 task never answers
    with that DAP-09 URN."""
    v = fx.vinit()
    assert fx.verdicts(fx.init(v)) == [(CONTINUE, None)]
    rid = v.report_share.report_metadata.report_id
    bucket = fx.bucket()
    selector = BatchSelector.time_interval(bucket)
    query = CollectionJobReq(Query.time_interval(bucket), b"")
    first = fx.share_req(AggregateShareReq(query, selector, 1, c19.checksum([rid])))
    assert first.status_code == 200, first.text
    other = CollectionJobReq(Query.time_interval(bucket), b"\x01")
    problem(
        fx.share_req(AggregateShareReq(other, selector, 1, c19.checksum([rid]))),
        "invalidMessage",
        fx.tid,
    )


def test_upload_max_reports_counts_reports(db_factory: DbFactory, clock: TestClock) -> None:
    """`upload_max_reports` bounds the reports of one UploadRequest, not only its bytes:
    small (here undecryptable) reports that fit under the byte cap but outnumber it refuse
    the request (413, with the task id) before any is validated or stored."""
    task = c19.make_task(COUNT)
    fx = Fx(make_env(db_factory, clock, task.params, upload_max_reports=2), task)

    def tiny() -> Report:
        good = fx.report()
        stub = HpkeCiphertext(fx.lc.id, good.leader_encrypted_input_share.enc, b"\x00")
        return Report(good.report_metadata, good.public_share, stub, stub)

    reports = [tiny() for _ in range(3)]
    body = b"".join(r.encode() for r in reports)
    assert len(body) <= 2 * len(fx.report().encode())  # under the byte cap
    response = fx.upload_raw(body)
    problem(response, "invalidMessage", fx.tid, status=413)
    # Nothing was looked at: the same reports within the count get their per-report errors.
    assert len(fx.errors(*reports[:2])) == 2
