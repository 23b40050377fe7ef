"""Taskprov end to end through real processes (digest dap-19.md §11): leader, helper and
collector each configured only with the taskprov settings their operators share (secrets as
``..._FILE``), and a task that exists nowhere until a client's upload announces it.

The task author writes the TaskConfiguration; the collector is given it (its id checked to be
taskprov's, its shares sealed to the collector key the aggregators were configured with); the
SDK's plain client uploads with the DAP-Taskprov header, the leader opts in, the leader's
aggregation requests announce the task and the helper opts in, and the collector's requests
announce it and collect exactly the measurements sent; then the collector DELETEs the finished
job at the leader."""

from __future__ import annotations

import os
import secrets
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from client_sdk.upload import ClientTask, upload_reports
from deploy.launcher import free_ports
from services.common.provisioning import new_configuration
from shared import hpke
from shared.b64url import b64url_encode
from shared.dap.messages import HpkeConfig
from shared.dap.task import CollectorTask
from shared.dap.taskprov import task_id_of
from shared.vdaf.spec import VdafSpec
from tests import pg
from tests.faults.harness import AGGREGATOR_ENV, COLLECTOR_ENV, REPO, Service

ADMIN = "taskprov-admin-token-0123456789"
PRECISION = 60
HIST = VdafSpec(version="VDAF-20", type="Prio3Histogram", length=4, chunk_length=2)
REPORTS = 30


def _secret_file(tmp: Path, name: str, value: str) -> str:
    path = tmp / name
    path.write_text(value + "\n")
    path.chmod(0o600)
    return str(path)


