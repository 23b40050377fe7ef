"""Least privilege (issue 12, item 3): no API hands out a secret, and the recipe server's
credentials can provision tasks and nothing else.

The attackers: whoever holds the recipe server's credentials (a compromised recipe server, or
an analyst who got its environment), reading a task's VDAF verify key, deleting tasks, rotating
keys or reading metrics; and anyone who can call an API at all, looking for a secret in any
response. Every service runs in process through its real `create_app`.
"""

from __future__ import annotations

import base64
import os
import re
import subprocess
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from cryptography.hazmat.primitives import serialization
from fastapi import FastAPI
from fastapi.routing import iter_route_contexts
from fastapi.testclient import TestClient
from starlette.routing import Mount, Route

from deploy.interop import aggregator as interop_aggregator
from deploy.interop import collector as interop_collector
from services.aggregator.app import create_app as create_aggregator
from services.aggregator.settings import AggregatorSettings
from services.collector.app import create_app as create_collector
from services.collector.settings import CollectorSettings
from services.collector.store import open_store
from shared.b64url import b64url_encode
from shared.dap.ids import CollectionJobId, TaskId
from tests.adversaries.harness import ADMIN_TOKEN, AGGREGATOR_TOKEN, COLLECTOR_TOKEN, Task
from tests.fuzz.apps import (
    ANALYST_TOKEN,
    ATTESTER_SECRET,
    COLLECTOR_ADMIN,
    RECIPE_PROVISIONER,
    Services,
    _issuer_keys,
    services,
)

REPO = Path(__file__).resolve().parents[2]
ADMIN = "operator-admin-token-0123456789"
PROVISIONER = "recipe-server-provisioner-token-0123"


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def _aggregator(tmp_path: Path, name: str) -> TestClient:
    settings = AggregatorSettings(
        database_url=f"sqlite:///{tmp_path / name}.sqlite3",
        admin_token=ADMIN,  # type: ignore[arg-type]
        provisioner_token=PROVISIONER,  # type: ignore[arg-type]
        run_drivers=False,
    )
    return TestClient(create_aggregator(settings))


def _collector(tmp_path: Path) -> TestClient:
    settings = CollectorSettings(
        database_url=f"sqlite:///{tmp_path / 'collector'}.sqlite3",
        admin_token=ADMIN,  # type: ignore[arg-type]
        provisioner_token=PROVISIONER,  # type: ignore[arg-type]
    )
    return TestClient(create_collector(settings, run_poller=False))


# --- the recipe server's credential -----------------------------------------------------------


@pytest.mark.parametrize("role", ["leader", "helper"])
def test_the_provisioning_credential_only_creates_and_confirms_aggregator_tasks(
    tmp_path: Path, role: str
) -> None:
    task = Task({"type": "Prio3Count"})
    tid = task.task_id.to_b64url()
    path = f"/internal/tasks/{tid}"
    with _aggregator(tmp_path, role) as aggregator:
        created = aggregator.put(path, json=task.definition(role), headers=bearer(PROVISIONER))
        assert created.status_code == 201, created.text
        # A retry confirms (idempotent), and reading the task back shows its public parameters
        # only: what the recipe server checks before binding a recipe to it.
        again = aggregator.put(path, json=task.definition(role), headers=bearer(PROVISIONER))
        assert again.status_code == 200
        shown = aggregator.get(path, headers=bearer(PROVISIONER))
        assert shown.status_code == 200 and shown.json()["min_batch_size"] == 1
        for secret in (b64url_encode(task.verify_key), AGGREGATOR_TOKEN, COLLECTOR_TOKEN):
            assert secret not in shown.text
        assert "vdaf_verify_key" not in shown.json()

        denied = [
            aggregator.delete(path, headers=bearer(PROVISIONER)),
            aggregator.get(f"{path}/stats", headers=bearer(PROVISIONER)),
            aggregator.post("/internal/hpke_keys/rotate", headers=bearer(PROVISIONER)),
            aggregator.get("/metrics", headers=bearer(PROVISIONER)),
        ]
        assert [r.status_code for r in denied] == [403] * len(denied)
        # The operator's token still does all of it.
        assert aggregator.get(f"{path}/stats", headers=bearer(ADMIN)).status_code == 200
        assert aggregator.get("/metrics", headers=bearer(ADMIN)).status_code == 200
        assert aggregator.delete(path, headers=bearer(ADMIN)).status_code == 204


