"""Taskprov in both roles (digest dap-19.md §11): a task that exists nowhere but in the
`DAP-Taskprov` headers. The client's upload announces it and the leader opts in; the leader's
requests announce it and the helper opts in (both derive the same verify key from the shared
`verify_key_init`); the collector's requests announce it and it collects. Then the opt-out
cases with their exact problem types, a header that names another task, and the rules around
them. Reports, the configuration and the derived values are built from the digest here."""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from dataclasses import replace
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from services.aggregator.app import create_app
from services.aggregator.drivers.runner import DriverRunner
from services.common.clock import TestClock
from shared.b64url import b64url_encode
from shared.dap.ids import TaskId
from shared.dap.messages import Interval
from shared.dap.messages19 import (
    AggregationJobInitReq,
    CollectionJobReq,
    CollectionJobResp,
    Query,
    TaskExtension,
    UploadErrors,
)
from tests.aggregator import dap19_client as c19
from tests.aggregator import helpers
from tests.aggregator.conftest import DbFactory
from tests.aggregator.env import Env, aggregator_auth, collector_auth
from tests.aggregator.helpers import HELPER_URL, LEADER_URL

COUNT = {"type": "Prio3Count"}
HISTOGRAM = {"type": "Prio3Histogram", "length": 4, "chunk_length": 2}
VERIFY_KEY_INIT = secrets.token_bytes(32)
HEADER = "DAP-Taskprov"


def header(task: c19.Task19) -> dict[str, str]:
    """The announcement: an RFC 9651 Byte Sequence of the configuration (padded base64)."""
    return {HEADER: ":" + base64.b64encode(task.config_bytes).decode() + ":"}


def taskprov_task(vdaf: dict[str, Any], **kw: Any) -> c19.Task19:
    """A task whose id and verify key are taskprov's, computed here from the formulas."""
    task = c19.make_task(vdaf, **kw)
    label = hashlib.sha256(b"dap-taskprov task id").digest()
    task_id = hashlib.sha256(label + task.config_bytes).digest()
    prk = hmac.new(hashlib.sha256(b"dap-taskprov").digest(), VERIFY_KEY_INIT, hashlib.sha256)
    key = hmac.new(prk.digest(), task_id + b"\x01", hashlib.sha256).digest()
    task.params.task_id = TaskId(task_id)
    task.params.verify_key = key
    return task


def settings(task: c19.Task19, role: str, **over: Any) -> dict[str, Any]:
    values: dict[str, Any] = {
        "taskprov_verify_key_init": b64url_encode(VERIFY_KEY_INIT),
        "taskprov_peer_endpoint": HELPER_URL if role == "leader" else LEADER_URL,
        "taskprov_aggregator_auth_token": helpers.AGGREGATOR_TOKEN,
        "taskprov_collector_hpke_config": b64url_encode(task.params.collector_config.encode()),
    }
    if role == "leader":
        values["taskprov_collector_auth_token"] = helpers.COLLECTOR_TOKEN
    return {**values, **over}


def taskprov_env(
    db_factory: DbFactory,
    clock: TestClock,
    task: c19.Task19,
    leader: dict[str, Any] | None = None,
    helper: dict[str, Any] | None = None,
) -> Env:
    """A leader and a helper that know no task, only their taskprov settings."""
    leader_app = TestClient(
        create_app(
            helpers.settings(db_factory(), **settings(task, "leader", **(leader or {}))),
            clock=clock,
        )
    )
    helper_app = TestClient(
        create_app(
            helpers.settings(db_factory(), **settings(task, "helper", **(helper or {}))),
            clock=clock,
        )
    )
    runner = DriverRunner(leader_app.app.state.aggregator, http=helper_app)  # type: ignore[attr-defined]
    return Env(
        task.params,
        clock,
        leader_app,
        helper_app,
        runner,
        c19.hpke_config(leader_app),
        c19.hpke_config(helper_app),
    )


def upload(env: Env, task: c19.Task19, reports: list[Any], **headers: str) -> httpx.Response:
    response: httpx.Response = env.leader.post(
        f"/tasks/{env.tid}/reports",
        content=b"".join(r.encode() for r in reports),
        headers={"Content-Type": c19.UPLOAD_REQ, **headers},
    )
    return response


def problem(response: httpx.Response, token: str, task_id: str) -> None:
    assert response.status_code >= 400, response.text
    body = response.json()
    assert body["type"] == f"urn:ietf:params:ppm:dap:error:{token}", body
    assert body["taskid"] == task_id


