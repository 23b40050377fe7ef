"""Bounded resources at the leader (issue 12 item 5), each played by the attacker through the
real app: exact report sizes, the poison helper share, full queues, floods of unknown ids and a
token issuer that never answers."""

from __future__ import annotations

import secrets
import socket
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from services.aggregator.answer import Answer
from services.aggregator.app import create_app
from services.aggregator.service import Aggregator
from services.common.clock import TestClock
from services.common.problems import DapProblemError
from shared import hpke
from shared.b64url import b64url_encode
from shared.dap.extensions import RecipeBinding, encode_extensions
from shared.dap.ids import TaskId
from shared.dap.messages import (
    MEDIA_REPORT,
    HpkeCiphertext,
    HpkeConfig,
    Interval,
    Query,
    Report,
    Role,
)
from shared.dap.problems import ProblemType
from shared.dap.sizes import helper_ciphertext_bounds, max_report_len
from shared.privacypass.messages import Token
from shared.privacypass.rsabssa import BLIND_RSA_NK
from tests.aggregator import dap19_client as c19
from tests.aggregator import helpers
from tests.aggregator.env import Env, make_env
from tests.aggregator.issuer import ISSUER_URL, Issuer

DIGEST = secrets.token_bytes(32)


@pytest.fixture
def sqlite_factory(tmp_path: Path) -> Callable[[], str]:
    """Fresh SQLite stores: these checks happen before the store, whatever its engine."""
    return lambda: f"sqlite:///{tmp_path / f'{secrets.token_hex(4)}.db'}"


def _any_token() -> Token:
    """A token of the right shape (it need not verify: sizes are what is checked)."""
    return Token(
        secrets.token_bytes(32),
        secrets.token_bytes(32),
        secrets.token_bytes(32),
        secrets.token_bytes(BLIND_RSA_NK),
    )


def _problem(response: httpx.Response, status: int, kind: ProblemType | None, tid: str) -> None:
    assert response.status_code == status, response.text
    doc = response.json()
    if kind is not None:
        assert doc["type"] == kind.urn, doc
    assert doc["taskid"] == tid, doc


# --- exact sizes ------------------------------------------------------------------------------


@pytest.mark.parametrize("vdaf", sorted(helpers.VDAFS))
@pytest.mark.parametrize(("token", "binding"), [(False, False), (True, False), (True, True)])
def test_report_size_bounds_are_exact(vdaf: str, token: bool, binding: bool) -> None:
    """The largest report a client can build for the task is exactly the cap, and the helper's
    ciphertext without extensions exactly the floor."""
    params = helpers.TaskParams(vdaf=dict(helpers.VDAFS[vdaf]))
    prio3 = params.prio3
    keys = [hpke.generate_keypair(i) for i in (1, 2)]
    configs = [HpkeConfig(k.config_id, k.kem_id, k.kdf_id, k.aead_id, k.public_key) for k in keys]
    extensions = encode_extensions(
        binding=RecipeBinding(DIGEST, 10) if binding else None,
        token=_any_token() if token else None,
    )
    measurement = [1, 0, 0, 0] if vdaf == "sumvec" else 1
    largest = helpers.make_report(
        params, configs[0], configs[1], measurement, 1, extensions=extensions
    )
    bare = helpers.make_report(params, configs[0], configs[1], measurement, 1)
    assert len(largest.encode()) == max_report_len(prio3, token=token, binding=binding)
    low, high = helper_ciphertext_bounds(prio3, token=token, binding=binding)
    assert len(largest.helper_encrypted_input_share.encode()) == high
    assert len(bare.helper_encrypted_input_share.encode()) == low


# --- the poison helper share --------------------------------------------------------------------


def _with_helper_share(report: Report, payload: bytes) -> Report:
    share = report.helper_encrypted_input_share
    return Report(
        report.report_metadata,
        report.public_share,
        report.leader_encrypted_input_share,
        HpkeCiphertext(share.config_id, share.enc, payload),
    )