def test_the_provisioning_credential_only_creates_collector_tasks(tmp_path: Path) -> None:
    tid = TaskId.random().to_b64url()
    task = {
        "task_id": tid,
        "leader_endpoint": "http://leader.test/",
        "query_type": "time_interval",
        "vdaf": {"type": "Prio3Count"},
        "collector_auth_token": COLLECTOR_TOKEN,
        "time_precision": 3600,
    }
    with _collector(tmp_path) as collector:
        created = collector.put(f"/internal/tasks/{tid}", json=task, headers=bearer(PROVISIONER))
        assert created.status_code == 201, created.text
        assert set(created.json()) == {"collector_hpke_config"}
        again = collector.put(f"/internal/tasks/{tid}", json=task, headers=bearer(PROVISIONER))
        assert again.status_code == 200
        query = {"task_id": tid, "query": {"type": "time_interval", "start": 0, "duration": 3600}}
        denied = [
            collector.get(f"/internal/tasks/{tid}", headers=bearer(PROVISIONER)),
            collector.post("/collections", json=query, headers=bearer(PROVISIONER)),
            collector.get(
                f"/collections/{CollectionJobId.random().to_b64url()}",
                headers=bearer(PROVISIONER),
            ),
            collector.get("/metrics", headers=bearer(PROVISIONER)),
        ]
        assert [r.status_code for r in denied] == [403] * len(denied)
        assert collector.post("/collections", json=query, headers=bearer(ADMIN)).status_code == 201


def test_a_party_without_a_provisioning_credential_refuses_every_token_but_the_admin_one(
    tmp_path: Path,
) -> None:
    """Unset, the provisioning surface is off: no default credential opens it."""
    task = Task({"type": "Prio3Count"})
    settings = AggregatorSettings(
        database_url=f"sqlite:///{tmp_path / 'helper'}.sqlite3",
        admin_token=ADMIN,  # type: ignore[arg-type]
        run_drivers=False,
    )
    with TestClient(create_aggregator(settings)) as helper:
        path = f"/internal/tasks/{task.task_id.to_b64url()}"
        body = task.definition("helper")
        assert helper.put(path, json=body, headers=bearer(PROVISIONER)).status_code == 403
        assert helper.put(path, json=body, headers=bearer(ADMIN)).status_code == 201


# --- no route answers a secret ----------------------------------------------------------------


def _encodings(secret: bytes) -> set[str]:
    return {
        b64url_encode(secret),
        base64.b64encode(secret).decode(),
        secret.hex(),
    }


