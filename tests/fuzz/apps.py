"""In-process instances of every sagg service, with known secrets and one provisioned object
each, for the HTTP fuzzers (hypothesis and schemathesis)."""

from __future__ import annotations

import hashlib
import itertools
import json
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from fastapi import FastAPI
from fastapi.testclient import TestClient

from client_sdk.manufacturer import ManufacturerCA, SimulatedDevice
from services.collector.app import create_app as create_collector
from services.collector.settings import CollectorSettings
from services.common.clock import TestClock
from services.common.db import Database
from services.recipe_server.app import create_app as create_recipe_server
from services.recipe_server.provision import ExistingTask, NewTask, TaskMissingError, TaskRequest
from services.recipe_server.settings import RecipeServerSettings
from services.token_issuer.app import create_app as create_token_issuer
from services.token_issuer.keys import KeySchedule, KeyStore
from services.token_issuer.settings import TokenIssuerSettings
from shared.b64url import b64url_encode
from shared.dap.ids import TaskId
from shared.dap.messages import HpkeConfig, HpkeConfigList
from shared.privacypass.issuance import IssuerKey
from tests.adversaries.harness import ADMIN_TOKEN, NOW, Deployment, Task, deploy
from tests.recipe.helpers import draft_json

COLLECTOR_ADMIN = "fuzz-collector-admin-token-0123"
ANALYST_TOKEN = "fuzz-analyst-token-0123456789"
RECIPE_PROVISIONER = "fuzz-recipe-provisioner-token-0123"
ATTESTER_SECRET = "fuzz-attester-secret-0123456789"


def _hpke_list(seed: int) -> str:
    config = HpkeConfig(seed, 0x20, 1, 1, bytes([seed]) * 32)
    return b64url_encode(HpkeConfigList((config,)).encode())


class FakeProvisioner:
    """The DAP parties as the recipe server sees them, without the network."""

    leader_url = "https://leader.test"
    helper_url = "https://helper.test"

    def __init__(self) -> None:
        self.created: dict[str, NewTask] = {}

    def new_task_id(self) -> str:
        return TaskId.random().to_b64url()

    def hpke_configs(self) -> tuple[str, str]:
        return _hpke_list(1), _hpke_list(2)

    def create(self, task: NewTask) -> None:
        self.created[task.task_id] = task

    def existing(self, task_id: str, request: TaskRequest) -> ExistingTask:
        task = self.created.get(task_id)
        if task is None:
            raise TaskMissingError(f"unknown task {task_id}")
        return ExistingTask(
            task_id, None, task.recipe_digest, task.tokens, _hpke_list(1), _hpke_list(2)
        )


@dataclass
class Services:
    """Every service, with what a legitimate caller would know."""

    aggregators: Deployment
    collector: TestClient
    collector_task: dict[str, Any]
    recipe_server: TestClient
    recipe_id: str
    issuer: TestClient
    device: SimulatedDevice
    device_id: str

    @property
    def leader(self) -> TestClient:
        return self.aggregators.leader

    @property
    def helper(self) -> TestClient:
        return self.aggregators.helper


def _unreachable(_: httpx.Request) -> httpx.Response:
    return httpx.Response(503)


def collector_app(tmp: Path) -> FastAPI:
    settings = CollectorSettings(
        database_url=f"sqlite:///{tmp / 'collector.db'}",
        admin_token=COLLECTOR_ADMIN,  # type: ignore[arg-type]
    )
    return create_collector(settings, transport=httpx.MockTransport(_unreachable), run_poller=False)


def recipe_server_app(tmp: Path) -> FastAPI:
    settings = RecipeServerSettings(
        database_url=f"sqlite:///{tmp / 'recipes.db'}",
        signing_key=b64url_encode(bytes(range(32))),  # type: ignore[arg-type]
        analyst_token=ANALYST_TOKEN,  # type: ignore[arg-type]
        leader_url=FakeProvisioner.leader_url,
        helper_url=FakeProvisioner.helper_url,
        collector_url="https://collector.test",
        leader_provisioner_token=RECIPE_PROVISIONER,  # type: ignore[arg-type]
        helper_provisioner_token=RECIPE_PROVISIONER,  # type: ignore[arg-type]
        collector_provisioner_token=RECIPE_PROVISIONER,  # type: ignore[arg-type]
        token_issuer_url="https://issuer.test",
        token_key_ids=[b64url_encode(bytes(32))],
    )
    return create_recipe_server(settings, provisioner=FakeProvisioner(), clock=TestClock(NOW))