def collect(env: Env, task: c19.Task19, request: CollectionJobReq) -> Any:
    created = env.leader.post(
        f"/tasks/{env.tid}/collection_jobs",
        content=request.encode(),
        headers={"Content-Type": c19.COLLECTION_JOB_REQ, **collector_auth(), **header(task)},
    )
    assert created.status_code == 201, created.text
    location = created.headers["location"]
    for _ in range(30):
        env.drive()
        polled = env.leader.get(location, headers={**collector_auth(), **header(task)})
        assert polled.status_code == 200, polled.text
        if polled.content:
            return location, CollectionJobResp.decode(polled.content)
        env.advance(1)
    raise AssertionError("collection did not finish")


def test_a_task_provisioned_only_by_headers(db_factory: DbFactory, clock: TestClock) -> None:
    task = taskprov_task(HISTOGRAM, min_batch_size=4)
    env = taskprov_env(db_factory, clock, task)
    now = clock.now()
    measurements = [0, 3, 1, 3, 3, 2]
    reports = [
        c19.make_report(task, env.leader_config, env.helper_config, m, now) for m in measurements
    ]

    # Without the announcement the leader does not know the task (the client retries with it).
    problem(upload(env, task, reports), "unrecognizedTask", env.tid)
    response = upload(env, task, reports, **header(task))
    assert response.status_code == 200 and response.content == b"", response.text
    leader_task = env.leader_agg.task(env.tid, "leader")
    assert leader_task.taskprov and leader_task.verify_key == task.params.verify_key
    # The helper knows nothing until the leader's first aggregation request announces it.
    assert env.helper_agg.task_by_id(task.params.task_id.value) is None
    env.drive()
    helper_task = env.helper_agg.task(env.tid, "helper")
    assert helper_task.taskprov and helper_task.verify_key == task.params.verify_key
    assert helper_task.wire.config_bytes == task.config_bytes  # type: ignore[union-attr]

    request = CollectionJobReq(Query.time_interval(Interval(now // task.tp, 1)), b"")
    location, resp = collect(env, task, request)
    assert resp.report_count == len(measurements)
    assert c19.unshard(task, request, resp) == [measurements.count(b) for b in range(4)]

    # The collector's DELETE of the finished job (DAP-19 §4.6.1): gone, batch still collected.
    deleted = env.leader.delete(location, headers={**collector_auth(), **header(task)})
    assert deleted.is_success
    assert env.leader.get(location, headers=collector_auth()).status_code == 404
    again = env.leader.post(
        f"/tasks/{env.tid}/collection_jobs",
        content=CollectionJobReq(Query.time_interval(Interval(now // task.tp, 2)), b"").encode(),
        headers={"Content-Type": c19.COLLECTION_JOB_REQ, **collector_auth(), **header(task)},
    )
    problem(again, "batchOverlap", env.tid)


def test_header_must_name_the_url_task(db_factory: DbFactory, clock: TestClock) -> None:
    task = taskprov_task(COUNT)
    other = taskprov_task(COUNT)
    env = taskprov_env(db_factory, clock, task)
    report = c19.make_report(task, env.leader_config, env.helper_config, 1, clock.now())
    problem(upload(env, task, [report], **header(other)), "unrecognizedTask", env.tid)
    # The helper too, before anything else (a fresh job that would otherwise opt it in).
    vinit = c19.verify_init(task, env.helper_config, 1, clock.now())
    body = AggregationJobInitReq(0, b"", (), (vinit,)).encode()
    init_headers = {"Content-Type": c19.INIT_REQ, **aggregator_auth()}
    response = env.helper.post(
        f"/tasks/{env.tid}/aggregation_jobs",
        content=body,
        headers={**init_headers, **header(other)},
    )
    problem(response, "unrecognizedTask", env.tid)
    # The helper opts in only on the leader's token (DAP-19 has no problem type for it: 403).
    response = env.helper.post(
        f"/tasks/{env.tid}/aggregation_jobs",
        content=body,
        headers={"Content-Type": c19.INIT_REQ, **header(task)},
    )
    assert response.status_code == 403
    assert env.helper_agg.task_by_id(task.params.task_id.value) is None
    response = env.helper.post(
        f"/tasks/{env.tid}/aggregation_jobs", content=body, headers={**init_headers, **header(task)}
    )
    assert response.status_code == 200 and response.content, response.text


def test_collection_does_not_opt_in(db_factory: DbFactory, clock: TestClock) -> None:
    """Taskprov §"Collection Protocol": before a report provisioned the task, the leader
    answers the collector unrecognizedTask."""
    task = taskprov_task(COUNT)
    env = taskprov_env(db_factory, clock, task)
    request = CollectionJobReq(Query.time_interval(Interval(clock.now() // task.tp, 1)), b"")
    response = env.leader.post(
        f"/tasks/{env.tid}/collection_jobs",
        content=request.encode(),
        headers={"Content-Type": c19.COLLECTION_JOB_REQ, **collector_auth(), **header(task)},
    )
    problem(response, "unrecognizedTask", env.tid)
    assert env.leader_agg.task_by_id(task.params.task_id.value) is None


def _opted_out(db_factory: DbFactory, clock: TestClock, task: c19.Task19, **leader: Any) -> str:
    env = taskprov_env(db_factory, clock, task, leader=leader)
    report = c19.make_report(task, env.leader_config, env.helper_config, 1, clock.now())
    response = upload(env, task, [report], **header(task))
    problem(response, "invalidTask", env.tid)
    assert env.leader_agg.task_by_id(task.params.task_id.value) is None
    detail: str = response.json()["detail"]
    return detail


def test_must_opt_out(db_factory: DbFactory, clock: TestClock) -> None:
    """Taskprov §"Opting into a Task", the MUST list: the task ended, a batch mode or VDAF
    (or task extension) not implemented."""
    tp = 3600
    ended = taskprov_task(COUNT, task_interval=Interval(0, clock.now() // tp))
    assert "ended" in _opted_out(db_factory, clock, ended)
    for changes, why in (
        ({"batch_mode": 3}, "batch mode"),
        ({"vdaf_type": 6, "vdaf_configuration": b"\x00\x08"}, "VDAF"),
        ({"vdaf_type": 0xFFFF0042, "vdaf_configuration": b""}, "VDAF"),
        ({"extensions": (TaskExtension(0x0FF0, b""),)}, "extension"),
    ):
        task = taskprov_task(COUNT)
        task.config = replace(task.config, **changes)
        task.config_bytes = task.config.encode()
        task = _rederive(task)
        assert why in _opted_out(db_factory, clock, task)


def _rederive(task: c19.Task19) -> c19.Task19:
    label = hashlib.sha256(b"dap-taskprov task id").digest()
    task.params.task_id = TaskId(hashlib.sha256(label + task.config_bytes).digest())
    return task


def test_may_opt_out_by_policy(db_factory: DbFactory, clock: TestClock) -> None:
    """The operator's reasons: not its peer, too small a batch, too long a lifetime."""
    stranger = taskprov_task(COUNT, helper_url="http://elsewhere.test/")
    assert "not this aggregator's taskprov peer" in _opted_out(db_factory, clock, stranger)
    small = taskprov_task(COUNT, min_batch_size=5)
    detail = _opted_out(db_factory, clock, small, taskprov_min_batch_size=100)
    assert "min_batch_size" in detail
    forever = taskprov_task(COUNT)
    assert "lives longer" in _opted_out(
        db_factory, clock, forever, taskprov_max_task_lifetime_s=86400
    )
    no_collector = taskprov_task(COUNT)
    assert "leads no taskprov task" in _opted_out(
        db_factory, clock, no_collector, taskprov_collector_auth_token=None
    )


def test_a_bounded_number_of_tasks(db_factory: DbFactory, clock: TestClock) -> None:
    """`taskprov_max_tasks`: anyone may announce tasks to the leader's unauthenticated upload,
    so it stops opting in at the bound; a task already in goes on."""
    first = taskprov_task(COUNT)
    env = taskprov_env(db_factory, clock, first, leader={"taskprov_max_tasks": 1})
    now = clock.now()
    report = c19.make_report(first, env.leader_config, env.helper_config, 1, now)
    assert upload(env, first, [report], **header(first)).content == b""
    second = taskprov_task(COUNT)
    other = replace(env, params=second.params)
    report = c19.make_report(second, env.leader_config, env.helper_config, 1, now)
    response = upload(other, second, [report], **header(second))
    problem(response, "invalidTask", other.tid)
    assert "most tasks (1)" in response.json()["detail"]
    again = c19.make_report(first, env.leader_config, env.helper_config, 1, now)
    assert upload(env, first, [again], **header(first)).content == b""


def test_never_opts_out_after_opting_in(db_factory: DbFactory, clock: TestClock) -> None:
    """Once in, a task stays in: after its end the header is still taken (its reports are
    dropped one by one, report_dropped), never answered invalidTask."""
    tp = 3600
    now = clock.now()
    task = taskprov_task(COUNT, task_interval=Interval(now // tp, 1))
    env = taskprov_env(db_factory, clock, task)
    first = c19.make_report(task, env.leader_config, env.helper_config, 1, now)
    assert upload(env, task, [first], **header(task)).content == b""
    env.advance(2 * tp)
    late = c19.make_report(task, env.leader_config, env.helper_config, 1, clock.now())
    response = upload(env, task, [late], **header(task))
    assert response.status_code == 200
    errors = UploadErrors.decode(response.content).status
    assert [(e.report_id, e.error.name) for e in errors] == [
        (late.report_metadata.report_id, "REPORT_DROPPED")
    ]


def test_known_task_configured_otherwise(db_factory: DbFactory, clock: TestClock) -> None:
    """An id provisioned out of band with other configuration bytes (taskprov's first MAY
    reason): invalidTask."""
    task = taskprov_task(COUNT)
    env = taskprov_env(db_factory, clock, task)
    other = c19.make_task(COUNT)  # same fields, another task_info
    definition = task.params.definition("leader") | {
        "dap": "dap-19",
        "vdaf": {**COUNT, "version": "VDAF-20"},
        "task_configuration": b64url_encode(other.config_bytes),
    }
    created = env.leader.put(
        f"/internal/tasks/{env.tid}", json=definition, headers=helpers.admin_headers()
    )
    assert created.status_code == 201, created.text
    report = c19.make_report(task, env.leader_config, env.helper_config, 1, clock.now())
    problem(upload(env, task, [report], **header(task)), "invalidTask", env.tid)


def test_taskprov_off_ignores_the_header(db_factory: DbFactory, clock: TestClock) -> None:
    task = taskprov_task(COUNT)
    env = taskprov_env(db_factory, clock, task, leader={"taskprov_verify_key_init": None})
    report = c19.make_report(task, env.leader_config, env.helper_config, 1, clock.now())
    problem(upload(env, task, [report], **header(task)), "unrecognizedTask", env.tid)


@pytest.mark.parametrize("value", ['"not a byte sequence"', ":!!!:", ":AAAA:"])
def test_ignored_headers_are_absent_ones(
    db_factory: DbFactory, clock: TestClock, value: str
) -> None:
    task = taskprov_task(COUNT)
    env = taskprov_env(db_factory, clock, task)
    report = c19.make_report(task, env.leader_config, env.helper_config, 1, clock.now())
    problem(upload(env, task, [report], **{HEADER: value}), "unrecognizedTask", env.tid)


def test_several_header_lines_are_ignored(db_factory: DbFactory, clock: TestClock) -> None:
    """Two DAP-Taskprov lines make one List value (RFC 9110 §5.3), no Item: ignored, at the
    leader's upload and at the helper alike."""
    task = taskprov_task(COUNT)
    env = taskprov_env(db_factory, clock, task)
    report = c19.make_report(task, env.leader_config, env.helper_config, 1, clock.now())
    (value,) = header(task).values()
    twice = [("Content-Type", c19.UPLOAD_REQ), (HEADER, value), (HEADER, value)]
    response = env.leader.post(f"/tasks/{env.tid}/reports", content=report.encode(), headers=twice)
    problem(response, "unrecognizedTask", env.tid)
    vinit = c19.verify_init(task, env.helper_config, 1, clock.now())
    body = AggregationJobInitReq(0, b"", (), (vinit,)).encode()
    ((auth_name, auth_value),) = aggregator_auth().items()
    lines = [
        ("Content-Type", c19.INIT_REQ),
        (auth_name, auth_value),
        (HEADER, value),
        (HEADER, value),
    ]
    response = env.helper.post(f"/tasks/{env.tid}/aggregation_jobs", content=body, headers=lines)
    problem(response, "unrecognizedTask", env.tid)
    # One line is the announcement.
    assert upload(env, task, [report], **header(task)).status_code == 200


def test_a_leader_selected_taskprov_task(db_factory: DbFactory, clock: TestClock) -> None:
    task = taskprov_task(COUNT, query_type="fixed_size", min_batch_size=3)
    env = taskprov_env(db_factory, clock, task)
    now = clock.now()
    reports = [
        c19.make_report(task, env.leader_config, env.helper_config, 1, now) for _ in range(3)
    ]
    assert upload(env, task, reports, **header(task)).content == b""
    env.drive()
    assert env.helper_agg.task(env.tid, "helper").query_type == 2  # leader_selected
    request = CollectionJobReq(Query.leader_selected(), b"")
    _, resp = collect(env, task, request)
    assert (resp.report_count, c19.unshard(task, request, resp)) == (3, 3)
