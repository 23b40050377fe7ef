"""Several leader processes share one store: jobs are leased, never processed twice; and the
background driver threads and the `python -m services.aggregator` entry point work."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx
from fastapi.testclient import TestClient

from deploy.launcher import free_ports
from services.aggregator.app import create_app
from services.aggregator.datastore import JobState
from services.aggregator.drivers.aggregation import create_jobs
from services.aggregator.drivers.runner import DriverRunner
from services.aggregator.service import Aggregator
from services.common.clock import RealClock, TestClock
from shared.dap.messages import BatchSelector, Collection, Interval, Query
from tests.aggregator import helpers
from tests.aggregator.env import Env
from tests.aggregator.helpers import TaskParams
from tests.aggregator.test_end_to_end import unshard

NOW = 1_700_006_400
TP = 3600


def test_two_leader_processes_share_one_store(db_factory: Any, clock: TestClock) -> None:
    leader_url, helper_url = db_factory(), db_factory()
    config = {"max_job_size": 3, "min_job_size": 1}
    leader_a = TestClient(create_app(helpers.settings(leader_url, **config), clock=clock))
    leader_b = TestClient(create_app(helpers.settings(leader_url, **config), clock=clock))
    helper_app = create_app(helpers.settings(helper_url), clock=clock)
    helper = TestClient(helper_app)
    params = TaskParams(min_batch_size=40)
    helpers.provision(leader_a, params, "leader")
    helpers.provision(helper, params, "helper")
    leader_config = helpers.hpke_config(leader_b, params.task_id)
    helper_config = helpers.hpke_config(helper, params.task_id)
    for i in range(40):
        report = helpers.make_report(params, leader_config, helper_config, i % 2, NOW + i)
        client = leader_a if i % 2 else leader_b
        assert helpers.upload(client, params, report).status_code == 201

    aggs: list[Aggregator] = [leader_a.app.state.aggregator, leader_b.app.state.aggregator]  # type: ignore[attr-defined]
    runners = [DriverRunner(agg, http=TestClient(helper_app)) for agg in aggs]
    errors: list[BaseException] = []

    def work(agg: Aggregator, runner: DriverRunner) -> None:
        try:
            for _ in range(200):
                busy = create_jobs(agg) + runner.aggregation.run_once()
                if not busy and agg.ds.unaggregated_reports(params.task_id.value) == 0:
                    return
        except BaseException as exc:  # surfaced in the main thread
            errors.append(exc)

    threads = [threading.Thread(target=work, args=pair) for pair in zip(aggs, runners, strict=True)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors

    env = Env(params, clock, leader_a, helper, runners[0], leader_config, helper_config)
    collection = env.collect(Query.time_interval(Interval(NOW, TP)))
    assert collection.report_count == 40
    assert unshard(env, collection, BatchSelector.time_interval(Interval(NOW, TP))) == 20


def _background(db_factory: Any, clock: RealClock, params: TaskParams, **config: Any) -> Env:
    """A leader and a helper whose leader drivers run in threads of their own once started."""
    leader = TestClient(create_app(helpers.settings(db_factory(), **config), clock=clock))
    helper_app = create_app(helpers.settings(db_factory(), **config), clock=clock)
    helper = TestClient(helper_app)
    helpers.provision(leader, params, "leader")
    helpers.provision(helper, params, "helper")
    return Env(
        params,
        clock,
        leader,
        helper,
        DriverRunner(
            leader.app.state.aggregator,  # type: ignore[attr-defined]
            http=TestClient(helper_app),
        ),
        helpers.hpke_config(leader, params.task_id),
        helpers.hpke_config(helper, params.task_id),
    )


def test_background_drivers(db_factory: Any) -> None:
    """The threads `serve` starts: upload, then the collection completes on its own, and its
    aggregate shares add up to the measurements uploaded."""
    clock = RealClock()
    now = clock.now()
    start = now - now % TP
    env = _background(
        db_factory, clock, TaskParams(min_batch_size=3), driver_poll_s=0.05, collection_retry_s=1
    )
    measurements = (1, 1, 0)
    for m in measurements:
        assert env.upload(env.report(m, now)).status_code == 201
    env.runner.start()
    try:
        collection = _collected_by_the_drivers(env, start)
    finally:
        env.runner.stop()
    _assert_sum(env, collection, start, measurements)


def _collected_by_the_drivers(env: Env, start: int) -> Collection:
    """The bucket at `start` collected while the leader's driver threads run."""
    job = env.start_collection(Query.time_interval(Interval(start, TP)))
    return env.await_collection(job, wait_s=60)


def _assert_sum(env: Env, collection: Collection, start: int, measurements: Sequence[int]) -> None:
    assert collection.report_count == len(measurements)
    selector = BatchSelector.time_interval(Interval(start, TP))
    assert unshard(env, collection, selector) == sum(measurements)


