"""`sagg up` brings up all five services; `sagg recipe publish` provisions a task through the
recipe server, which the leader and helper then hold (checked through their admin API)."""

from __future__ import annotations

import json
import os
import signal
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from deploy.cli import main
from deploy.config import Deployment
from deploy.demo import demo_recipe
from deploy.launcher import SERVICES, free_port
from tests.deploy.conftest import REPO, Up
from tests.exposition import Samples, parse, value

pytestmark = pytest.mark.slow


def _deployment(up: Up) -> Deployment:
    path = up.data_dir / "deployment.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    return Deployment.model_validate_json(path.read_text())


def _url(deployment: Deployment, name: str) -> str:
    url = getattr(deployment, name.replace("-", "_"))
    assert isinstance(url, str)
    return url


def _fixed_size_task_from_a_config_file(up: Up, tmp_path: Path) -> None:
    """A fixed_size task from a TOML config file: upload, collect the current batch, then the
    same batch again by its id (moved here from test_end_to_end.py to share its `sagg up`)."""
    config = tmp_path / "task.toml"
    config.write_text(
        'query_type = "fixed_size"\n'
        "min_batch_size = 40\n"
        "max_batch_size = 60\n"
        "time_precision = 60\n"
        '[vdaf]\ntype = "Prio3Sum"\nbits = 4\n'
    )
    created = up.sagg("task", "create", "--config", str(config))
    assert created.returncode == 0, created.stderr
    info = json.loads(created.stdout)
    assert info["query_type"] == "fixed_size" and info["max_batch_size"] == 60

    task_file = tmp_path / "task.json"
    task_file.write_text(created.stdout)
    uploaded = up.sagg("upload", "--task-file", str(task_file), "--random", "50", "--seed", "7")
    assert uploaded.returncode == 0, uploaded.stderr
    summary = json.loads(uploaded.stdout)
    assert (summary["uploaded"], summary["rejected"]) == (50, 0)
    expected = summary["expected_aggregate"]
    done = up.sagg(
        "collect", "--task", info["task_id"], "--current-batch", "--format", "json", "--wait", "60"
    )
    assert done.returncode == 0, done.stderr
    body = json.loads(done.stdout)
    assert body["result"] == expected and body["report_count"] == 50
    # The batch the leader picked can be collected again by its id.
    again = up.sagg(
        "collect", "--task", info["task_id"], "--batch-id", body["batch_id"], "--format", "csv"
    )
    assert again.returncode == 0, again.stderr
    assert again.stdout.split() == ["result", str(expected)]


class _Result:
    def __init__(self, returncode: int, stdout: str, stderr: str) -> None:
        self.returncode, self.stdout, self.stderr = returncode, stdout, stderr


def _in_process(capsys: pytest.CaptureFixture[str], *argv: str) -> _Result:
    """`sagg` without a fresh interpreter (the import alone costs seconds on a busy machine)."""
    try:
        code = main(list(argv))
    except SystemExit as exc:
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return _Result(code, out, err)


