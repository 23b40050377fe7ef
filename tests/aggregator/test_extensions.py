"""sagg's report extensions at both aggregators: recipe binding, Privacy Pass tokens, counters.

Each aggregator checks the extensions of its *own* input share against its *own* task
definition, so the helper catches what a malicious leader lets through: a lowered min batch
size, a replayed token.
"""

from __future__ import annotations

import dataclasses
import hashlib
import secrets
import threading
from typing import Any

import httpx
import pytest
from pydantic import ValidationError

from services.aggregator.answer import Answer
from services.aggregator.app import create_app
from services.aggregator.datastore import Datastore, NewReport, TokenSpend
from services.aggregator.service import Aggregator
from services.aggregator.tokens import IssuerKeyCache, IssuerUnavailableError, max_age
from services.common.clock import TestClock
from services.common.db import Database
from services.common.problems import DapProblemError
from shared.b64url import b64url_encode
from shared.dap.extensions import (
    EXTENSION_PRIVACY_PASS_TOKEN,
    EXTENSION_RECIPE_BINDING,
    RecipeBinding,
    encode_extensions,
)
from shared.dap.ids import AggregationJobId, TaskId
from shared.dap.messages import (
    MEDIA_AGGREGATION_JOB_INIT_REQ,
    AggregationJobInitReq,
    AggregationJobResp,
    Extension,
    Interval,
    PartialBatchSelector,
    PrepareError,
    PrepareInit,
    PrepareRespState,
    Query,
    Role,
)
from shared.dap.task import TaskDefinition
from shared.privacypass.directory import ISSUER_DIRECTORY_PATH, DirectoryKey, IssuerDirectory
from shared.privacypass.issuance import IssuerKey
from shared.privacypass.messages import Token
from tests.aggregator import helpers
from tests.aggregator.conftest import DbFactory
from tests.aggregator.env import Env, aggregator_auth, make_env
from tests.aggregator.helpers import problem_type, task_stats
from tests.aggregator.issuer import ISSUER_URL, Issuer
from tests.exposition import parse, value

DIGEST = hashlib.sha256(b"a canonical recipe").digest()


def _binding(min_batch_size: int, digest: bytes = DIGEST) -> tuple[Extension, ...]:
    return encode_extensions(binding=RecipeBinding(digest, min_batch_size))


def _interval(env: Env) -> Query:
    start = env.clock.now() - env.clock.now() % env.params.time_precision
    return Query.time_interval(Interval(start, env.params.time_precision))


# --- recipe binding ------------------------------------------------------------------------


def test_recipe_binding_checked_at_upload(db_factory: DbFactory, clock: TestClock) -> None:
    params = helpers.TaskParams(min_batch_size=2, recipe_digest=DIGEST)
    env = make_env(db_factory, clock, params)
    good = [env.report(1, extensions=_binding(2)) for _ in range(2)]
    for report in good:
        assert env.upload(report).status_code == 201
    assert problem_type(env.upload(env.report(1))) == "reportRejected"
    assert problem_type(env.upload(env.report(1, extensions=_binding(1)))) == "reportRejected"
    other = hashlib.sha256(b"another recipe").digest()
    assert (
        problem_type(env.upload(env.report(1, extensions=_binding(2, other)))) == "reportRejected"
    )
    unknown = (*_binding(2), Extension(0xFE7F, b""))
    assert problem_type(env.upload(env.report(1, extensions=unknown))) == "invalidMessage"
    twice = (*_binding(2), *_binding(2))
    assert problem_type(env.upload(env.report(1, extensions=twice))) == "invalidMessage"
    malformed = (Extension(EXTENSION_RECIPE_BINDING, b"short"),)
    assert problem_type(env.upload(env.report(1, extensions=malformed))) == "invalidMessage"

    collection = env.collect(_interval(env))
    assert collection.report_count == 2
    upload = task_stats(env.leader, env.tid)["rejections"]["upload"]
    # The unknown and the repeated extension make reports longer than any of the task: 413
    # before the body is read, so they never reach the store's counts.
    assert upload == {"binding_missing": 1, "binding_mismatch": 2, "invalid_extension": 1}
    helper = task_stats(env.helper, env.tid)
    assert helper["rejections"]["aggregation"] == {}
    assert helper["report_aggregations"] == {"finished": 2}