@pytest.fixture(params=["sqlite", "postgres"])
def services(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[dict[str, Any]]:
    """The three processes, their URLs and the shared secrets; killed afterwards."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("SAGG_")}
    base["PYTHONPATH"] = str(REPO)
    names = ("leader", "helper", "collector")
    ports = dict(zip(names, free_ports(len(names)), strict=True))
    urls = {name: f"http://127.0.0.1:{port}" for name, port in ports.items()}
    collector_key = hpke.generate_keypair(3)
    collector_config = HpkeConfig(
        3,
        collector_key.kem_id,
        collector_key.kdf_id,
        collector_key.aead_id,
        collector_key.public_key,
    )
    shared = {
        "SAGG_AGGREGATOR_TASKPROV_VERIFY_KEY_INIT_FILE": _secret_file(
            tmp_path, "verify_key_init", b64url_encode(secrets.token_bytes(32))
        ),
        "SAGG_AGGREGATOR_TASKPROV_AGGREGATOR_AUTH_TOKEN_FILE": _secret_file(
            tmp_path, "aggregator_token", secrets.token_urlsafe(32)
        ),
        "SAGG_AGGREGATOR_TASKPROV_COLLECTOR_HPKE_CONFIG": b64url_encode(collector_config.encode()),
        "SAGG_AGGREGATOR_ADMIN_TOKEN": ADMIN,
    }
    collector_token = secrets.token_urlsafe(32)
    with pg.engine_urls(request.param, tmp_path, strict=True) as database:
        running: list[Service] = []
        try:
            for role, peer in (("leader", "helper"), ("helper", "leader")):
                env = {**base, **AGGREGATOR_ENV, **shared}
                env.update(
                    SAGG_AGGREGATOR_DATABASE_URL=database(),
                    SAGG_AGGREGATOR_PORT=str(ports[role]),
                    SAGG_AGGREGATOR_RUN_DRIVERS="true" if role == "leader" else "false",
                    SAGG_AGGREGATOR_TASKPROV_PEER_ENDPOINT=urls[peer],
                )
                if role == "leader":
                    env["SAGG_AGGREGATOR_TASKPROV_COLLECTOR_AUTH_TOKEN_FILE"] = _secret_file(
                        tmp_path, "collector_token", collector_token
                    )
                running.append(
                    Service(role, "services.aggregator", env, ports[role], tmp_path / f"{role}.log")
                )
            env = {**base, **COLLECTOR_ENV}
            env.update(
                SAGG_COLLECTOR_DATABASE_URL=f"sqlite:///{tmp_path / 'collector.db'}",
                SAGG_COLLECTOR_PORT=str(ports["collector"]),
                SAGG_COLLECTOR_ADMIN_TOKEN=ADMIN,
                SAGG_COLLECTOR_TASKPROV_HPKE_SECRET_FILE=_secret_file(
                    tmp_path, "collector_hpke", b64url_encode(collector_key.private_key_bytes())
                ),
                SAGG_COLLECTOR_TASKPROV_HPKE_CONFIG_ID="3",
            )
            running.append(
                Service(
                    "collector",
                    "services.collector",
                    env,
                    ports["collector"],
                    tmp_path / "collector.log",
                )
            )
            for service in running:
                service.start()
            yield {
                "urls": urls,
                "collector_token": collector_token,
                "collector_config": collector_config,
                "services": running,
            }
        finally:
            for service in running:
                service.kill9()


def _admin(url: str, method: str, path: str, **kw: Any) -> httpx.Response:
    headers = {"Authorization": f"Bearer {ADMIN}"}
    return httpx.request(method, f"{url}{path}", headers=headers, timeout=10, **kw)


@pytest.mark.slow
def test_a_task_provisioned_only_by_taskprov(services: dict[str, Any]) -> None:
    urls = services["urls"]
    now = int(time.time())
    # The task author's configuration: lives an hour, min batch REPORTS.
    config = new_configuration(
        HIST, "time_interval", REPORTS, PRECISION, (urls["leader"], urls["helper"]), now + 3600
    )
    task_id = task_id_of(config).to_b64url()
    task_configuration = b64url_encode(config)

    collector_task = CollectorTask(
        task_id=task_id,
        leader_endpoint=urls["leader"],
        query_type="time_interval",  # type: ignore[arg-type]
        vdaf=HIST,
        dap="dap-19",
        task_configuration=task_configuration,
        taskprov=True,
        collector_auth_token=services["collector_token"],
        min_batch_size=REPORTS,
        time_precision=PRECISION,
    )
    put = _admin(
        urls["collector"],
        "PUT",
        f"/internal/tasks/{task_id}",
        content=collector_task.model_dump_json(),
    )
    assert put.status_code == 201, put.text
    assert put.json()["collector_hpke_config"] == b64url_encode(
        services["collector_config"].encode()
    )
    for role in ("leader", "helper"):
        assert _admin(urls[role], "GET", f"/internal/tasks/{task_id}").status_code == 404

    client_task = ClientTask(
        task_id=task_id,
        leader=urls["leader"],
        helper=urls["helper"],
        vdaf=HIST,
        time_precision=PRECISION,
        dap="dap-19",
        task_configuration=task_configuration,
        taskprov=True,
    )
    measurements = [(i * 7) % 4 for i in range(REPORTS)]
    summary = upload_reports(client_task, measurements, report_time=now, per_request=8)
    assert (summary.uploaded, summary.rejected) == (REPORTS, [])

    start = now - now % PRECISION - PRECISION
    created = _admin(
        urls["collector"],
        "POST",
        "/collections",
        json={
            "task_id": task_id,
            "query": {"type": "time_interval", "start": start, "duration": 3 * PRECISION},
        },
    )
    assert created.status_code == 201, created.text
    job = created.json()["collection_job_id"]
    deadline = time.monotonic() + 120
    body: dict[str, Any] = {}
    while time.monotonic() < deadline:
        body = _admin(urls["collector"], "GET", f"/collections/{job}").json()
        if body["state"] in ("complete", "failed"):
            break
        time.sleep(0.3)
    logs = "\n".join(s.tail() for s in services["services"])
    assert body.get("state") == "complete", f"{body}\n{logs}"
    counts = Counter(measurements)
    assert (body["result"], body["report_count"]) == ([counts[b] for b in range(4)], REPORTS)

    # Both aggregators opted in, with the same configuration bytes.
    for role in ("leader", "helper"):
        task = _admin(urls[role], "GET", f"/internal/tasks/{task_id}").json()
        assert task["taskprov"] is True and task["role"] == role
        assert task["task_configuration"] == task_configuration
    # The collector deleted the finished job at the leader (DAP-19 §4.6.1).
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        stats = _admin(urls["leader"], "GET", f"/internal/tasks/{task_id}/stats").json()
        if stats["collection_jobs"].get("deleted") == 1:
            break
        time.sleep(0.3)
    assert stats["collection_jobs"].get("deleted") == 1, stats
