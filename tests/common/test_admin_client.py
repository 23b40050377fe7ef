"""The admin-API client against a real collector app: what each answer of the wire becomes."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient

from services.collector.app import create_app
from services.collector.settings import CollectorSettings
from services.common.admin_client import (
    AdminClient,
    AsyncAdminClient,
    Party,
    ProvisionError,
    TaskMissingError,
)
from services.common.http import http_client
from shared.dap.ids import TaskId
from shared.transport import TransportPolicy
from tests.collector.helpers import make_task

ADMIN = "admin-token-0123456789abcdef"
BASE = "http://testserver"


@pytest.fixture
def collector(tmp_path: Path) -> Iterator[TestClient]:
    settings = CollectorSettings(
        database_url=f"sqlite:///{tmp_path / 'c.sqlite3'}",
        admin_token=ADMIN,  # type: ignore[arg-type]
    )
    with TestClient(create_app(settings, run_poller=False)) as client:
        yield client


def test_put_is_idempotent_and_a_different_task_is_refused(collector: TestClient) -> None:
    admin = AdminClient(collector)
    party = Party("collector", BASE, ADMIN)
    task = make_task()
    first = admin.put_task(party, task.task_id, task.model_dump_json())
    assert "collector_hpke_config" in first
    # 200 with the same answer: a retried provisioning is harmless.
    assert admin.put_task(party, task.task_id, task.model_dump_json()) == first
    other = task.model_copy(update={"time_precision": 60})
    with pytest.raises(ProvisionError, match=r"^the collector refused the task: HTTP 409"):
        admin.put_task(party, task.task_id, other.model_dump_json())


def test_get_reads_the_task_and_names_a_missing_one(collector: TestClient) -> None:
    admin = AdminClient(collector)
    party = Party("collector", BASE, ADMIN)
    task = make_task()
    admin.put_task(party, task.task_id, task.model_dump_json())
    view = admin.get_task(party, task.task_id)
    assert (view["task_id"], view["time_precision"]) == (task.task_id, task.time_precision)
    assert "collector_auth_token" not in view
    unknown = TaskId.random().to_b64url()
    with pytest.raises(TaskMissingError, match=f"the collector does not know task {unknown}"):
        admin.get_task(party, unknown)


def test_each_party_is_asked_with_its_own_token(collector: TestClient) -> None:
    task = make_task()
    stranger = Party("collector", BASE, "not-the-admin-token")
    with pytest.raises(ProvisionError, match="HTTP 403") as refused:
        AdminClient(collector).put_task(stranger, task.task_id, task.model_dump_json())
    assert not isinstance(refused.value, TaskMissingError)
    assert "not-the-admin-token" not in repr(stranger)


def test_an_unreachable_or_refused_url_is_one_line() -> None:
    with http_client(TransportPolicy(), timeout=5.0) as http:
        admin = AdminClient(http)
        # Nothing listens on port 1; a plain-http host off loopback is the policy's refusal.
        with pytest.raises(
            ProvisionError, match=r"^cannot reach the leader at http://127\.0\.0\.1:1"
        ):
            admin.get_task(Party("leader", "http://127.0.0.1:1", "t"), "x")
        with pytest.raises(ProvisionError, match=r"plain http:// to leader\.example is refused"):
            admin.get_task(Party("leader", "http://leader.example", "t"), "x")


def test_the_async_client_speaks_the_same_wire(tmp_path: Path) -> None:
    settings = CollectorSettings(
        database_url=f"sqlite:///{tmp_path / 'c.sqlite3'}",
        admin_token=ADMIN,  # type: ignore[arg-type]
    )
    app = create_app(settings, run_poller=False)
    task = make_task()
    party = Party("collector", BASE, ADMIN)

    async def provision() -> tuple[dict[str, object], dict[str, object]]:
        async with (
            app.router.lifespan_context(app),
            httpx.AsyncClient(transport=httpx.ASGITransport(app=app)) as http,
        ):
            admin = AsyncAdminClient(http)
            first = await admin.put_task(party, task.task_id, task.model_dump_json())
            again = await admin.put_task(party, task.task_id, task.model_dump_json())
            with pytest.raises(ProvisionError, match="HTTP 409"):
                other = task.model_copy(update={"time_precision": 60})
                await admin.put_task(party, task.task_id, other.model_dump_json())
            return first, again

    first, again = asyncio.run(provision())
    assert "collector_hpke_config" in first and again == first