def test_helper_refuses_a_lowered_min_batch_size(db_factory: DbFactory, clock: TestClock) -> None:
    """A leader provisioned with B=1 where the helper has B=3 (the recipe's): reports the leader
    takes (bound to its B) are refused by the helper, so no batch below 3 can come out."""
    params = helpers.TaskParams(
        min_batch_size=3,
        recipe_digest=DIGEST,
        overrides={"leader": {"min_batch_size": 1}},
    )
    env = make_env(db_factory, clock, params)
    for _ in range(3):
        assert env.upload(env.report(1, extensions=_binding(1))).status_code == 201
    # A leader that skips its own check changes nothing: the helper reads its own share.
    env.drive()
    helper = task_stats(env.helper, env.tid)
    assert helper["rejections"]["aggregation"] == {"binding_mismatch": 3}
    assert helper["report_aggregations"] == {"failed": 3}
    leader = task_stats(env.leader, env.tid)
    assert leader["rejections"]["aggregation"] == {"invalid_message": 3}
    assert leader["open_batches"] == []


def test_extensions_at_helper_init(db_factory: DbFactory, clock: TestClock) -> None:
    """Unknown, repeated and mismatched extensions are invalid_message at the helper."""
    params = helpers.TaskParams(min_batch_size=2, recipe_digest=DIGEST)
    env = make_env(db_factory, clock, params)
    now = clock.now()
    cases: list[tuple[tuple[Extension, ...], PrepareError | None]] = [
        (_binding(2), None),
        ((), PrepareError.INVALID_MESSAGE),
        (_binding(3), PrepareError.INVALID_MESSAGE),
        ((*_binding(2), Extension(0x0001, b"")), PrepareError.INVALID_MESSAGE),
        ((*_binding(2), *_binding(2)), PrepareError.INVALID_MESSAGE),
    ]
    inits = [
        helpers.prepare_init(params, env.helper_config, 1, now, extensions=ext) for ext, _ in cases
    ]
    resp = _helper_job(env, inits)
    assert [_error(r) for r in resp.prepare_resps] == [e for _, e in cases]
    assert task_stats(env.helper, env.tid)["rejections"]["aggregation"] == {
        "binding_missing": 1,
        "binding_mismatch": 1,
        "invalid_extension": 2,
    }


def _job_request(inits: list[PrepareInit]) -> tuple[str, bytes]:
    request = AggregationJobInitReq(b"", PartialBatchSelector.time_interval(), tuple(inits))
    return AggregationJobId.random().to_b64url(), request.encode()


def _send_job(env: Env, job: str, body: bytes) -> AggregationJobResp:
    r = env.helper.put(
        f"/tasks/{env.tid}/aggregation_jobs/{job}",
        content=body,
        headers={"Content-Type": MEDIA_AGGREGATION_JOB_INIT_REQ, **aggregator_auth()},
    )
    assert r.status_code == 201, r.text
    return AggregationJobResp.decode(r.content)


def _helper_job(env: Env, inits: list[PrepareInit]) -> AggregationJobResp:
    return _send_job(env, *_job_request(inits))


def _error(resp: Any) -> PrepareError | None:
    if resp.prepare_resp_state == PrepareRespState.CONTINUE:
        return None
    error: PrepareError = resp.prepare_error
    return error


# --- tokens --------------------------------------------------------------------------------


