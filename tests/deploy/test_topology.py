"""`sagg up` brings up all five services; `sagg recipe publish` provisions a task through the
recipe server, which the leader and helper then hold (checked through their admin API)."""

from __future__ import annotations

import json
import signal
import socket
import stat
from pathlib import Path

import httpx
import pytest

from deploy.config import Deployment
from deploy.demo import demo_recipe
from deploy.launcher import SERVICES
from tests.deploy.conftest import Up

pytestmark = pytest.mark.slow


def _deployment(up: Up) -> Deployment:
    path = up.data_dir / "deployment.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    return Deployment.model_validate_json(path.read_text())


def _url(deployment: Deployment, name: str) -> str:
    url = getattr(deployment, name.replace("-", "_"))
    assert isinstance(url, str)
    return url


def test_five_services_healthy_and_recipe_publication(up: Up, tmp_path: Path) -> None:
    deployment = _deployment(up)
    assert deployment.analyst_token and deployment.recipe_server_public_key
    with httpx.Client(timeout=10.0) as http:
        for name in SERVICES:
            assert http.get(f"{_url(deployment, name)}/healthz").status_code == 200, name
        issuer = http.get(f"{deployment.token_issuer}/healthz").json()
        assert issuer["role"] == "joint"
        keys = http.get(f"{deployment.recipe_server}/keys").json()["keys"]
        assert [k["public_key"] for k in keys] == [deployment.recipe_server_public_key]

    draft = demo_recipe()
    draft_file = tmp_path / "recipe.json"
    draft_file.write_text(draft.model_dump_json())
    published = up.sagg("recipe", "publish", str(draft_file))
    assert published.returncode == 0, published.stderr
    summary = json.loads(published.stdout)
    assert summary["created"] and summary["verified"]
    assert summary["recipe_id"] == draft.recipe_id

    # The task exists on both aggregators with the recipe's VDAF and batch size.
    with httpx.Client(timeout=10.0) as http:
        for party in (deployment.leader, deployment.helper):
            task = http.get(
                f"{party}/internal/tasks/{summary['task_id']}",
                headers={"Authorization": f"Bearer {deployment.admin_token}"},
            )
            assert task.status_code == 200, task.text
            body = task.json()
            assert body["min_batch_size"] == draft.min_batch_size
            assert body["vdaf"]["type"] == summary["vdaf"]["type"]

    # The same draft again is the same recipe; a changed one under the same version conflicts.
    again = up.sagg("recipe", "publish", str(draft_file))
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["created"] is False
    rival = tmp_path / "rival.json"
    rival.write_text(draft.model_copy(update={"description": "other"}).model_dump_json())
    refused = up.sagg("recipe", "publish", str(rival))
    assert refused.returncode == 1 and "HTTP 409" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1

    # A batch size below what the privacy claim needs is refused by the server, with its reason.
    weak = json.loads(draft.model_dump_json())
    weak.update(recipe_id="demo.weak", min_batch_size=10)
    weak_file = tmp_path / "weak.json"
    weak_file.write_text(json.dumps(weak))
    refused = up.sagg("recipe", "publish", str(weak_file))
    assert refused.returncode == 1 and "min_batch_size" in refused.stderr
    assert "Traceback" not in refused.stderr

    listed = up.sagg("recipe", "list")
    assert listed.returncode == 0, listed.stderr
    assert draft.recipe_id in listed.stdout and summary["task_id"] in listed.stdout
    listing = json.loads(up.sagg("recipe", "list", "--json").stdout)
    assert [r["recipe_id"] for r in listing["recipes"]] == [draft.recipe_id]

    # SIGTERM stops all five.
    ports = [int(_url(deployment, name).rsplit(":", 1)[1]) for name in SERVICES]
    up.process.send_signal(signal.SIGTERM)
    assert up.process.wait(timeout=30) == 0
    for port in ports:
        with pytest.raises(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
            pass