def test_poison_helper_share_is_refused_at_upload(
    sqlite_factory: Callable[[], str], clock: TestClock
) -> None:
    """A client seals a valid leader share and pads the helper's far beyond any report of the
    task: the leader used to store it and re-send it in every aggregation job."""
    env = make_env(sqlite_factory, clock, helpers.TaskParams())
    honest = env.report(1)
    poison = _with_helper_share(honest, secrets.token_bytes(1 << 20))
    # Through HTTP: longer than the task's largest report, refused before it is read (413).
    _problem(env.upload(poison), 413, ProblemType.INVALID_MESSAGE, env.tid)
    # Past the route (a body the cap would not see): the size check refuses it too.
    answers: list[Answer | Exception] = []
    env.leader_agg.upload(env.tid, poison.encode(), answers.append)
    env.leader_agg.uploads.close()
    (answer,) = answers
    assert isinstance(answer, DapProblemError), answer
    assert answer.problem == ProblemType.INVALID_MESSAGE
    assert env.leader_agg.ds.count_rows("client_reports", env.params.task_id.value) == 0


def test_undersized_helper_share_is_refused_at_upload(
    sqlite_factory: Callable[[], str], clock: TestClock
) -> None:
    """A helper share shorter than the VDAF's exact input share can never prepare: refused at
    upload, counted, never stored nor sent to the helper."""
    env = make_env(sqlite_factory, clock, helpers.TaskParams())
    stub = _with_helper_share(env.report(1), b"\x00")
    _problem(env.upload(stub), 400, ProblemType.INVALID_MESSAGE, env.tid)
    assert helpers.task_stats(env.leader, env.tid)["rejections"]["upload"] == {
        "helper_share_size": 1
    }
    assert env.upload(env.report(1)).status_code == 201
    assert env.leader_agg.ds.count_rows("client_reports", env.params.task_id.value) == 1


# --- bounded queues -----------------------------------------------------------------------------


class _BlockedStore:
    """Holds the upload writer inside its first transaction until released."""

    def __init__(self, agg: Aggregator) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()
        original = agg.ds.put_reports

        def put_reports(*args: Any, **kw: Any) -> Any:
            self.entered.set()
            assert self.release.wait(60)
            return original(*args, **kw)

        agg.ds.put_reports = put_reports  # type: ignore[method-assign]


def _upload_in_thread(env: Env, report: Report) -> tuple[threading.Thread, list[httpx.Response]]:
    out: list[httpx.Response] = []
    thread = threading.Thread(target=lambda: out.append(env.upload(report)), daemon=True)
    thread.start()
    return thread, out


def _wait(condition: Callable[[], bool]) -> None:
    done = threading.Event()
    for _ in range(600):
        if condition():
            return
        done.wait(0.05)
    raise AssertionError("condition not reached")


@pytest.mark.parametrize(
    ("bound", "settings"),
    [
        ("writer queue", {"upload_queue_max": 3, "upload_group_max": 1}),
        ("admitted uploads", {"upload_pending_max": 4, "upload_group_max": 1}),
    ],
)
def test_full_queue_answers_503_and_keeps_what_it_accepted(
    sqlite_factory: Callable[[], str], clock: TestClock, bound: str, settings: dict[str, Any]
) -> None:
    """A store that falls behind: uploads past the bound get 503 with Retry-After at once,
    and every upload accepted before is still stored and answered 201."""
    env = make_env(sqlite_factory, clock, helpers.TaskParams(), **settings)
    store = _BlockedStore(env.leader_agg)
    accepted = [_upload_in_thread(env, env.report(1))]
    assert store.entered.wait(30)
    writer = env.leader_agg.uploads
    for _ in range(3):
        accepted.append(_upload_in_thread(env, env.report(1)))
    _wait(lambda: len(writer._queue) == 3)

    refused_thread, refused = _upload_in_thread(env, env.report(1))
    refused_thread.join(30)
    store.release.set()
    assert refused, f"the upload past the {bound} bound waited instead of being refused"
    _problem(refused[0], 503, None, env.tid)
    assert refused[0].headers["Retry-After"] == "1"

    for thread, out in accepted:
        thread.join(30)
        assert [r.status_code for r in out] == [201]
    assert env.leader_agg.ds.count_rows("client_reports", env.params.task_id.value) == 4
    assert env.upload(env.report(1)).status_code == 201