def _token_env(
    db_factory: DbFactory,
    clock: TestClock,
    issuer: Issuer,
    key_ids: list[str] | None = None,
    **kw: Any,
) -> Env:
    params = helpers.TaskParams(tokens=issuer.policy(key_ids=key_ids), **kw)
    return make_env(db_factory, clock, params, issuer_http=issuer.client)


def _with_token(token: Token) -> tuple[Extension, ...]:
    return encode_extensions(token=token)


def _tokens(issuer: Issuer, env: Env, leader: Token, time: int) -> dict[str, Any]:
    """`env.report` arguments for a report whose leader share carries `leader` and whose
    helper share a fresh helper token: each aggregator redeems only its own."""
    helper = issuer.token(env.params.task_id, time, Role.HELPER)
    return {"extensions": _with_token(leader), "helper_extensions": _with_token(helper)}


def test_tokens_at_upload(db_factory: DbFactory, clock: TestClock, issuer: Issuer) -> None:
    env = _token_env(db_factory, clock, issuer)
    tid, now = env.params.task_id, clock.now()
    token = issuer.token(tid, now, Role.LEADER)
    assert env.upload(env.report(1, **_tokens(issuer, env, token, now))).status_code == 201
    # The same token in a new report: refused, and the refused report id stays unused.
    again = env.report(1, extensions=_with_token(token))
    assert problem_type(env.upload(again)) == "reportRejected"
    assert problem_type(env.upload(env.report(1))) == "reportRejected"
    foreign = issuer.token(TaskId.random(), now, Role.LEADER)
    assert (
        problem_type(env.upload(env.report(1, extensions=_with_token(foreign)))) == "reportRejected"
    )
    other_window = issuer.token(tid, now - 86_400, Role.LEADER)
    rejected = env.upload(env.report(1, extensions=_with_token(other_window)))
    assert problem_type(rejected) == "reportRejected"
    fresh = issuer.token(tid, now, Role.LEADER)
    forged = dataclasses.replace(fresh, authenticator=bytes(len(fresh.authenticator)))
    assert (
        problem_type(env.upload(env.report(1, extensions=_with_token(forged)))) == "reportRejected"
    )
    # An old window's token with a report time in it: valid, but the window is long over.
    old_time = now - 3 * 86_400
    old = issuer.token(tid, old_time, Role.LEADER)
    stale = env.upload(env.report(1, old_time, extensions=_with_token(old)))
    assert problem_type(stale) == "reportRejected"
    malformed = (Extension(EXTENSION_PRIVACY_PASS_TOKEN, b"\x00\x02" + bytes(10)),)
    assert problem_type(env.upload(env.report(1, extensions=malformed))) == "invalidMessage"
    # The token rejected as spent did not burn its report id: with a fresh token it goes in.
    resend = env.report(
        1, report_id=again.report_metadata.report_id, **_tokens(issuer, env, fresh, now)
    )
    assert env.upload(resend).status_code == 201

    assert env.collect(_interval(env)).report_count == 2
    assert task_stats(env.leader, env.tid)["rejections"]["upload"] == {
        "invalid_extension": 1,
        "token_expired": 1,
        "token_invalid": 3,
        "token_missing": 1,
        "token_spent": 1,
    }
    assert task_stats(env.helper, env.tid)["report_aggregations"] == {"finished": 2}


