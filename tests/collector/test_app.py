"""The collector's HTTP API end to end against a fake leader (poller running in the app)."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from services.collector.app import create_app
from services.collector.settings import CollectorSettings
from services.collector.store import open_store
from services.common.provisioning import new_configuration
from shared import hpke
from shared.b64url import b64url_decode, b64url_encode
from shared.dap.messages import HpkeConfig
from shared.dap.problems import ProblemType
from shared.dap.task import AggregatorNoise, CollectorTask, CollectorTaskInfo
from shared.vdaf.spec import VdafSpec
from tests.collector.fakes import FakeLeader
from tests.collector.helpers import AUTH, make_task

ADMIN = "admin-token-0123456789abcdef"
HEADERS = {"Authorization": f"Bearer {ADMIN}"}


class Api:
    def __init__(self, client: TestClient, leader: FakeLeader) -> None:
        self.client = client
        self.leader = leader

    def wait(self, job_id: str, timeout: float = 20.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            body: dict[str, Any] = self.client.get(f"/collections/{job_id}", headers=HEADERS).json()
            if body["state"] != "pending":
                return body
            time.sleep(0.02)
        raise AssertionError("collection job still pending")


@pytest.fixture
def api(tmp_path: Path) -> Iterator[Api]:
    task = make_task()
    leader = FakeLeader(task.id, task.vdaf.instance(), AUTH, [0, 1, 1, 3, 3, 3])
    settings = CollectorSettings(
        database_url=f"sqlite:///{tmp_path / 'c.sqlite3'}",
        admin_token=ADMIN,  # type: ignore[arg-type]
        poll_interval=0.01,
        max_backoff=0.05,
    )
    app = create_app(settings, transport=httpx.MockTransport(leader))
    with TestClient(app) as client:
        yield Api(client, leader)


def _put_task(api: Api, task: Any, headers: dict[str, str] = HEADERS) -> httpx.Response:
    response: httpx.Response = api.client.put(
        f"/internal/tasks/{task.task_id}", content=task.model_dump_json(), headers=headers
    )
    return response


def test_healthz_needs_no_token(api: Api) -> None:
    response = api.client.get("/healthz")
    assert (response.status_code, response.json()) == (200, {"status": "ok"})


def test_task_provisioning_is_idempotent_and_returns_the_hpke_config(api: Api) -> None:
    task = make_task()
    task = task.model_copy(update={"task_id": api.leader.task_id.to_b64url()})
    first = _put_task(api, task)
    assert first.status_code == 201
    config = HpkeConfig.decode(b64url_decode(first.json()["collector_hpke_config"], "config"))
    assert (config.kem_id, config.kdf_id, config.aead_id) == (0x20, 1, 1)
    again = _put_task(api, task)
    assert (again.status_code, again.json()) == (200, first.json())
    other = task.model_copy(update={"time_precision": 60})
    conflict = _put_task(api, other)
    assert conflict.status_code == 409
    assert conflict.headers["content-type"] == "application/problem+json"


def test_auth_and_bad_input(api: Api) -> None:
    task = make_task()
    assert _put_task(api, task, headers={}).status_code == 401
    assert _put_task(api, task, headers={"Authorization": "Bearer wrong-token"}).status_code == 403
    bad = api.client.put(f"/internal/tasks/{task.task_id}", content=b"{", headers=HEADERS)
    assert bad.status_code == 400 and "JSON" in bad.json()["title"]
    mismatch = api.client.put(
        f"/internal/tasks/{make_task().task_id}", content=task.model_dump_json(), headers=HEADERS
    )
    assert mismatch.status_code == 400
    invalid = api.client.put(
        f"/internal/tasks/{task.task_id}",
        json={**task.model_dump(mode="json"), "vdaf": {"type": "Prio3Sum"}},
        headers=HEADERS,
    )
    assert invalid.status_code == 400 and "bits" in invalid.json()["title"]
    assert api.client.post("/collections", json={}, headers={}).status_code == 401
    unknown = api.client.post(
        "/collections",
        json={"task_id": task.task_id, "query": {"type": "current_batch"}},
        headers=HEADERS,
    )
    assert unknown.status_code == 404
    assert api.client.get("/collections/nope", headers=HEADERS).status_code == 404


def test_collection_runs_to_completion(api: Api) -> None:
    task = make_task().model_copy(update={"task_id": api.leader.task_id.to_b64url()})
    created = _put_task(api, task)
    api.leader.collector_config = HpkeConfig.decode(
        b64url_decode(created.json()["collector_hpke_config"], "config")
    )
    api.leader.pending_polls = 3
    misaligned = api.client.post(
        "/collections",
        json={
            "task_id": task.task_id,
            "query": {"type": "time_interval", "start": 1, "duration": 3600},
        },
        headers=HEADERS,
    )
    assert misaligned.status_code == 400 and "multiples" in misaligned.json()["title"]
    wrong_type = api.client.post(
        "/collections",
        json={"task_id": task.task_id, "query": {"type": "current_batch"}},
        headers=HEADERS,
    )
    assert wrong_type.status_code == 400

    response = api.client.post(
        "/collections",
        json={
            "task_id": task.task_id,
            "query": {"type": "time_interval", "start": 7200, "duration": 3600},
        },
        headers=HEADERS,
    )
    assert response.status_code == 201
    job_id = response.json()["collection_job_id"]
    body = api.wait(job_id)
    assert body["state"] == "complete", body
    assert body["result"] == [1, 2, 0, 3]
    assert body["report_count"] == 6
    assert body["vdaf"] == {"type": "Prio3Histogram", "length": 4, "chunk_length": 2}
    assert set(body["interval"]) == {"start", "duration"}
    assert "batch_id" not in body and "error" not in body


def test_leader_refusal_is_reported_as_failed(api: Api) -> None:
    task = make_task().model_copy(update={"task_id": api.leader.task_id.to_b64url()})
    _put_task(api, task)
    api.leader.put_problem = ProblemType.BATCH_INVALID
    response = api.client.post(
        "/collections",
        json={
            "task_id": task.task_id,
            "query": {"type": "time_interval", "start": 0, "duration": 3600},
        },
        headers=HEADERS,
    )
    body = api.wait(response.json()["collection_job_id"])
    assert body["state"] == "failed" and "batchInvalid" in body["error"]


def test_task_definition_is_readable_without_its_secrets(api: Api, tmp_path: Path) -> None:
    """`GET /internal/tasks/{id}`: what the analysis needs (VDAF, B, noise), the public HPKE
    config; never the leader token or the HPKE private key."""
    noise = {"mechanism": "discrete_gaussian", "sigma": "8.5402"}
    task = make_task().model_copy(
        update={
            "min_batch_size": 50,
            "aggregator_noise": AggregatorNoise.model_validate(noise),
        }
    )
    created = _put_task(api, task)
    url = f"/internal/tasks/{task.task_id}"
    response = api.client.get(url, headers=HEADERS)
    assert response.status_code == 200
    body = response.json()
    assert body["collector_hpke_config"] == created.json()["collector_hpke_config"]
    info = CollectorTaskInfo.model_validate(
        {k: v for k, v in body.items() if k != "collector_hpke_config"}
    )
    assert info == task.info() and info.aggregator_noise == task.aggregator_noise
    assert info.min_batch_size == 50 and info.vdaf == task.vdaf
    assert "collector_auth_token" not in body and AUTH not in response.text
    store = open_store(f"sqlite:///{tmp_path / 'c.sqlite3'}")  # the fixture's database
    try:
        stored = store.load_task(task.task_id)
    finally:
        store.close()
    assert stored is not None and stored.hpke_private_key not in response.text
    assert api.client.get(url, headers={}).status_code == 401
    assert api.client.get(url, headers={"Authorization": "Bearer wrong"}).status_code == 403
    unknown = api.client.get(f"/internal/tasks/{make_task().task_id}", headers=HEADERS)
    assert unknown.status_code == 404
    assert unknown.headers["content-type"] == "application/problem+json"
    assert "unknown task" in unknown.json()["title"]


def _taskprov_task() -> CollectorTask:
    """A DAP-19 taskprov task: its id is SHA-256(SHA-256("dap-taskprov task id") || config)."""
    config = new_configuration(
        VdafSpec(version="VDAF-20", type="Prio3Count"),
        "time_interval",
        3,
        3600,
        ("https://leader.test/dap", "https://helper.test"),
        None,
    )
    label = hashlib.sha256(b"dap-taskprov task id").digest()
    return CollectorTask(
        task_id=b64url_encode(hashlib.sha256(label + config).digest()),
        leader_endpoint="https://leader.test/dap",
        query_type="time_interval",  # type: ignore[arg-type]
        vdaf=VdafSpec(version="VDAF-20", type="Prio3Count"),
        dap="dap-19",
        task_configuration=b64url_encode(config),
        taskprov=True,
        collector_auth_token=AUTH,
        min_batch_size=3,
        time_precision=3600,
    )


def test_a_taskprov_task_takes_the_configured_key(tmp_path: Path) -> None:
    """Digest §11: the aggregators seal a taskprov task's shares to the one collector config
    their operators configured, so the collector provisions it with that key pair."""
    keypair = hpke.generate_keypair(7)
    settings = CollectorSettings(
        database_url=f"sqlite:///{tmp_path / 'c.sqlite3'}",
        admin_token=ADMIN,  # type: ignore[arg-type]
        taskprov_hpke_secret=b64url_encode(keypair.private_key_bytes()),  # type: ignore[arg-type]
        taskprov_hpke_config_id=7,
    )
    expected = HpkeConfig(7, keypair.kem_id, keypair.kdf_id, keypair.aead_id, keypair.public_key)
    with TestClient(create_app(settings, run_poller=False)) as client:
        for _ in range(2):
            task = _taskprov_task()
            response = client.put(
                f"/internal/tasks/{task.task_id}", content=task.model_dump_json(), headers=HEADERS
            )
            assert response.status_code == 201, response.text
            assert response.json()["collector_hpke_config"] == b64url_encode(expected.encode())
        # Another task still gets a key of its own.
        plain = make_task()
        response = client.put(
            f"/internal/tasks/{plain.task_id}", content=plain.model_dump_json(), headers=HEADERS
        )
        assert response.json()["collector_hpke_config"] != b64url_encode(expected.encode())


def test_no_taskprov_task_without_the_key(api: Api) -> None:
    task = _taskprov_task()
    response = _put_task(api, task)
    assert response.status_code == 400 and "taskprov_hpke_secret" in response.json()["title"]
    with pytest.raises(ValueError, match="taskprov_hpke_secret"):
        CollectorSettings(
            admin_token=ADMIN,  # type: ignore[arg-type]
            taskprov_hpke_secret=b64url_encode(b"short"),  # type: ignore[arg-type]
        )
