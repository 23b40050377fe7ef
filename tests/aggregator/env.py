"""A leader and a helper in one process, each on its own database, wired through httpx."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import httpx
from fastapi.testclient import TestClient

from services.aggregator.app import create_app
from services.aggregator.drivers.aggregation import create_jobs
from services.aggregator.drivers.runner import DriverRunner
from services.aggregator.service import Aggregator
from services.common.clock import Clock, TestClock
from shared.dap.ids import CollectionJobId
from shared.dap.messages import (
    MEDIA_COLLECT_REQ,
    Collection,
    CollectionReq,
    HpkeConfig,
    Query,
    Report,
)
from tests.aggregator import helpers
from tests.aggregator.helpers import TaskParams


@dataclass
class Env:
    params: TaskParams
    clock: Clock
    leader: TestClient
    helper: TestClient
    runner: DriverRunner
    leader_config: HpkeConfig
    helper_config: HpkeConfig

    @property
    def leader_agg(self) -> Aggregator:
        agg: Aggregator = self.leader.app.state.aggregator  # type: ignore[attr-defined]
        return agg

    @property
    def helper_agg(self) -> Aggregator:
        agg: Aggregator = self.helper.app.state.aggregator  # type: ignore[attr-defined]
        return agg

    @property
    def tid(self) -> str:
        return self.params.task_id.to_b64url()

    def advance(self, seconds: int) -> None:
        assert isinstance(self.clock, TestClock)
        self.clock.advance(seconds)

    def report(self, measurement: Any, time: int | None = None, **kw: Any) -> Report:
        return helpers.make_report(
            self.params,
            self.leader_config,
            self.helper_config,
            measurement,
            self.clock.now() if time is None else time,
            **kw,
        )

    def upload(self, report: Report) -> Any:
        return helpers.upload(self.leader, self.params, report)

    def drive(self, rounds: int = 50) -> None:
        drive(self.runner, rounds)

    def start_collection(self, query: Query, job: CollectionJobId | None = None) -> str:
        job = job or CollectionJobId.random()
        response = self.leader.put(
            f"/tasks/{self.tid}/collection_jobs/{job.to_b64url()}",
            content=CollectionReq(query, b"").encode(),
            headers={"Content-Type": MEDIA_COLLECT_REQ, **collector_auth()},
        )
        assert response.status_code == 201, response.text
        return job.to_b64url()

    def poll(self, job: str) -> Any:
        return self.leader.post(
            f"/tasks/{self.tid}/collection_jobs/{job}", headers=collector_auth()
        )

    def collect(self, query: Query, *, wait_s: int = 30) -> Collection:
        job = self.start_collection(query)
        for _ in range(wait_s):
            self.drive()
            response = self.poll(job)
            if response.status_code == 200:
                return Collection.decode(response.content)
            assert response.status_code == 202, response.text
            # Waiting collection jobs are released for `collection_retry_s`.
            if isinstance(self.clock, TestClock):
                self.clock.advance(1)
            else:
                time.sleep(0.2)
        raise AssertionError("collection did not finish")

    def await_collection(self, job: str, *, wait_s: float = 30) -> Collection:
        """Poll `job` while the leader's own driver threads work on it; the decoded result."""
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            response = self.poll(job)
            if response.status_code == 200:
                assert response.headers["content-type"] == "application/dap-collection"
                return Collection.decode(response.content)
            assert response.status_code == 202, response.text
            time.sleep(0.1)
        raise AssertionError(f"collection {job} did not finish in {wait_s} s")


def only_job(env: Env, table: str) -> bytes:
    """The id of the task's one row in `table` (aggregation_jobs or collection_jobs)."""
    rows = env.leader_agg.ds.db.run(
        "jobs",
        lambda tx: tx.query(
            f"SELECT job_id FROM {table} WHERE task_id = :t", {"t": env.params.task_id.value}
        ),
    )
    assert len(rows) == 1
    return bytes(rows[0]["job_id"])


def drive(runner: DriverRunner, rounds: int = 50) -> None:
    """Step the leader's job creator and drivers in this thread until they find nothing to do."""
    for _ in range(rounds):
        busy = create_jobs(runner.agg)
        busy += runner.aggregation.run_once()
        busy += runner.collection.run_once()
        if not busy:
            return
    raise AssertionError("drivers did not settle")


def collector_auth() -> dict[str, str]:
    return {"Authorization": f"Bearer {helpers.COLLECTOR_TOKEN}"}


def aggregator_auth() -> dict[str, str]:
    return {"DAP-Auth-Token": helpers.AGGREGATOR_TOKEN}


def make_env(
    db_factory: Any,
    clock: TestClock,
    params: TaskParams,
    *,
    issuer_http: httpx.Client | None = None,
    **settings: Any,
) -> Env:
    """`issuer_http` reaches the token issuer (an in-process one's TestClient)."""
    leader = TestClient(
        create_app(helpers.settings(db_factory(), **settings), clock=clock, issuer_http=issuer_http)
    )
    helper = TestClient(
        create_app(helpers.settings(db_factory(), **settings), clock=clock, issuer_http=issuer_http)
    )
    helpers.provision(leader, params, "leader")
    helpers.provision(helper, params, "helper")
    runner = DriverRunner(leader.app.state.aggregator, http=helper)  # type: ignore[attr-defined]
    return Env(
        params,
        clock,
        leader,
        helper,
        runner,
        helpers.hpke_config(leader, params.task_id),
        helpers.hpke_config(helper, params.task_id),
    )
