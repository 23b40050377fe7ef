"""Issue 12 item 2: an analyst, or whoever provisions tasks, cannot choose who is trusted.

Privacy holds with one honest aggregator, and a batch of B reports holds about B devices only
if the token issuer rate-limits them (001 §4.3, §4.6). So the operator, never a recipe's
author, picks the token issuers, leaders and helpers (RFC 9576 §2: origins, here the
aggregators, trust issuers):

- a malicious analyst's draft naming their own issuer (or changing the allowed issuer's keys,
  name or window, or naming a leader or helper) is refused with 422 and the reason, before
  anything is provisioned;
- a task provisioned through an aggregator's admin API with an issuer outside the
  aggregator's own `token_issuers` is refused (400), and not one request ever leaves for that
  URL (a listener records every connection): no SSRF through task definitions.

Tokens under keys the recipe does not pin, and devices refusing unpinned parties, are tested
where those checks live (`tests/aggregator/test_extensions.py`,
`tests/client_sdk/test_device_flow.py`).
"""

from __future__ import annotations

import hashlib
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from pydantic import ValidationError

from services.aggregator.app import create_app as aggregator_app
from services.aggregator.service import Aggregator
from services.aggregator.settings import AggregatorSettings
from services.aggregator.tokens import IssuerNotAllowedError, IssuerUnavailableError
from services.recipe_server.app import create_app as recipe_app
from shared.b64url import b64url_encode
from tests.aggregator import helpers
from tests.recipe.helpers import draft_json
from tests.recipe_server.conftest import (
    ISSUER,
    ISSUER_KEY_ID,
    FakeProvisioner,
    auth,
    make_settings,
)

ATTACKER_KEY_ID = b64url_encode(hashlib.sha256(b"the attacker's issuer key").digest())


class Listener:
    """A TCP listener on loopback that records every connection and answers 503."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.connections = 0
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return  # closed
            # Counted before answering: a client that got an answer was counted.
            self.connections += 1
            with conn:
                conn.recv(65536)
                conn.sendall(b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n")

    def close(self) -> None:
        self.sock.close()
        self._thread.join(5)


@pytest.fixture
def listener() -> Iterator[Listener]:
    found = Listener()
    try:
        yield found
    finally:
        found.close()


# --- the recipe server -------------------------------------------------------------------


@pytest.fixture
def recipe_server(tmp_path: Path, provisioner: FakeProvisioner) -> Iterator[TestClient]:
    app = recipe_app(make_settings(tmp_path), provisioner=provisioner)
    with TestClient(app) as client:
        yield client


@pytest.fixture
def provisioner() -> FakeProvisioner:
    # Any call to the DAP parties fails loudly: the refusals must come before provisioning.
    return FakeProvisioner(fail="the draft reached provisioning")


@pytest.mark.parametrize(
    ("changes", "field", "message"),
    [
        (
            {"token_issuer": {"url": "https://issuer.attacker.example"}},
            "token_issuer.url",
            "https://issuer.attacker.example is not a token issuer this server's operator allows",
        ),
        # Credentials in the URL are not echoed back.
        (
            {"token_issuer": {"url": "https://me:hunter2@attacker.example/pp?key=s3cret"}},
            "token_issuer.url",
            "https://attacker.example/pp is not a token issuer this server's operator allows",
        ),
        # The allowed issuer, with a key of the attacker's choosing (a per-analysis key would
        # let a colluding issuer tell these reports apart).
        (
            {"token_issuer": {"url": ISSUER, "key_ids": [ATTACKER_KEY_ID]}},
            "token_issuer.key_ids",
            "differs from the operator's setting for this issuer",
        ),
        (
            {"token_issuer": {"url": ISSUER, "issuer_name": "attacker.example"}},
            "token_issuer.issuer_name",
            "differs from the operator's setting for this issuer",
        ),
        (
            {"token_issuer": {"url": ISSUER, "window_seconds": 60}},
            "token_issuer.window_seconds",
            "differs from the operator's setting for this issuer",
        ),
        # Leaders and helpers come from the server's settings only.
        ({"task": {"leader": "https://leader.attacker.example"}}, "task.leader", "Extra inputs"),
        ({"task": {"helper": "https://helper.attacker.example"}}, "task.helper", "Extra inputs"),
    ],
)
def test_an_analyst_cannot_name_whom_devices_trust(
    recipe_server: TestClient,
    provisioner: FakeProvisioner,
    changes: dict[str, Any],
    field: str,
    message: str,
) -> None:
    r = recipe_server.post("/recipes", json=draft_json(**changes), headers=auth())
    assert r.status_code == 422, r.text
    errors = r.json()["errors"]
    assert any(e["field"] == field and message in e["message"] for e in errors), errors
    assert "hunter2" not in r.text and "s3cret" not in r.text
    assert provisioner.created == [] and provisioner.checked == []
    assert recipe_server.get("/recipes").json()["recipes"] == []


def test_the_allowed_issuer_gets_its_pinned_keys(
    tmp_path: Path, recipe_server: TestClient, provisioner: FakeProvisioner
) -> None:
    """Naming the allowed issuer (or none) publishes, with the operator's pinned key ids."""
    provisioner.fail = None
    for version, changes in enumerate(({}, {"token_issuer": {"url": ISSUER + "/"}}), 1):
        r = recipe_server.post(
            "/recipes", json=draft_json(version=version, **changes), headers=auth()
        )
        assert r.status_code == 201, r.text
        issuer = r.json()["signed_recipe"]["recipe"]["token_issuer"]
        assert (issuer["url"], issuer["key_ids"]) == (ISSUER, [ISSUER_KEY_ID])
    assert [t.tokens.key_ids for t in provisioner.tasks.values()] == [(ISSUER_KEY_ID,)] * 2