def test_drivers_wake_for_the_jobs_their_process_commits(db_factory: Any) -> None:
    """With a poll far longer than this test may take, a job the upload writer makes and a
    collection job created afterwards still run at once: their commits ring the drivers'
    doorbells (`Datastore.aggregation_jobs_made`, `collection_jobs_made`)."""
    clock = RealClock()
    now = clock.now()
    start = now - now % TP
    env = _background(
        db_factory,
        clock,
        TaskParams(min_batch_size=3),
        driver_poll_s=3600,
        collection_retry_s=1,
        # Every upload group makes its own job, in the writer's transaction.
        upload_job_group_min=1,
        min_job_size=1,
    )
    measurements = (1, 0, 1)
    env.runner.start()
    try:
        # The loops' first look finds nothing; from then on only a ring wakes them.
        time.sleep(1)
        for m in measurements:
            assert env.upload(env.report(m, now)).status_code == 201
        deadline = time.monotonic() + 60
        while env.leader_agg.ds.unaggregated_reports(env.params.task_id.value) or _unfinished(env):
            assert time.monotonic() < deadline, "the aggregation driver was not woken"
            time.sleep(0.05)
        collection = _collected_by_the_drivers(env, start)
    finally:
        env.runner.stop()
    _assert_sum(env, collection, start, measurements)


def _unfinished(env: Env) -> int:
    """The leader's aggregation jobs not finished yet (or none made yet)."""
    rows = env.leader_agg.ds.db.run(
        "jobs",
        lambda tx: tx.query(
            "SELECT state FROM aggregation_jobs WHERE task_id = :t",
            {"t": env.params.task_id.value},
        ),
    )
    return sum(1 for r in rows if r["state"] != JobState.FINISHED) if rows else 1


def _free_port() -> int:
    (port,) = free_ports(1)
    return port


def _spawn(tmp_path: Path, name: str, port: int, **extra: str) -> subprocess.Popen[bytes]:
    env = dict(
        os.environ,
        SAGG_AGGREGATOR_DATABASE_URL=f"sqlite:///{tmp_path / f'{name}.db'}",
        SAGG_AGGREGATOR_PORT=str(port),
        SAGG_AGGREGATOR_ADMIN_TOKEN=helpers.ADMIN_TOKEN,
        **extra,
    )
    return subprocess.Popen(
        [sys.executable, "-m", "services.aggregator"],
        env=env,
        cwd=Path(__file__).resolve().parents[2],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def _wait_healthy(proc: subprocess.Popen[bytes], base: str) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            health = httpx.get(f"{base}/healthz", timeout=1)
            assert health.json() == {"status": "ok"}
            return
        except httpx.HTTPError:
            time.sleep(0.2)
    raise AssertionError("aggregator did not become healthy")


def _stop(proc: subprocess.Popen[bytes]) -> bytes:
    proc.terminate()
    _, err = proc.communicate(timeout=20)
    # SIGTERM ends the process cleanly: drivers stopped, exit status 0.
    assert proc.returncode == 0, err.decode()[-2000:]
    return err


def test_two_real_processes_over_http(tmp_path: Path) -> None:
    """`python -m services.aggregator` twice, real sockets: provision, upload, collect."""
    leader_port, helper_port = _free_port(), _free_port()
    leader_base = f"http://127.0.0.1:{leader_port}"
    helper_base = f"http://127.0.0.1:{helper_port}"
    fast = {
        "SAGG_AGGREGATOR_MAX_REPORT_WAIT_S": "0",
        "SAGG_AGGREGATOR_DRIVER_POLL_S": "0.1",
        "SAGG_AGGREGATOR_COLLECTION_RETRY_S": "1",
    }
    leader = _spawn(tmp_path, "leader", leader_port, **fast)
    helper = _spawn(tmp_path, "helper", helper_port, **fast)
    try:
        _wait_healthy(leader, leader_base)
        _wait_healthy(helper, helper_base)
        params = TaskParams(vdaf=dict(helpers.VDAFS["sum"]), min_batch_size=5)
        with (
            httpx.Client(base_url=leader_base, timeout=10) as lc,
            httpx.Client(base_url=helper_base, timeout=10) as hc,
        ):
            for client, role in ((lc, "leader"), (hc, "helper")):
                definition = params.definition(role)
                definition["leader_endpoint"] = leader_base + "/"
                definition["helper_endpoint"] = helper_base
                response = client.put(
                    f"/internal/tasks/{params.task_id.to_b64url()}",
                    json=definition,
                    headers=helpers.admin_headers(),
                )
                assert response.status_code == 201, response.text
            leader_config = helpers.hpke_config(lc, params.task_id)
            helper_config = helpers.hpke_config(hc, params.task_id)
            now = int(time.time())
            start = now - now % TP
            values = [3, 200, 0, 17, 255]
            for v in values:
                report = helpers.make_report(params, leader_config, helper_config, v, now)
                assert helpers.upload(lc, params, report).status_code == 201
            env = Env(params, RealClock(), lc, hc, None, leader_config, helper_config)  # type: ignore[arg-type]
            job = env.start_collection(Query.time_interval(Interval(start, TP)))
            collection = env.await_collection(job)
            selector = BatchSelector.time_interval(Interval(start, TP))
            assert collection.report_count == 5
            assert unshard(env, collection, selector) == sum(values)
    finally:
        errs = [_stop(leader), _stop(helper)]
    for err in errs:
        assert helpers.AGGREGATOR_TOKEN.encode() not in err
        assert helpers.COLLECTOR_TOKEN.encode() not in err
