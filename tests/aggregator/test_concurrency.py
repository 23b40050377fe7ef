"""Several leader processes share one store: jobs are leased, never processed twice; and the
background driver threads and the `python -m services.aggregator` entry point work."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
from fastapi.testclient import TestClient

from services.aggregator.app import create_app
from services.aggregator.drivers.aggregation import create_jobs
from services.aggregator.drivers.runner import DriverRunner
from services.aggregator.service import Aggregator
from services.common.clock import RealClock, TestClock
from shared.dap.messages import BatchSelector, Interval, Query
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


def test_background_drivers(db_factory: Any) -> None:
    """The threads `serve` starts: upload, then the collection completes on its own."""
    clock = RealClock()
    now = clock.now()
    start = now - now % TP
    config = {"driver_poll_s": 0.05, "collection_retry_s": 1}
    leader = TestClient(create_app(helpers.settings(db_factory(), **config), clock=clock))
    helper_app = create_app(helpers.settings(db_factory(), **config), clock=clock)
    helper = TestClient(helper_app)
    params = TaskParams(min_batch_size=3)
    helpers.provision(leader, params, "leader")
    helpers.provision(helper, params, "helper")
    env = Env(
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
    for m in (1, 1, 0):
        assert env.upload(env.report(m, now)).status_code == 201
    env.runner.start()
    try:
        job = env.start_collection(Query.time_interval(Interval(start, TP)))
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            response = env.poll(job)
            if response.status_code == 200:
                break
            assert response.status_code == 202
            time.sleep(0.1)
        assert response.status_code == 200
    finally:
        env.runner.stop()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_module_entry_point_serves(tmp_path: Path) -> None:
    port = _free_port()
    env = dict(
        os.environ,
        SAGG_AGGREGATOR_DATABASE_URL=f"sqlite:///{tmp_path / 'agg.db'}",
        SAGG_AGGREGATOR_PORT=str(port),
        SAGG_AGGREGATOR_ADMIN_TOKEN=helpers.ADMIN_TOKEN,
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "services.aggregator"],
        env=env,
        cwd=Path(__file__).resolve().parents[2],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 30
        health = None
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                health = httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1)
                break
            except httpx.HTTPError:
                time.sleep(0.2)
        assert health is not None and health.json() == {"status": "ok"}
        configs = httpx.get(f"http://127.0.0.1:{port}/hpke_config", timeout=5)
        assert configs.status_code == 200
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err.decode()[-2000:]
    assert helpers.AGGREGATOR_TOKEN.encode() not in err
