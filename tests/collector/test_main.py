"""`python -m services.collector` as a process: bad settings, serving, graceful stop."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

from deploy.launcher import free_port

REPO = Path(__file__).resolve().parents[2]


def _env(tmp_path: Path, **settings: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SAGG_")}
    env["PYTHONPATH"] = str(REPO)
    env.update({f"SAGG_COLLECTOR_{k.upper()}": v for k, v in settings.items()})
    return env


def test_missing_or_bad_settings_exit_2_with_one_line(tmp_path: Path) -> None:
    for settings, expected in (
        ({}, "SAGG_COLLECTOR_ADMIN_TOKEN: Field required"),
        ({"admin_token": "tiny-secret"}, "SAGG_COLLECTOR_ADMIN_TOKEN"),
        (
            {"admin_token": "x" * 20, "lease_seconds": "5", "request_timeout": "10"},
            "request_timeout must be shorter than lease_seconds",
        ),
    ):
        done = subprocess.run(
            [sys.executable, "-m", "services.collector"],
            env=_env(tmp_path, **settings),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 2
        assert len(done.stderr.strip().splitlines()) == 1 and expected in done.stderr
        assert "tiny-secret" not in done.stderr  # values are never echoed


def test_serves_healthz_and_stops_on_sigterm(tmp_path: Path) -> None:
    port = free_port()
    token = "collector-admin-token-0123456789"
    process = subprocess.Popen(
        [sys.executable, "-m", "deploy.cli", "serve", "collector", "--port", str(port)],
        env=_env(
            tmp_path,
            admin_token=token,
            database_url=f"sqlite:///{tmp_path / 'db' / 'c.sqlite3'}",
        ),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                response = httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1)
                break
            except httpx.HTTPError:
                assert process.poll() is None, process.stderr.read() if process.stderr else ""
                assert time.monotonic() < deadline, "collector did not start"
                time.sleep(0.1)
        assert response.json() == {"status": "ok"}
        denied = httpx.get(f"http://127.0.0.1:{port}/collections/x", timeout=5)
        assert denied.status_code == 401
        assert denied.headers["content-type"] == "application/problem+json"
        process.send_signal(signal.SIGTERM)
        # uvicorn shuts down gracefully, then re-raises the signal it caught, so the exit
        # status may be -SIGTERM; the log shows whether the lifespan shutdown ran.
        assert process.wait(timeout=20) in (0, -signal.SIGTERM)
        logs = process.stderr.read() if process.stderr else ""
        # Every line is one JSON object, uvicorn's own included.
        records = [json.loads(line) for line in logs.splitlines()]
        assert "Application shutdown complete." in [r["msg"] for r in records]
        assert {r["logger"] for r in records} >= {"uvicorn.error"}
        assert token not in logs
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)
