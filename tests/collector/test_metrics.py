"""The collector's `/metrics` after real collections against a fake leader, and across a
restart: store-backed families survive it, in-process counters start again at zero."""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from services.collector.app import create_app
from services.collector.settings import CollectorSettings
from services.collector.store import open_store
from shared.b64url import b64url_decode
from shared.dap.messages import HpkeConfig
from shared.dap.problems import ProblemType
from tests.collector.fakes import FakeLeader
from tests.collector.helpers import AUTH, make_task
from tests.exposition import parse, value

ADMIN = "admin-token-0123456789abcdef"
HEADERS = {"Authorization": f"Bearer {ADMIN}"}


def _wait(client: TestClient, job_id: str) -> dict[str, Any]:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        body: dict[str, Any] = client.get(f"/collections/{job_id}", headers=HEADERS).json()
        if body["state"] != "pending":
            return body
        time.sleep(0.02)
    raise AssertionError("collection job still pending")


def _collect(client: TestClient, task_id: str, start: int) -> dict[str, Any]:
    response = client.post(
        "/collections",
        json={
            "task_id": task_id,
            "query": {"type": "time_interval", "start": start, "duration": 3600},
        },
        headers=HEADERS,
    )
    assert response.status_code == 201
    return _wait(client, response.json()["collection_job_id"])


def test_collector_metrics(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    url = f"sqlite:///{tmp_path / 'c.sqlite3'}"
    task = make_task()
    leader = FakeLeader(task.id, task.vdaf.instance(), AUTH, [0, 1, 1, 3])
    settings = CollectorSettings(
        database_url=url,
        admin_token=ADMIN,  # type: ignore[arg-type]
        poll_interval=0.01,
        max_backoff=0.05,
    )
    with TestClient(create_app(settings, transport=httpx.MockTransport(leader))) as client:
        assert client.get("/metrics").status_code == 401
        assert client.get("/metrics", headers={"Authorization": "Bearer nope"}).status_code == 403
        created = client.put(
            f"/internal/tasks/{task.task_id}", content=task.model_dump_json(), headers=HEADERS
        )
        assert created.status_code == 201
        leader.collector_config = HpkeConfig.decode(
            b64url_decode(created.json()["collector_hpke_config"], "config")
        )
        leader.pending_polls = 2
        assert _collect(client, task.task_id, 7200)["state"] == "complete"
        leader.poll_problem = ProblemType.INVALID_BATCH_SIZE
        assert _collect(client, task.task_id, 10800)["state"] == "failed"

        response = client.get("/metrics", headers=HEADERS)
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
        samples = parse(response.text)
        tid = task.task_id
        assert value(samples, "sagg_collector_tasks") == 1
        jobs = "sagg_collector_collection_jobs"
        assert value(samples, jobs, task=tid, state="complete") == 1
        assert value(samples, jobs, task=tid, state="failed") == 1
        failed = "sagg_collector_collections_failed"
        assert value(samples, failed, task=tid, problem="invalidBatchSize") == 1
        requests = "sagg_collector_leader_requests_total"
        assert value(samples, requests, task=tid, request="start", outcome="started") == 2
        assert value(samples, requests, task=tid, request="poll", outcome="pending") == 2
        assert value(samples, requests, task=tid, request="poll", outcome="ready") == 1
        assert value(samples, requests, task=tid, request="poll", outcome="permanent") == 1
        text = response.text

    # Nothing secret in the metrics or the logs: tokens, the collector's HPKE private key.
    stored = open_store(url).load_task(task.task_id)
    assert stored is not None
    logs = "\n".join(r.getMessage() for r in caplog.records)
    for secret in (ADMIN, AUTH, stored.hpke_private_key):
        assert secret not in text and secret not in logs

    # A restarted collector (or a second replica on the same store) reports the same jobs.
    with TestClient(create_app(settings, transport=httpx.MockTransport(leader))) as client:
        samples = parse(client.get("/metrics", headers=HEADERS).text)
        assert value(samples, jobs, task=tid, state="complete") == 1
        assert value(samples, failed, task=tid, problem="invalidBatchSize") == 1
        assert value(samples, requests, task=tid, request="poll", outcome="ready") == 0


def test_healthz_is_503_when_the_store_is_gone(tmp_path: Path) -> None:
    settings = CollectorSettings(
        database_url=f"sqlite:///{tmp_path / 'c.sqlite3'}",
        admin_token=ADMIN,  # type: ignore[arg-type]
    )
    store = open_store(settings.database_url)
    app = create_app(settings, store=store, run_poller=False)
    with TestClient(app) as client:
        assert client.get("/healthz").json() == {"status": "ok"}
        store.close()
        (tmp_path / "c.sqlite3").unlink()
        (tmp_path / "c.sqlite3").mkdir()  # the path is now a directory: the store cannot open
        broken = client.get("/healthz")
        assert (broken.status_code, broken.json()["status"]) == (503, "unavailable")