def test_a_bulk_upload_the_queue_has_no_room_for_is_refused_whole(
    sqlite_factory: Callable[[], str], clock: TestClock
) -> None:
    """A DAP-19 request goes to the writer whole or not at all: past the bound it is 503
    with Retry-After and none of its reports is stored; sent again later, all of them are."""
    task = c19.make_task({"type": "Prio3Count"}, min_batch_size=1)
    env = make_env(sqlite_factory, clock, task.params, upload_queue_max=3, upload_group_max=1)
    lc, hc = c19.hpke_config(env.leader), c19.hpke_config(env.helper)
    now = clock.now()
    store = _BlockedStore(env.leader_agg)
    first = [c19.make_report(task, lc, hc, 1, now)]
    blocked: list[httpx.Response] = []
    thread = threading.Thread(
        target=lambda: blocked.append(c19.upload(env.leader, task, first)), daemon=True
    )
    thread.start()
    assert store.entered.wait(30)
    # The writer holds one request in its transaction; the queue holds two uploads of three.
    queued = [c19.make_report(task, lc, hc, 1, now) for _ in range(2)]
    queued_thread = threading.Thread(
        target=lambda: blocked.append(c19.upload(env.leader, task, queued)), daemon=True
    )
    queued_thread.start()
    _wait(lambda: env.leader_agg.uploads._queued == 2)
    refused = [c19.make_report(task, lc, hc, 1, now) for _ in range(2)]
    response = c19.upload(env.leader, task, refused)
    _problem(response, 503, None, env.tid)
    assert response.headers["Retry-After"] == "1"
    store.release.set()
    for t in (thread, queued_thread):
        t.join(30)
    assert [r.status_code for r in blocked] == [200, 200]
    assert env.leader_agg.ds.count_rows("client_reports", task.params.task_id.value) == 3
    again = c19.upload(env.leader, task, refused)
    assert (again.status_code, again.content) == (200, b"")
    assert env.leader_agg.ds.count_rows("client_reports", task.params.task_id.value) == 5


# --- unknown ids cost no store query ------------------------------------------------------------


@pytest.fixture
def lookups(sqlite_factory: Callable[[], str], clock: TestClock) -> Iterator[tuple[Env, list[str]]]:
    """The leader and the names of the store transactions it runs from now on."""
    env = make_env(sqlite_factory, clock, helpers.TaskParams(), unknown_id_cache_s=3600)
    calls: list[str] = []
    db = env.leader_agg.ds.db
    original = db.run

    def run(name: str, body: Any) -> Any:
        calls.append(name)
        return original(name, body)

    db.run = run  # type: ignore[method-assign]
    yield env, calls


def test_random_task_ids_do_not_reach_the_store(lookups: tuple[Env, list[str]]) -> None:
    env, calls = lookups
    body = env.report(1).encode()
    for i in range(60):
        tid = TaskId.random().to_b64url()
        if i % 2:
            response = env.leader.put(
                f"/tasks/{tid}/reports", content=body, headers={"Content-Type": MEDIA_REPORT}
            )
        else:
            response = env.leader.get("/hpke_config", params={"task_id": tid})
        _problem(response, 400, ProblemType.UNRECOGNIZED_TASK, tid)
    # At most one read of the task id set (none here: provisioning read it already).
    assert len(calls) <= 1 and "get_task" not in calls, f"unknown task ids cost {calls}"
    # The provisioned task is still served.
    assert env.upload(env.report(1)).status_code == 201


def test_random_hpke_config_ids_do_not_reach_the_store(lookups: tuple[Env, list[str]]) -> None:
    env, calls = lookups
    assert env.upload(env.report(1)).status_code == 201
    calls.clear()
    known = env.leader_config.id
    for config_id in [c for c in range(256) if c != known][:60]:
        report = env.report(1)
        leader = report.leader_encrypted_input_share
        moved = Report(
            report.report_metadata,
            report.public_share,
            HpkeCiphertext(config_id, leader.enc, leader.payload),
            report.helper_encrypted_input_share,
        )
        _problem(env.upload(moved), 400, ProblemType.OUTDATED_CONFIG, env.tid)
    # Only the refusal counts are written (`outdatedConfig`, by the group-commit writer).
    reads = [name for name in calls if name != "put_reports"]
    assert reads == [], f"unknown HPKE config ids cost {reads}"


# --- a token issuer that never answers ----------------------------------------------------------


