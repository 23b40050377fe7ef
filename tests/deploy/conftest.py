"""The `sagg up` harness shared by the deploy tests: the whole topology on free ports.

The `up` fixture starts `python -m deploy.cli up` in a temporary data dir (store per
`request.param`: sqlite by default, or postgres on the test server: `tests/pg.py` skips it, or
fails it under CI=true, when none answers), waits for its deployment file, and on teardown
SIGTERMs it, SIGKILLs whatever services survive and drops the PostgreSQL databases it made.
Every wait has a deadline.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import psycopg
import pytest
from psycopg import sql

from deploy.cli import main
from deploy.launcher import DEFAULT_PORTS, STORES, free_ports
from tests import pg

REPO = Path(__file__).resolve().parents[2]


def collect_args(task_id: str, start: int, duration: int, *extra: str) -> list[str]:
    """`sagg collect` of one time interval of a task."""
    args = ["collect", "--task", task_id, "--interval-start", str(start)]
    return [*args, "--interval-duration", str(duration), *extra]


def quick_env() -> dict[str, str]:
    """This environment without SAGG_* settings, plus short driver and poll waits.

    The services inherit it: the defaults are tuned for throughput, and would make a test with
    a few hundred reports wait on timers."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SAGG_")}
    env["PYTHONPATH"] = str(REPO)
    env.update(
        SAGG_AGGREGATOR_MAX_REPORT_WAIT_S="1",
        SAGG_AGGREGATOR_DRIVER_POLL_S="0.2",
        SAGG_AGGREGATOR_COLLECTION_RETRY_S="1",
        SAGG_COLLECTOR_POLL_INTERVAL="0.5",
        SAGG_COLLECTOR_MAX_BACKOFF="1",
    )
    return env


def age_buckets_draft(
    name: str, description: str, boundaries: list[int], min_batch_size: int, epsilon: float
) -> dict[str, Any]:
    """A recipe draft: age buckets under asymmetric one-hot randomized response (eps0 = 2),
    every device sampled, recipe `name`.ages of analysis `name`, hour buckets."""
    return {
        "recipe_id": f"{name}.ages",
        "version": 1,
        "analysis_id": name,
        "description": description,
        "query": {"stream": "profile", "fields": ["age"], "selection": {"kind": "latest"}},
        "encoding": {"features": [{"kind": "buckets", "field": "age", "boundaries": boundaries}]},
        "randomizer": {"name": "one_hot", "eps0": 2.0, "symmetric": False},
        "sampling_rate": 1.0,
        "min_batch_size": min_batch_size,
        "privacy": {"epsilon": epsilon, "delta": 1e-6, "analysis": "stronger_clones"},
        "task": {"time_precision": 3600},
    }


def free_port_args() -> list[str]:
    """`sagg up` flags putting every service on a free loopback port."""
    args: list[str] = []
    for name, port in zip(DEFAULT_PORTS, free_ports(len(DEFAULT_PORTS)), strict=True):
        args += [f"--{name}-port", str(port)]
    return args


class Up:
    def __init__(self, process: subprocess.Popen[str], data_dir: Path, env: dict[str, str]):
        self.process = process
        self.data_dir = data_dir
        self.env = env

    def sagg(self, *argv: str) -> subprocess.CompletedProcess[str]:
        """`sagg ARGV` in this process, with the deployment's environment and working dir.

        In-process because a fresh interpreter spends seconds importing on a busy machine; the
        CLI's own subprocess behaviour is tested in test_cli_errors.py. Every command that
        waits takes its own bound (`--wait`).
        """
        out, err = io.StringIO(), io.StringIO()
        with (
            mock.patch.dict(os.environ, self.env, clear=True),
            contextlib.chdir(self.data_dir.parent),
            contextlib.redirect_stdout(out),
            contextlib.redirect_stderr(err),
        ):
            try:
                code = main(list(argv))
            except SystemExit as exc:  # argparse usage errors
                code = exc.code if isinstance(exc.code, int) else 2
        return subprocess.CompletedProcess(list(argv), code, out.getvalue(), err.getvalue())


def _kill_leftovers(data_dir: Path) -> None:
    try:
        pids = json.loads((data_dir / "pids.json").read_text())
    except (OSError, ValueError):
        return
    for pid in pids.values():
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(int(pid), signal.SIGKILL)


def _postgres_base() -> str:
    """A fresh base URL on the test server (`sagg up` makes one database per store on it)."""
    pg.require()
    return f"{pg.SERVER}/sagg_e2e_{secrets.token_hex(4)}"


def _drop_databases(base_url: str) -> None:
    name = base_url.rpartition("/")[2]
    with psycopg.connect(pg.ADMIN_URL, autocommit=True, connect_timeout=5) as conn:
        for role in STORES:
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
                    sql.Identifier(f"{name}_{role}")
                )
            )


@pytest.fixture
def up(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Up]:
    """`sagg up` on free ports; `request.param` picks the store (sqlite or postgres), or
    "tls": SQLite, and every service on HTTPS with a local CA (`sagg up --tls`), or
    "taskprov": SQLite with taskprov (`sagg up --taskprov`)."""
    store = getattr(request, "param", "sqlite")
    store_args: list[str] = []
    if store in ("tls", "taskprov"):
        store, store_args = "sqlite", [f"--{store}"]
    postgres_base = None
    if store == "postgres":
        postgres_base = _postgres_base()
        store_args = ["--store", "postgres", "--postgres-url", postgres_base]
    data_dir = tmp_path / "data"
    env = quick_env()
    env["SAGG_DEPLOYMENT"] = str(data_dir / "deployment.json")
    port_args = free_port_args()
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "deploy.cli",
            "up",
            "--data-dir",
            str(data_dir),
            *port_args,
            "--startup-timeout",
            "60",
            *store_args,
        ],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 75
        while not (data_dir / "deployment.json").exists():
            if process.poll() is not None:
                pytest.fail(
                    f"sagg up exited early: {process.stderr.read() if process.stderr else ''}"
                )
            if time.monotonic() > deadline:
                pytest.fail("sagg up did not write its deployment file in time")
            time.sleep(0.1)
        yield Up(process, data_dir, env)
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)
        _kill_leftovers(data_dir)
        if postgres_base is not None:
            _drop_databases(postgres_base)
