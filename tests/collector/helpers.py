"""Shared setup for collector tests: provisioning a task straight into a store."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from services.collector.collect import parse_query, query_json
from services.collector.poller import CollectionPoller, PollerConfig
from services.collector.store import JobRow, Store, open_store
from services.common.clock import TestClock
from shared import hpke
from shared.b64url import b64url_encode
from shared.dap.ids import CollectionJobId, TaskId
from shared.dap.messages import HpkeConfig
from shared.dap.task import CollectorTask
from shared.vdaf.spec import VdafSpec

AUTH = "collector-token-0123456789abcdef"
LEADER = "https://leader.test/dap"
#: A multiple of 3600; the rigs' clocks start two hours after it.
START = 1_699_999_200


def make_task(
    vdaf: dict[str, Any] | None = None, query_type: str = "time_interval", precision: int = 3600
) -> CollectorTask:
    return CollectorTask(
        task_id=TaskId.random().to_b64url(),
        leader_endpoint=LEADER,
        query_type=query_type,  # type: ignore[arg-type]
        vdaf=VdafSpec.model_validate(
            vdaf or {"type": "Prio3Histogram", "length": 4, "chunk_length": 2}
        ),
        collector_auth_token=AUTH,
        time_precision=precision,
    )


def provision(store: Store, task: CollectorTask, now_ms: int) -> HpkeConfig:
    keypair = hpke.generate_keypair(1)
    config = HpkeConfig(1, keypair.kem_id, keypair.kdf_id, keypair.aead_id, keypair.public_key)
    store.put_task(
        task.task_id,
        task.model_dump_json(),
        b64url_encode(config.encode()),
        b64url_encode(keypair.private_key_bytes()),
        now_ms,
        lambda _: True,
    )
    return config


class JobRig:
    """A store with one collection job, a fake leader and pollers sharing one fake clock.
    A subclass provisions its task, sets `leader` (the MockTransport handler) and calls
    `create_job`."""

    leader: Callable[[httpx.Request], httpx.Response]

    def __init__(self, tmp_path: Path) -> None:
        self.clock = TestClock(START + 7200)
        self.store: Store = open_store(f"sqlite:///{tmp_path / 'c.sqlite3'}")
        self.job_id = CollectionJobId.random().to_b64url()

    @property
    def ms(self) -> int:
        return int(self.clock.now() * 1000)

    def create_job(self, task_id: str, query: dict[str, Any]) -> None:
        self.store.create_job(self.job_id, task_id, query_json(parse_query(query)), self.ms)

    def poller(self, owner: str = "p1", **config: Any) -> CollectionPoller:
        http = httpx.AsyncClient(transport=httpx.MockTransport(self.leader))
        return CollectionPoller(self.store, http, self.clock, PollerConfig(**config), owner)

    def run(self, poller: CollectionPoller) -> int:
        return asyncio.run(poller.run_once())

    def job(self) -> JobRow:
        job = self.store.get_job(self.job_id)
        assert job is not None
        return job