class _HungListener:
    """A TCP listener that accepts connections and never answers (a stuck token issuer)."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}/"
        self.accepted: list[socket.socket] = []
        self.connected = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted.append(conn)
            self.connected.set()

    def close(self) -> None:
        self.sock.close()
        for conn in self.accepted:
            conn.close()


class _IssuerRouter(httpx.Client):
    """Reaches the in-process issuer by its URL and anything else over the network."""

    def __init__(self, issuer: Issuer) -> None:
        super().__init__(timeout=120)
        self.issuer = issuer

    def get(self, url: httpx.URL | str, **kwargs: Any) -> httpx.Response:
        if str(url).startswith(ISSUER_URL):
            response: httpx.Response = self.issuer.client.get(url)
            return response
        return super().get(url, **kwargs)


def test_a_hung_token_issuer_stalls_only_its_own_task(
    sqlite_factory: Callable[[], str], clock: TestClock, issuer: Issuer
) -> None:
    """Task B's issuer accepts the connection and never answers. Task A's uploads (its own,
    working issuer) go on meanwhile; B's uploads get 503 once B's fetch fails."""
    hung = _HungListener()
    router = _IssuerRouter(issuer)
    try:
        env = make_env(
            sqlite_factory,
            clock,
            helpers.TaskParams(tokens=issuer.policy()),
            issuer_http=router,
            issuer_timeout_s=120,
            token_issuers=[ISSUER_URL, hung.url],
        )
        b_token = _any_token()  # under B's pinned key, so only the directory fetch can decide
        task_b = helpers.TaskParams(
            tokens={
                "issuer_url": hung.url,
                "issuer_name": "hung.test",
                "window_seconds": 86400,
                "key_ids": [b64url_encode(b_token.token_key_id)],
            }
        )
        helpers.provision(env.leader, task_b, "leader")
        b_reports = [
            helpers.make_report(
                task_b,
                env.leader_config,
                env.helper_config,
                1,
                clock.now(),
                extensions=encode_extensions(token=b_token),
            )
            for _ in range(6)
        ]
        b_uploads = []
        for report in b_reports:
            out: list[httpx.Response] = []
            thread = threading.Thread(
                target=lambda r=report, o=out: o.append(helpers.upload(env.leader, task_b, r)),
                daemon=True,
            )
            thread.start()
            b_uploads.append((thread, out))
        assert hung.connected.wait(30)

        a_answers: list[int] = []

        def upload_a() -> None:
            for _ in range(3):
                token = issuer.token(env.params.task_id, clock.now(), Role.LEADER)
                report = env.report(1, extensions=encode_extensions(token=token))
                a_answers.append(env.upload(report).status_code)

        a_thread = threading.Thread(target=upload_a, daemon=True)
        a_thread.start()
        a_thread.join(60)
        assert a_answers == [201, 201, 201], "task A's uploads waited for task B's issuer"
        assert all(not out for _, out in b_uploads), "B was answered before its issuer"
    finally:
        hung.close()
    for thread, out in b_uploads:
        thread.join(60)
        assert [r.status_code for r in out] == [503]
    router.close()


def test_drivers_find_a_task_provisioned_after_their_id_set_was_read(
    sqlite_factory: Callable[[], str], clock: TestClock
) -> None:
    """Scale-out: an API process provisions a task and takes its uploads while a driver
    process still holds an id set read before the task existed. The id set may refuse the
    task's *requests* for ``unknown_id_cache_s``, but a job row names a provisioned task: the
    drivers must aggregate and collect it, never fail the collection as unrecognizedTask."""
    env = make_env(sqlite_factory, clock, helpers.TaskParams(), unknown_id_cache_s=3600)
    stale = env.leader_agg
    assert stale.task_by_id(TaskId.random().value) is None  # the id set is read now
    api = TestClient(
        create_app(
            helpers.settings(stale.settings.database_url, unknown_id_cache_s=3600), clock=clock
        )
    )
    params = helpers.TaskParams(min_batch_size=3)
    helpers.provision(api, params, "leader")
    helpers.provision(env.helper, params, "helper")
    assert stale.task_by_id(params.task_id.value) is None  # requests: the id set's answer
    late = Env(
        params,
        clock,
        api,
        env.helper,
        env.runner,  # the stale process's drivers
        helpers.hpke_config(api, params.task_id),
        helpers.hpke_config(env.helper, params.task_id),
    )
    for measurement in (1, 0, 1):
        assert late.upload(late.report(measurement)).status_code == 201
    start = clock.now() - clock.now() % params.time_precision
    collection = late.collect(Query.time_interval(Interval(start, params.time_precision)))
    assert collection.report_count == 3
