"""The recipe server's `/metrics` after publications, refusals and fetches; the store-backed
families read the same after a restart."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from services.common.clock import TestClock
from services.recipe_server.app import create_app
from services.recipe_server.provision import NewTask, ProvisionError
from tests.exposition import parse, value
from tests.recipe.helpers import draft_json
from tests.recipe_server.conftest import (
    ANALYST_TOKEN,
    KEYBOARD_TOKEN,
    SEED,
    FakeProvisioner,
    auth,
    make_settings,
)

METRICS_TOKEN = "metrics-token-0123456789abcdef"
SCRAPE = {"Authorization": f"Bearer {METRICS_TOKEN}"}


def _scrape(client: TestClient) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    response = client.get("/metrics", headers=SCRAPE)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    return parse(response.text)


def test_recipe_server_metrics(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    settings = make_settings(tmp_path, metrics_token=METRICS_TOKEN)
    provisioner = FakeProvisioner()
    app = create_app(settings, provisioner=provisioner, clock=TestClock())
    with TestClient(app) as client:
        assert client.get("/metrics").status_code == 401
        assert client.get("/metrics", headers=auth(ANALYST_TOKEN)).status_code == 403

        doc = draft_json()
        assert client.post("/recipes", json=doc, headers=auth()).status_code == 201
        assert client.post("/recipes", json=doc, headers=auth()).status_code == 200
        other = draft_json(recipe_id="keyboard.other")
        assert client.post("/recipes", json=other, headers=auth(KEYBOARD_TOKEN)).status_code == 201
        # Refusals: no token twice, someone else's analysis, a changed draft, a weak batch size.
        assert client.post("/recipes", json=doc).status_code == 401
        assert client.post("/recipes", json=doc, headers=auth("x" * 20)).status_code == 401
        ads = draft_json(recipe_id="ads.x", analysis_id="ads.clicks")
        assert client.post("/recipes", json=ads, headers=auth(KEYBOARD_TOKEN)).status_code == 403
        changed = {**doc, "description": "changed"}
        assert client.post("/recipes", json=changed, headers=auth()).status_code == 409
        weak = draft_json(recipe_id="keyboard.weak", min_batch_size=2)
        assert client.post("/recipes", json=weak, headers=auth()).status_code == 422
        # The leader refuses the task after the publication recorded it as pending.
        create = provisioner.create

        def refuse(task: NewTask) -> None:
            raise ProvisionError("leader down")

        provisioner.create = refuse  # type: ignore[method-assign]
        down = draft_json(recipe_id="keyboard.down")
        assert client.post("/recipes", json=down, headers=auth()).status_code == 502
        provisioner.create = create  # type: ignore[method-assign]

        for _ in range(3):
            assert client.get(f"/recipes/{doc['recipe_id']}").status_code == 200
        assert client.get("/recipes/nope").status_code == 404
        assert client.get("/recipes").status_code == 200

        samples = _scrape(client)
        assert value(samples, "sagg_recipe_server_recipes", analyst="analyst") == 1
        assert value(samples, "sagg_recipe_server_recipes", analyst="keyboard-team") == 1
        assert value(samples, "sagg_recipe_server_recipe_tasks") == 2
        assert value(samples, "sagg_recipe_server_log_size") == 2
        assert value(samples, "sagg_recipe_server_pending_tasks") == 1
        published = "sagg_recipe_server_publications_total"
        assert value(samples, published, outcome="created") == 2
        assert value(samples, published, outcome="existing") == 1
        refused = "sagg_recipe_server_publications_refused_total"
        assert value(samples, refused, reason="unauthorized") == 2
        assert value(samples, refused, reason="forbidden") == 1
        assert value(samples, refused, reason="conflict") == 1
        assert value(samples, refused, reason="invalid_draft") == 1
        assert value(samples, refused, reason="provisioning_failed") == 1
        provisioned = "sagg_recipe_server_tasks_provisioned_total"
        assert value(samples, provisioned, outcome="created") == 2
        assert value(samples, provisioned, outcome="failed") == 1
        fetches = "sagg_recipe_server_recipe_fetches_total"
        assert value(samples, fetches, recipe=doc["recipe_id"]) == 3
        assert value(samples, fetches, recipe="nope") == 0
        assert value(samples, "sagg_recipe_server_listing_fetches_total") == 1
        text = client.get("/metrics", headers=SCRAPE).text

    logs = "\n".join(r.getMessage() for r in caplog.records)
    for secret in (ANALYST_TOKEN, KEYBOARD_TOKEN, METRICS_TOKEN, SEED):
        assert secret not in text and secret not in logs

    with TestClient(create_app(settings, provisioner=provisioner, clock=TestClock())) as client:
        samples = _scrape(client)
        assert value(samples, "sagg_recipe_server_log_size") == 2
        assert value(samples, "sagg_recipe_server_publications_total", outcome="created") == 0


def test_metrics_off_without_a_token(tmp_path: Path) -> None:
    app = create_app(make_settings(tmp_path), provisioner=FakeProvisioner(), clock=TestClock())
    with TestClient(app) as client:
        assert client.get("/metrics", headers=SCRAPE).status_code == 403