def test_helper_refuses_replayed_tokens(
    db_factory: DbFactory, clock: TestClock, issuer: Issuer
) -> None:
    """A malicious leader replays a spent token under new report ids: in the same job and in a
    later one. The helper's own spent set refuses every replay."""
    env = _token_env(db_factory, clock, issuer)
    now = clock.now()
    token = issuer.token(env.params.task_id, now, Role.HELPER)
    params = env.params

    def init(t: Token | None) -> PrepareInit:
        ext = () if t is None else _with_token(t)
        return helpers.prepare_init(params, env.helper_config, 1, now, extensions=ext)

    first = _helper_job(env, [init(token), init(token), init(None)])
    assert [_error(r) for r in first.prepare_resps] == [
        None,
        PrepareError.INVALID_MESSAGE,
        PrepareError.INVALID_MESSAGE,
    ]
    job, body = _job_request([init(token), init(issuer.token(params.task_id, now, Role.HELPER))])
    second = _send_job(env, job, body)
    assert [_error(r) for r in second.prepare_resps] == [PrepareError.INVALID_MESSAGE, None]
    # The leader retrying a job (after a crash or timeout) sends identical bytes: the stored
    # answer comes back and nothing is spent or counted again.
    assert _send_job(env, job, body) == second
    assert task_stats(env.helper, env.tid)["rejections"]["aggregation"] == {
        "token_missing": 1,
        "token_spent": 2,
    }
    assert task_stats(env.helper, env.tid)["report_aggregations"] == {"failed": 3, "finished": 2}


def test_tokens_under_unpinned_keys_are_refused_by_both_aggregators(
    db_factory: DbFactory, clock: TestClock, issuer: Issuer
) -> None:
    """A malicious issuer signs a device's tokens with a key of its own, valid and listed in
    its directory, to recognise that device's reports. The task pins the recipe's keys only:
    the leader refuses the report at upload and the helper (a leader forwarding it anyway)
    refuses it in aggregation, each counting why; a token under the pinned key goes in."""
    served = issuer.policy()["key_ids"]
    # The recipe's pinned key (its id is all the aggregators see of it).
    pinned = b64url_encode(hashlib.sha256(b"the key the recipe pins").digest())
    assert pinned not in served
    env = _token_env(db_factory, clock, issuer, key_ids=[pinned])
    now = clock.now()
    tagged = issuer.token(env.params.task_id, now, Role.LEADER)
    assert b64url_encode(tagged.token_key_id) in served  # a genuine key of the issuer
    rejected = env.upload(env.report(1, **_tokens(issuer, env, tagged, now)))
    assert problem_type(rejected) == "reportRejected"
    tagged_helper = issuer.token(env.params.task_id, now, Role.HELPER)
    init = helpers.prepare_init(
        env.params, env.helper_config, 1, now, extensions=_with_token(tagged_helper)
    )
    [resp] = _helper_job(env, [init]).prepare_resps
    assert _error(resp) == PrepareError.INVALID_MESSAGE
    assert task_stats(env.leader, env.tid)["rejections"]["upload"] == {"token_key_not_pinned": 1}
    assert task_stats(env.helper, env.tid)["rejections"]["aggregation"] == {
        "token_key_not_pinned": 1
    }
    # The same token is accepted where its key is pinned: only the pin refused it.
    trusting = _token_env(db_factory, clock, issuer)
    token = issuer.token(trusting.params.task_id, now, Role.LEADER)
    accepted = trusting.upload(trusting.report(1, **_tokens(issuer, trusting, token, now)))
    assert accepted.status_code == 201


def test_a_stored_task_of_an_issuer_no_longer_trusted_fetches_nothing(
    db_factory: DbFactory, clock: TestClock, issuer: Issuer
) -> None:
    """The operator drops the issuer from `token_issuers` after a task naming it was stored:
    its reports are refused with a counted reason and its directory is not fetched."""
    env = _token_env(db_factory, clock, issuer)
    token = issuer.token(env.params.task_id, clock.now(), Role.LEADER)
    requests: list[str] = []

    def record(request: httpx.Request) -> httpx.Response:
        requests.append(str(request.url))
        return httpx.Response(503)

    leader_db = env.leader.app.state.settings.database_url  # type: ignore[attr-defined]
    narrowed = create_app(
        helpers.settings(leader_db, token_issuers=[]),
        clock=clock,
        issuer_http=httpx.Client(transport=httpx.MockTransport(record)),
    )
    aggregator: Aggregator = narrowed.state.aggregator
    answers: list[Answer | Exception] = []
    answered = threading.Event()

    def done(answer: Answer | Exception) -> None:
        answers.append(answer)
        answered.set()

    aggregator.upload(env.tid, env.report(1, extensions=_with_token(token)).encode(), done)
    assert answered.wait(10)
    [answer] = answers
    assert isinstance(answer, DapProblemError) and answer.problem.value == "reportRejected"
    assert requests == []
    assert task_stats(env.leader, env.tid)["rejections"]["upload"] == {
        "token_issuer_not_allowed": 1
    }


