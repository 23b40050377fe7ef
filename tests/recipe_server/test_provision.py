"""Publishing against real in-process leader, helper and collector apps (no fakes)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from services.aggregator.app import create_app as aggregator_app
from services.aggregator.settings import AggregatorSettings
from services.collector.app import create_app as collector_app
from services.collector.settings import CollectorSettings
from services.recipe_server.app import create_app
from shared.dap.messages import HpkeConfigList
from shared.dap.task import b64url_decode
from shared.recipe.log import LogVerifier, SignedTreeHead
from tests.recipe.helpers import draft_json
from tests.recipe_server.conftest import Router, auth, make_settings

ADMIN = "admin-token-0123456789abcdef"


@pytest.fixture
def parties(tmp_path: Path) -> Iterator[dict[str, TestClient]]:
    with ExitStack() as stack:
        apps: dict[str, TestClient] = {}
        for name in ("leader", "helper"):
            settings = AggregatorSettings(
                database_url=f"sqlite:///{tmp_path / name}.sqlite3",
                admin_token=ADMIN,  # type: ignore[arg-type]
                run_drivers=False,
            )
            apps[f"{name}.test"] = stack.enter_context(TestClient(aggregator_app(settings)))
        collector = CollectorSettings(
            database_url=f"sqlite:///{tmp_path / 'collector'}.sqlite3",
            admin_token=ADMIN,  # type: ignore[arg-type]
        )
        apps["collector.test"] = stack.enter_context(
            TestClient(collector_app(collector, run_poller=False))
        )
        yield apps


def _server(tmp_path: Path, parties: dict[str, TestClient], **overrides: Any) -> TestClient:
    http = httpx.Client(transport=Router(parties), timeout=10)
    settings = make_settings(tmp_path, **overrides)
    return TestClient(create_app(settings, http=http))


def test_publish_provisions_the_task_everywhere(
    tmp_path: Path, parties: dict[str, TestClient]
) -> None:
    with _server(tmp_path, parties) as server:
        r = server.post("/recipes", json=draft_json(), headers=auth())
        assert r.status_code == 201, r.text
        body = r.json()
        key = b64url_decode(server.get("/keys").json()["keys"][0]["public_key"], "k")
    recipe = body["signed_recipe"]["recipe"]
    task_id = recipe["task"]["task_id"]
    admin = {"Authorization": f"Bearer {ADMIN}"}
    for host, role in (("leader.test", "leader"), ("helper.test", "helper")):
        task = parties[host].get(f"/internal/tasks/{task_id}", headers=admin).json()
        assert task["role"] == role
        assert task["min_batch_size"] == recipe["min_batch_size"]
        assert task["vdaf"]["type"] == recipe["task"]["vdaf"]["type"] == "Prio3MultiHotHistogram"
        assert task["vdaf"]["length"] == recipe["task"]["vdaf"]["length"]
        # The recipe carries the aggregator's HPKE configs as the aggregator serves them.
        served = parties[host].get("/hpke_config", params={"task_id": task_id}).content
        assert b64url_decode(recipe["task"][f"{role}_hpke_configs"], "c") == served
        HpkeConfigList.decode(served)
    verifier = LogVerifier(key)
    verifier.verify_recipe(
        body["signed_recipe"],
        key,
        body["leaf_index"],
        [b64url_decode(p, "p") for p in body["inclusion_proof"]],
        SignedTreeHead.model_validate(body["tree_head"]),
    )


def test_existing_task_is_reused_and_checked(
    tmp_path: Path, parties: dict[str, TestClient]
) -> None:
    with _server(tmp_path, parties) as server:
        first = server.post("/recipes", json=draft_json(), headers=auth()).json()
        task_id = first["signed_recipe"]["recipe"]["task"]["task_id"]
        doc = draft_json(version=2)
        doc["task"] = {"task_id": task_id}
        r = server.post("/recipes", json=doc, headers=auth())
        assert r.status_code == 201, r.text
        assert r.json()["signed_recipe"]["recipe"]["task"]["task_id"] == task_id
        # Another B than the task's is refused by the check.
        doc = draft_json(
            version=3, min_batch_size=first["signed_recipe"]["recipe"]["min_batch_size"] + 1
        )
        doc["task"] = {"task_id": task_id}
        r = server.post("/recipes", json=doc, headers=auth())
        assert r.status_code == 502 and "min_batch_size" in r.json()["title"]


def test_wrong_admin_token_is_a_provisioning_failure(
    tmp_path: Path, parties: dict[str, TestClient]
) -> None:
    with _server(tmp_path, parties, admin_token="wrong-admin-token-0123456789") as server:
        r = server.post("/recipes", json=draft_json(), headers=auth())
        assert r.status_code == 502
        assert "collector refused" in r.json()["title"]
        assert server.get("/recipes").json()["recipes"] == []
