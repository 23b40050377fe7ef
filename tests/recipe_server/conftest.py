"""Recipe server fixtures: settings on a temporary SQLite file, a fake provisioner (unit tests
only), and a transport that routes a sync httpx client to in-process ASGI apps."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from services.common.clock import TestClock
from services.recipe_server.app import create_app
from services.recipe_server.provision import (
    ExistingTask,
    NewTask,
    ProvisionError,
    TaskMissingError,
    TaskRequest,
)
from services.recipe_server.settings import RecipeServerSettings
from shared.b64url import b64url_encode
from shared.dap.ids import TaskId
from tests.recipe.helpers import hpke_list

ANALYST_TOKEN = "analyst-token-0123456789abcdef"
KEYBOARD_TOKEN = "keyboard-team-token-0123456789"
SEED = b64url_encode(bytes(range(32)))
#: The provisioning token each DAP party gives the recipe server (never its admin token).
PROVISIONER_TOKENS = {
    "leader": "leader-provisioner-token-0123",
    "helper": "helper-provisioner-token-0123",
    "collector": "collector-provisioner-token-0123",
}
LEADER = "https://leader.test"
HELPER = "https://helper.test"
ISSUER = "https://issuer.test"
#: The key id the operator pins for ISSUER (any 32 bytes: no token is verified here).
ISSUER_KEY_ID = b64url_encode(hashlib.sha256(b"issuer.test key").digest())


def auth(token: str = ANALYST_TOKEN) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def make_settings(tmp_path: Path, **overrides: Any) -> RecipeServerSettings:
    values: dict[str, Any] = {
        "database_url": f"sqlite:///{tmp_path / 'recipes.sqlite3'}",
        "signing_key": SEED,
        "analyst_token": ANALYST_TOKEN,
        "analysts": [
            {
                "name": "keyboard-team",
                "token_sha256": hashlib.sha256(KEYBOARD_TOKEN.encode()).hexdigest(),
                "analysis_prefixes": ["keyboard."],
            }
        ],
        "leader_url": LEADER,
        "helper_url": HELPER,
        "collector_url": "https://collector.test",
        **{f"{party}_provisioner_token": t for party, t in PROVISIONER_TOKENS.items()},
        "token_issuer_url": ISSUER,
        "token_key_ids": [ISSUER_KEY_ID],
    }
    values.update(overrides)
    return RecipeServerSettings(**values)


@dataclass
class FakeProvisioner:
    """Stands in for the DAP parties in unit tests; the real path is tested in test_provision.

    Tasks it created are known to `existing` with their binding; any other id is an old
    unbound task (as `sagg task create` makes), unless listed in `missing`.
    """

    leader_url: str = LEADER
    helper_url: str = HELPER
    created: list[TaskRequest] = field(default_factory=list)
    tasks: dict[str, NewTask] = field(default_factory=dict)
    checked: list[tuple[str, TaskRequest]] = field(default_factory=list)
    missing: set[str] = field(default_factory=set)
    fail: str | None = None

    def new_task_id(self) -> str:
        return TaskId.random().to_b64url()

    def hpke_configs(self) -> tuple[str, str]:
        if self.fail:
            raise ProvisionError(self.fail)
        return hpke_list(1), hpke_list(2)

    def create(self, task: NewTask) -> None:
        if self.fail:
            raise ProvisionError(self.fail)
        self.created.append(task.request)
        self.tasks[task.task_id] = task

    def existing(self, task_id: str, request: TaskRequest) -> ExistingTask:
        if self.fail:
            raise ProvisionError(self.fail)
        if task_id in self.missing:
            raise TaskMissingError(f"the leader does not know task {task_id}")
        self.checked.append((task_id, request))
        made = self.tasks.get(task_id)
        if made is None:
            return ExistingTask(task_id, 1_800_000_000, None, None, hpke_list(1), hpke_list(2))
        return ExistingTask(
            task_id,
            made.request.expiration(made.now),
            made.recipe_digest,
            made.tokens,
            hpke_list(1),
            hpke_list(2),
        )


@pytest.fixture
def provisioner() -> FakeProvisioner:
    return FakeProvisioner()


@pytest.fixture
def clock() -> TestClock:
    return TestClock()


@pytest.fixture
def client(tmp_path: Path, provisioner: FakeProvisioner, clock: TestClock) -> Iterator[TestClient]:
    app = create_app(make_settings(tmp_path), provisioner=provisioner, clock=clock)
    with TestClient(app) as c:
        yield c


class Router(httpx.BaseTransport):
    """Sends each request to the in-process app serving its host."""

    def __init__(self, apps: dict[str, TestClient]) -> None:
        self.apps = apps

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        target = self.apps[request.url.host]
        headers = {k: v for k, v in request.headers.items() if k not in ("host", "content-length")}
        response = target.request(
            request.method,
            request.url.raw_path.decode(),
            headers=headers,
            content=request.read(),
        )
        return httpx.Response(
            response.status_code, headers=response.headers, content=response.content
        )