def test_pinning_is_mandatory(tmp_path: Path) -> None:
    """No "any key of the issuer" setting: an issuer comes with its pinned key ids."""
    with pytest.raises(ValidationError, match="pin the token issuer's key ids"):
        make_settings(tmp_path, token_key_ids=[])
    with pytest.raises(ValidationError, match=r"token_issuers\.0\.key_ids"):
        make_settings(tmp_path, token_issuers=[{"url": "https://other.example", "key_ids": []}])
    # Without any issuer configured, no draft can publish.
    app = recipe_app(make_settings(tmp_path, token_issuer_url=None, token_key_ids=[]))
    with TestClient(app) as server:
        r = server.post("/recipes", json=draft_json(), headers=auth())
        assert r.status_code == 422
        assert r.json()["errors"] == [
            {"field": "token_issuer", "message": "required: the server allows no token issuer"}
        ]


# --- the aggregators ---------------------------------------------------------------------


def _aggregator(tmp_path: Path, name: str, token_issuers: list[str]) -> TestClient:
    settings = AggregatorSettings(
        database_url=f"sqlite:///{tmp_path / name}.db",
        admin_token=helpers.ADMIN_TOKEN,  # type: ignore[arg-type]
        run_drivers=False,
        token_issuers=token_issuers,
        issuer_timeout_s=5,
    )
    # No issuer client injected: the aggregator's own httpx client, as in production.
    return TestClient(aggregator_app(settings))


@pytest.mark.parametrize("role", ["leader", "helper"])
def test_a_task_cannot_point_an_aggregator_at_an_unconfigured_issuer(
    tmp_path: Path, listener: Listener, role: str
) -> None:
    """Whoever holds the admin token provisions a task whose issuer is their own URL (an
    internal address, say): refused with a problem document, nothing stored, and the
    aggregator never connects to it, not even when asked for that issuer's keys."""
    policy = {"issuer_url": listener.url, "issuer_name": "x", "key_ids": [ATTACKER_KEY_ID]}
    params = helpers.TaskParams(tokens=policy)
    task_id = params.task_id.to_b64url()
    with _aggregator(tmp_path, role, ["http://issuer.test"]) as client:
        r = client.put(
            f"/internal/tasks/{task_id}",
            json=params.definition(role),
            headers=helpers.admin_headers(),
        )
        assert r.status_code == 400, r.text
        assert r.headers["content-type"] == "application/problem+json"
        assert r.json()["title"] == (
            "the task's token issuer is not one this aggregator is configured to trust "
            "(token_issuers)"
        )
        assert r.json()["taskid"] == task_id
        absent = client.get(f"/internal/tasks/{task_id}", headers=helpers.admin_headers())
        assert absent.status_code == 404
        aggregator: Aggregator = client.app.state.aggregator  # type: ignore[attr-defined]
        with pytest.raises(IssuerNotAllowedError):
            aggregator.issuer_keys.keys(listener.url)
        assert aggregator.issuer_keys.fetches == 0
    assert listener.connections == 0

    # The listener does see an aggregator that is configured to trust it.
    with _aggregator(tmp_path, f"{role}-trusting", [listener.url]) as client:
        aggregator = client.app.state.aggregator  # type: ignore[attr-defined]
        with pytest.raises(IssuerUnavailableError):
            aggregator.issuer_keys.keys(listener.url)
    assert listener.connections == 1