def test_racing_uploads_spend_a_token_once(
    db_factory: DbFactory, clock: TestClock, issuer: Issuer
) -> None:
    """Two leader processes on one store get reports carrying one token at the same time:
    the store's unique key lets exactly one in."""
    env = _token_env(db_factory, clock, issuer)
    token = issuer.token(env.params.task_id, clock.now(), Role.LEADER)
    # A second process on the leader's store.
    leader_db = env.leader.app.state.settings.database_url  # type: ignore[attr-defined]
    second_app = create_app(helpers.settings(leader_db), clock=clock, issuer_http=issuer.client)
    second: Aggregator = second_app.state.aggregator
    aggs = [env.leader_agg, second]
    bodies = [env.report(1, extensions=_with_token(token)).encode() for _ in range(8)]
    barrier = threading.Barrier(len(bodies))
    outcomes: list[str] = []

    def upload(i: int) -> None:
        answers: list[Answer | Exception] = []
        answered = threading.Event()

        def done(answer: Answer | Exception) -> None:
            answers.append(answer)
            answered.set()

        barrier.wait()
        aggs[i % 2].upload(env.tid, bodies[i], done)
        assert answered.wait(10)
        (answer,) = answers
        if isinstance(answer, DapProblemError):
            outcomes.append(answer.problem.value)
        else:
            assert isinstance(answer, Answer) and answer.status == 201, answer
            outcomes.append("stored")

    threads = [threading.Thread(target=upload, args=(i,)) for i in range(len(bodies))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(outcomes) == ["reportRejected"] * 7 + ["stored"]
    assert env.leader_agg.ds.count_rows("client_reports", env.params.task_id.value) == 1
    assert task_stats(env.leader, env.tid)["rejections"]["upload"] == {"token_spent": 7}


def test_issuer_down_is_a_retry_not_a_rejection(
    db_factory: DbFactory, clock: TestClock, issuer: Issuer
) -> None:
    down = httpx.Client(transport=httpx.MockTransport(lambda _: httpx.Response(503)))
    params = helpers.TaskParams(tokens=issuer.policy())
    env = make_env(db_factory, clock, params, issuer_http=down)
    token = issuer.token(params.task_id, clock.now(), Role.LEADER)
    r = env.upload(env.report(1, extensions=_with_token(token)))
    assert r.status_code == 503
    helper_token = issuer.token(params.task_id, clock.now(), Role.HELPER)
    init = helpers.prepare_init(
        params, env.helper_config, 1, clock.now(), extensions=_with_token(helper_token)
    )
    job = AggregationJobId.random().to_b64url()
    r = env.helper.put(
        f"/tasks/{env.tid}/aggregation_jobs/{job}",
        content=AggregationJobInitReq(b"", PartialBatchSelector.time_interval(), (init,)).encode(),
        headers={"Content-Type": MEDIA_AGGREGATION_JOB_INIT_REQ, **aggregator_auth()},
    )
    assert r.status_code == 503
    assert task_stats(env.leader, env.tid)["rejections"]["upload"] == {}
    assert task_stats(env.helper, env.tid)["report_aggregations"] == {}


# --- the spent set in the store -------------------------------------------------------------


def test_put_report_spends_once(db_url: str) -> None:
    ds = Datastore(Database.open(db_url))
    ds.migrate()
    task = secrets.token_bytes(32)
    assert ds.put_task(task, "leader", {}, b"h" * 32, None, None, 0) == "created"
    spend = TokenSpend(b"k" * 32, b"c" * 32, b"n" * 32)

    def put(report_id: bytes, s: TokenSpend | None = spend) -> str:
        return ds.put_reports([NewReport(task, report_id, 1, b"", b"", b"", None, 1, s)])[0]

    assert put(b"r1" * 8) == "stored"
    # A replayed report id is a replay, whatever its token.
    assert put(b"r1" * 8, dataclasses.replace(spend, nonce=b"m" * 32)) == "replayed"
    assert put(b"r2" * 8) == "token_spent"
    assert ds.count_rows("client_reports", task) == 1
    # Another context (task/window) or key: another token.
    assert put(b"r3" * 8, dataclasses.replace(spend, context=b"d" * 32)) == "stored"
    assert put(b"r4" * 8, dataclasses.replace(spend, token_key_id=b"j" * 32)) == "stored"
    assert ds.count_rows("spent_tokens", task) == 3
    assert ds.delete_task(task)
    assert ds.count_rows("spent_tokens", task) == 0
    assert ds.count_rows("client_reports", task) == 0


# --- the issuer directory cache ---------------------------------------------------------------


class _Directory:
    """A fake issuer serving a directory document that the test edits."""

    def __init__(self, keys: list[IssuerKey], cache_control: str = "max-age=100") -> None:
        self.keys: list[tuple[IssuerKey, int | None]] = [(k, None) for k in keys]
        self.cache_control = cache_control
        self.status = 200
        self.requests = 0

    def fetch(self, url: str) -> httpx.Response:
        assert url == ISSUER_URL.rstrip("/") + ISSUER_DIRECTORY_PATH
        self.requests += 1
        doc = IssuerDirectory(
            "/request", [DirectoryKey(2, k.token_key.spki, nb) for k, nb in self.keys]
        )
        return httpx.Response(
            self.status, content=doc.encode(), headers={"Cache-Control": self.cache_control}
        )


def test_directory_cache(issuer_keys: Any) -> None:
    k1, k2, k3 = issuer_keys(), issuer_keys(), issuer_keys()
    clock = TestClock(1_000_000)
    fake = _Directory([k1])
    cache = IssuerKeyCache(
        fake.fetch, clock, allowed=(ISSUER_URL,), min_refetch_s=30, not_before_skew_s=10
    )

    def ids(key_id: bytes | None = None) -> set[bytes]:
        return {k.token_key_id for k in cache.keys(ISSUER_URL, key_id)}

    assert ids() == {k1.token_key_id} and fake.requests == 1
    fake.keys = [(k2, None)]  # k1 expired at the issuer, k2 took over
    assert ids() == {k1.token_key_id} and fake.requests == 1  # cached for max-age
    # An unknown key id refetches, once the last fetch is min_refetch_s old...
    assert ids(k2.token_key_id) == {k1.token_key_id} and fake.requests == 1
    clock.advance(30)
    assert ids(k2.token_key_id) == {k2.token_key_id} and fake.requests == 2
    # ...but at most once per min_refetch_s, however many forged ids arrive.
    for _ in range(5):
        assert ids(secrets.token_bytes(32)) == {k2.token_key_id}
    assert fake.requests == 2
    clock.advance(30)
    ids(secrets.token_bytes(32))
    assert fake.requests == 3
    # Once max-age has passed the directory is fetched again: an expired key stops verifying.
    fake.keys = [(k3, clock.now() + 1000), (k2, None)]
    clock.advance(71)
    assert ids() == {k2.token_key_id} and fake.requests == 3
    clock.advance(30)
    assert ids() == {k2.token_key_id}  # k3 is not valid before its not-before (+ skew)
    clock.advance(1000)
    fake.keys = [(k3, clock.now() - 1000)]
    clock.advance(100)
    assert ids() == {k3.token_key_id}
    # The issuer down and the cache stale: no keys rather than stale ones.
    fake.status = 503
    clock.advance(100)
    with pytest.raises(IssuerUnavailableError):
        cache.keys(ISSUER_URL)


def test_max_age_parsing() -> None:
    assert max_age("public, max-age=60", 300, 86_400) == 60
    assert max_age("max-age=999999", 300, 86_400) == 86_400
    assert max_age(None, 300, 86_400) == 300
    assert max_age("no-store", 300, 86_400) == 0
    assert max_age("s-maxage=5", 300, 86_400) == 300


# --- stats and metrics ---------------------------------------------------------------------


def test_stats_and_metrics(db_factory: DbFactory, clock: TestClock) -> None:
    params = helpers.TaskParams(min_batch_size=3, recipe_digest=DIGEST)
    env = make_env(db_factory, clock, params)
    assert env.leader.get(f"/internal/tasks/{env.tid}/stats").status_code == 401
    wrong = {"Authorization": "Bearer nope"}
    assert env.leader.get(f"/internal/tasks/{env.tid}/stats", headers=wrong).status_code == 403
    assert env.leader.get("/metrics").status_code == 401
    unknown = TaskId.random().to_b64url()
    r = env.leader.get(f"/internal/tasks/{unknown}/stats", headers=helpers.admin_headers())
    assert r.status_code == 404
    for _ in range(2):
        assert env.upload(env.report(1, extensions=_binding(3))).status_code == 201
    env.upload(env.report(1))
    env.drive()
    stats = task_stats(env.leader, env.tid)
    assert stats["reports"] == {"received": 2, "waiting": 0}
    assert stats["aggregation_jobs"] == {"finished": 1}
    assert [b["reports"] for b in stats["open_batches"]] == [2]

    r = env.leader.get("/metrics", headers=helpers.admin_headers())
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/plain; version=0.0.4")
    assert "# TYPE sagg_reports_rejected_total counter" in r.text.splitlines()
    samples = parse(r.text)  # every line parses as a comment or a declared sample
    task = {"task": env.tid, "role": "leader"}
    binding_missing = {"stage": "upload", "reason": "binding_missing"}
    assert value(samples, "sagg_reports_received_total", **task) == 2
    assert value(samples, "sagg_reports_rejected_total", **task, **binding_missing) == 1
    assert value(samples, "sagg_aggregation_jobs", **task, state="finished") == 1
    assert value(samples, "sagg_task_min_batch_size", **task) == 3
    # Progress towards B = 3: two of the three reports a collection needs.
    batch = stats["open_batches"][0]["batch"]
    assert value(samples, "sagg_batch_reports", **task, batch=batch) == 2
    assert value(samples, "sagg_batch_progress_ratio", **task, batch=batch) == pytest.approx(2 / 3)


@pytest.mark.parametrize(("time_precision", "window"), [(7 * 86_400, 86_400), (5_400, 3_600)])
def test_a_token_window_across_time_precision_buckets_is_refused(
    issuer: Issuer, time_precision: int, window: int
) -> None:
    """A report at `t` carries tokens of t's window, the aggregators check the window of t
    truncated to time_precision: with these settings some reports would spend their tokens
    and budget and then be refused, so the task is refused instead."""
    policy = issuer.policy(window_seconds=window)
    params = helpers.TaskParams(tokens=policy, time_precision=time_precision)
    t = time_precision + window  # a report time whose truncation leaves its window
    assert (t - t % time_precision) // window != t // window
    with pytest.raises(ValidationError, match="multiple of time_precision"):
        TaskDefinition.model_validate(params.definition("leader"))
    fitting = dataclasses.replace(params, time_precision=window)
    accepted = TaskDefinition.model_validate(fitting.definition("leader")).tokens
    assert accepted is not None and accepted.window_seconds == window