def test_five_services_healthy_and_recipe_publication(
    up: Up, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _fixed_size_task_from_a_config_file(up, tmp_path)
    deployment = _deployment(up)
    for name in [n for n in os.environ if n.startswith("SAGG_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("SAGG_DEPLOYMENT", str(up.data_dir / "deployment.json"))

    def sagg(*argv: str) -> _Result:
        return _in_process(capsys, *argv)

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
    published = sagg("recipe", "publish", str(draft_file))
    assert published.returncode == 0, published.stderr
    summary = json.loads(published.stdout)
    assert summary["created"] and summary["verified"]
    assert summary["recipe_id"] == draft.recipe_id

    # The task exists on both aggregators with the recipe's VDAF and batch size.
    with httpx.Client(timeout=10.0) as http:
        for name, party in (("leader", deployment.leader), ("helper", deployment.helper)):
            task = http.get(
                f"{party}/internal/tasks/{summary['task_id']}",
                headers={"Authorization": f"Bearer {deployment.admin_tokens[name]}"},
            )
            assert task.status_code == 200, task.text
            body = task.json()
            assert body["min_batch_size"] == draft.min_batch_size
            assert body["vdaf"]["type"] == summary["vdaf"]["type"]

    # The same draft again is the same recipe; a changed one under the same version conflicts.
    again = sagg("recipe", "publish", str(draft_file))
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["created"] is False
    rival = tmp_path / "rival.json"
    rival.write_text(draft.model_copy(update={"description": "other"}).model_dump_json())
    refused = sagg("recipe", "publish", str(rival))
    assert refused.returncode == 1 and "HTTP 409" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1

    # A batch size below what the privacy claim needs is refused by the server, with its reason.
    weak = json.loads(draft.model_dump_json())
    weak.update(recipe_id="demo.weak", min_batch_size=10)
    weak_file = tmp_path / "weak.json"
    weak_file.write_text(json.dumps(weak))
    refused = sagg("recipe", "publish", str(weak_file))
    assert refused.returncode == 1 and "min_batch_size" in refused.stderr
    assert "Traceback" not in refused.stderr

    listed = sagg("recipe", "list")
    assert listed.returncode == 0, listed.stderr
    assert draft.recipe_id in listed.stdout and summary["task_id"] in listed.stdout
    listing = json.loads(sagg("recipe", "list", "--json").stdout)
    assert [r["recipe_id"] for r in listing["recipes"]] == [draft.recipe_id]

    # `sagg devices run` finds server, pinned key and manufacturer CA in the deployment file:
    # the devices enroll with the attester, get tokens and upload.
    devices = sagg("devices", "run", "--recipe", draft.recipe_id, "--count", "8")
    assert devices.returncode == 0, devices.stderr
    assert "uploaded 8" in devices.stdout

    # Every service's /metrics, read with that service's admin token, shows that traffic; no
    # service's token opens another's.
    metrics: dict[str, Samples] = {}
    assert len(set(deployment.admin_tokens.values())) == len(SERVICES)
    with httpx.Client(timeout=10.0) as http:
        for name in SERVICES:
            url = f"{_url(deployment, name)}/metrics"
            assert http.get(url).status_code == 401, name
            token = deployment.admin_tokens[name]
            scraped = http.get(url, headers={"Authorization": f"Bearer {token}"})
            assert scraped.status_code == 200, (name, scraped.text)
            metrics[name] = parse(scraped.text)
            assert token not in scraped.text
            for other in SERVICES:
                if other != name:
                    foreign = {"Authorization": f"Bearer {deployment.admin_tokens[other]}"}
                    assert http.get(url, headers=foreign).status_code == 403, (name, other)
    task = summary["task_id"]
    assert value(metrics["leader"], "sagg_reports_received_total", task=task, role="leader") == 8
    assert value(metrics["leader"], "sagg_task_min_batch_size", task=task, role="leader") == (
        draft.min_batch_size
    )
    issued = sum(
        v for (n, _), v in metrics["token-issuer"].items() if n.endswith("tokens_issued_total")
    )
    assert issued >= 8
    assert value(metrics["token-issuer"], "sagg_attester_devices") >= 8
    assert value(metrics["recipe-server"], "sagg_recipe_server_log_size") == 1
    assert value(metrics["collector"], "sagg_collector_tasks") >= 2

    # SIGTERM stops all five.
    ports = [int(_url(deployment, name).rsplit(":", 1)[1]) for name in SERVICES]
    up.process.send_signal(signal.SIGTERM)
    assert up.process.wait(timeout=30) == 0
    for port in ports:
        with pytest.raises(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
            pass


def test_sagg_serve_reads_secret_files(tmp_path: Path) -> None:
    """What the compose file relies on: `sagg serve <service>` with `..._TOKEN_FILE` secrets."""
    token = tmp_path / "analyst_token"
    token.write_text("a" * 32 + "\n")
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("SAGG_")}
    env.update(
        PYTHONPATH=str(REPO),
        SAGG_RECIPE_SERVER_ANALYST_TOKEN_FILE=str(token),
        SAGG_RECIPE_SERVER_SIGNING_KEY_FILE=str(tmp_path / "recipe.key"),
    )
    argv = ["serve", "recipe-server", "--port", str(port)]
    argv += ["--database-url", f"sqlite:///{tmp_path / 'recipes.sqlite3'}"]
    process = subprocess.Popen(
        [sys.executable, "-m", "deploy.cli", *argv],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            assert process.poll() is None, process.stderr.read() if process.stderr else ""
            try:
                if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "sagg serve recipe-server did not come up"
            time.sleep(0.1)
        # The token from the file is the one that may publish: an empty draft is then a 422
        # (an unknown token would be a 401).
        answer = httpx.post(
            f"http://127.0.0.1:{port}/recipes",
            content=b"{}",
            headers={"Authorization": "Bearer " + "a" * 32},
            timeout=5,
        )
        assert answer.status_code == 422
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            # uvicorn shuts down gracefully, then re-raises the signal it caught (uvicorn >= 0.29).
            assert process.wait(timeout=20) in (0, -signal.SIGTERM)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait(timeout=5)