_KEYS: list[IssuerKey] = []


def _issuer_keys() -> list[IssuerKey]:
    while len(_KEYS) < 3:
        key = IssuerKey.generate()
        ids = {k.token_key.truncated_token_key_id for k in _KEYS}
        if key.token_key.truncated_token_key_id not in ids:
            _KEYS.append(key)
    return _KEYS


def token_issuer_app(tmp: Path, ca: ManufacturerCA) -> FastAPI:
    pool = itertools.cycle(_issuer_keys())

    def keys(db: Database, schedule: KeySchedule, clock: Any) -> KeyStore:
        return KeyStore(db, schedule, clock, generate=pool.__next__)

    settings = TokenIssuerSettings(
        role="joint",
        issuer_database_url=f"sqlite:///{tmp / 'issuer.db'}",
        attester_database_url=f"sqlite:///{tmp / 'attester.db'}",
        attester_secret=ATTESTER_SECRET,  # type: ignore[arg-type]
        quota_tokens=1000,
    )
    return create_token_issuer(
        settings, clock=TestClock(NOW), trust_anchors=[ca.certificate], key_store_factory=keys
    )


def collector_task_json(task_id: str) -> dict[str, Any]:
    return {
        "task_id": task_id,
        "leader_endpoint": "http://leader.test/",
        "query_type": "time_interval",
        "vdaf": {"type": "Prio3Count"},
        "collector_auth_token": "fuzz-collector-auth-token-0123",
        "time_precision": 3600,
    }


@contextmanager
def services(tmp: Path) -> Iterator[Services]:
    """Start everything, provision one object per service, tear down afterwards."""
    with ExitStack() as stack:
        aggregators = deploy(tmp, Task({"type": "Prio3Count"}, min_batch_size=2))
        aggregators.upload_measurements([1, 0])
        collector = stack.enter_context(TestClient(collector_app(tmp)))
        task = collector_task_json(TaskId.random().to_b64url())
        r = collector.put(
            f"/internal/tasks/{task['task_id']}",
            json=task,
            headers={"Authorization": f"Bearer {COLLECTOR_ADMIN}"},
        )
        assert r.status_code == 201, r.text
        recipes = stack.enter_context(TestClient(recipe_server_app(tmp)))
        draft = draft_json(recipe_id="keyboard.fuzz", analysis_id="keyboard.fuzz")
        r = recipes.post(
            "/recipes", json=draft, headers={"Authorization": f"Bearer {ANALYST_TOKEN}"}
        )
        assert r.status_code == 201, r.text
        ca = ManufacturerCA.generate(now=NOW)
        issuer = stack.enter_context(TestClient(token_issuer_app(tmp, ca)))
        device = SimulatedDevice.manufacture(ca)
        r = issuer.post("/attester/enroll", json={"certificate": device.certificate_pem()})
        assert r.status_code == 201, r.text
        yield Services(
            aggregators,
            collector,
            task,
            recipes,
            "keyboard.fuzz",
            issuer,
            device,
            json.loads(r.text)["device_id"],
        )


def sha256_hex(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


# --- credentials of the services' APIs, as header strategies' building blocks ---


def admin_auth(_: Services) -> dict[str, str]:
    return {"Authorization": f"Bearer {ADMIN_TOKEN}"}


def collector_admin_auth(_: Services) -> dict[str, str]:
    return {"Authorization": f"Bearer {COLLECTOR_ADMIN}"}


def analyst_auth(_: Services) -> dict[str, str]:
    return {"Authorization": f"Bearer {ANALYST_TOKEN}"}