def _known_secrets(s: Services, tmp_path: Path) -> set[str]:
    """Every secret value the services hold, in the encodings a response could carry."""
    found = {
        ADMIN_TOKEN,
        AGGREGATOR_TOKEN,
        COLLECTOR_TOKEN,
        COLLECTOR_ADMIN,
        ANALYST_TOKEN,
        ATTESTER_SECRET,
        RECIPE_PROVISIONER,
        s.collector_task["collector_auth_token"],
    }
    found |= _encodings(s.aggregators.task.verify_key)
    for client in (s.leader, s.helper):
        for record in client.app.state.aggregator.ds.hpke_keys():  # type: ignore[attr-defined]
            found |= _encodings(record.keypair.private_key_bytes())
    store = open_store(f"sqlite:///{tmp_path / 'collector.db'}", None)
    try:
        stored = store.load_task(s.collector_task["task_id"])
        assert stored is not None
        found.add(stored.hpke_private_key)
    finally:
        store.close()
    found |= _encodings(bytes(range(32)))  # the recipe server's signing seed
    for key in _issuer_keys():
        private = key.private_key.to_cryptography()
        numbers = private.private_numbers()
        der = private.private_bytes(
            serialization.Encoding.DER,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        found |= _encodings(der)
        for value in (numbers.d, numbers.p, numbers.q):
            found |= {str(value), f"{value:x}"}
    return found


def _routes(app: FastAPI, prefix: str = "") -> Iterator[tuple[str, str]]:
    """(method, path) of every route, mounted apps included; HEAD only mirrors GET. The
    router's table rather than the OpenAPI document: the aggregator and the recipe server
    publish none, and a route left out of a description must not escape the walk. Routes of
    included routers are listed by `iter_route_contexts`."""
    for context in iter_route_contexts(app.routes):
        route = context.original_route
        if isinstance(route, Mount) and isinstance(route.app, FastAPI):
            yield from _routes(route.app, prefix + route.path)
        elif isinstance(route, Route):
            for method in sorted(context.methods or ()):
                if method != "HEAD":
                    yield method, prefix + str(context.path)


def _fill(path: str, values: dict[str, str]) -> str:
    return re.sub(r"\{(\w+)(:\w+)?\}", lambda m: values.get(m.group(1), "x"), path)


def _secrets_in(response: httpx.Response, known: Iterable[str]) -> list[str]:
    text = response.text + " ".join(f"{k}: {v}" for k, v in response.headers.items())
    # Every secret is 16 characters or more in each encoding: no match happens by chance.
    return [secret[:6] + "..." for secret in known if secret in text]


def test_no_route_of_any_service_answers_a_secret(tmp_path: Path) -> None:
    """Every route of every service, called by its most privileged caller with the ids of
    the objects it holds (and with no or a replayed body), answers no secret it knows."""
    with services(tmp_path) as s:
        known = _known_secrets(s, tmp_path)
        task = s.aggregators.task
        agg_ids = {
            "task_id": task.task_id.to_b64url(),
            "job_id": CollectionJobId.random().to_b64url(),
        }
        calls: list[tuple[str, TestClient, dict[str, str], dict[str, str], dict[str, Any]]] = [
            (
                "leader",
                s.leader,
                agg_ids,
                bearer(ADMIN_TOKEN),
                {"leader": task.definition("leader")},
            ),
            (
                "helper",
                s.helper,
                agg_ids,
                bearer(ADMIN_TOKEN),
                {"helper": task.definition("helper")},
            ),
            (
                "collector",
                s.collector,
                {"task_id": s.collector_task["task_id"], "job_id": "x"},
                bearer(COLLECTOR_ADMIN),
                {"collector": s.collector_task},
            ),
            (
                "recipe-server",
                s.recipe_server,
                {"recipe_id": s.recipe_id, "tree_size": "1"},
                bearer(ANALYST_TOKEN),
                {},
            ),
            ("token-issuer", s.issuer, {}, bearer(ATTESTER_SECRET), {}),
        ]
        leaks: list[str] = []
        for name, client, ids, auth, replay in calls:
            routes = sorted(_routes(client.app), key=lambda r: r[0] == "DELETE")  # type: ignore[arg-type]
            assert routes, name
            for method, template in routes:
                path = _fill(template, ids)
                bodies: list[Any] = [None]
                if method == "PUT" and template.endswith("/internal/tasks/{task_id}"):
                    bodies.append(replay[name])
                for body in bodies:
                    response = client.request(method, path, json=body, headers=auth)
                    leaks += [
                        f"{name} {method} {template}: {x}" for x in _secrets_in(response, known)
                    ]
        assert not leaks, leaks


def test_no_route_of_the_interop_apis_answers_a_secret(tmp_path: Path) -> None:
    """The interop test API takes a task's secrets in (interop draft §4.4.2, §4.5.1) and must
    hand none out, through its own routes or the aggregator's mounted under /dap."""
    verify_key = bytes(range(16))
    leader_token, collector_token = "interop-leader-token-0123", "interop-collector-token-0123"
    known = _encodings(verify_key) | {leader_token, collector_token}
    tid = TaskId.random().to_b64url()
    leaks: list[str] = []
    collector_settings = interop_collector.collector_settings(tmp_path, "127.0.0.1", 0)
    with TestClient(interop_collector.build_collector_app(collector_settings)) as collector:
        added = collector.post(
            "/internal/test/add_task",
            json={
                "task_id": tid,
                "leader": "http://leader.test/",
                "vdaf": {"type": "Prio3Count"},
                "collector_authentication_token": collector_token,
                "query_type": 1,
            },
        )
        assert added.json()["status"] == "success", added.text
        config = added.json()["collector_hpke_config"]
        for method, template in _routes(collector.app):  # type: ignore[arg-type]
            response = collector.request(method, _fill(template, {}), json={"task_id": tid})
            leaks += [f"collector {template}: {x}" for x in _secrets_in(response, known)]
    settings = interop_aggregator.aggregator_settings(tmp_path, "127.0.0.1", 0)
    assert settings.admin_token is not None
    admin = settings.admin_token.get_secret_value()
    known.add(admin)
    with TestClient(interop_aggregator.build_aggregator_app(settings)) as helper:
        added = helper.post(
            "/internal/test/add_task",
            json={
                "task_id": tid,
                "leader": "http://leader.test/",
                "helper": "http://helper.test/",
                "vdaf": {"type": "Prio3Count"},
                "leader_authentication_token": leader_token,
                "role": "helper",
                "vdaf_verify_key": b64url_encode(verify_key),
                "max_batch_query_count": 1,
                "query_type": 1,
                "min_batch_size": 1,
                "time_precision": 3600,
                "collector_hpke_config": config,
            },
        )
        assert added.json()["status"] == "success", added.text
        routes = list(_routes(helper.app))  # type: ignore[arg-type]
        assert ("GET", "/dap/internal/tasks/{task_id}") in routes
        for method, template in routes:
            # With the in-process admin token too: the most privileged caller there is.
            path = _fill(template, {"task_id": tid})
            body = {"task_id": tid, "role": "helper"}
            response = helper.request(method, path, json=body, headers=bearer(admin))
            leaks += [f"helper {method} {template}: {x}" for x in _secrets_in(response, known)]
    assert not leaks, leaks


# --- the aggregator admin token's length ------------------------------------------------------


def test_a_short_aggregator_admin_token_is_refused_at_startup(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SAGG_")}
    env.update(
        PYTHONPATH=str(REPO),
        SAGG_AGGREGATOR_DATABASE_URL=f"sqlite:///{tmp_path / 'leader.sqlite3'}",
        SAGG_AGGREGATOR_ADMIN_TOKEN="hunter2-secret",
    )
    for module in ("services.aggregator", "services.aggregator.drivers"):
        done = subprocess.run(
            [sys.executable, "-m", module],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 2, (module, done.stderr[-500:])
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1, (module, lines[-3:])
        assert "SAGG_AGGREGATOR_ADMIN_TOKEN" in lines[0] and "16 characters" in lines[0]
        assert "hunter2" not in done.stderr  # the value is never echoed
