"""Multi-process end to end: `sagg up`, `sagg task create`, upload, `sagg collect`, teardown.

Leader, helper and collector run as separate processes on free loopback ports with SQLite
stores in a temporary data dir, exactly as `sagg up` starts them for a developer. The test
drives them only through the CLI and the DAP upload client, and checks the exact aggregate.
Every wait has a deadline, and teardown kills whatever is left.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from deploy.launcher import free_port
from deploy.upload import ClientTask, upload_reports

REPO = Path(__file__).resolve().parents[2]

# The aggregator service is built in parallel; until its entry point exists this test cannot run.
pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("services.aggregator.__main__") is None,
    reason="services.aggregator has no entry point yet",
)
REPORTS = 300
BUCKETS = 5
PRECISION = 60


class Up:
    def __init__(self, process: subprocess.Popen[str], data_dir: Path, env: dict[str, str]):
        self.process = process
        self.data_dir = data_dir
        self.env = env

    def sagg(self, *argv: str, timeout: float = 90.0) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "deploy.cli", *argv],
            check=False,
            env=self.env,
            cwd=self.data_dir.parent,
            capture_output=True,
            text=True,
            timeout=timeout,
        )


def _kill_leftovers(data_dir: Path) -> None:
    try:
        pids = json.loads((data_dir / "pids.json").read_text())
    except (OSError, ValueError):
        return
    for pid in pids.values():
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(int(pid), signal.SIGKILL)


def _postgres_base() -> str | None:
    """A fresh base URL on the test server, or None when no server answers."""
    base = os.environ.get("SAGG_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
    try:
        psycopg.connect(base, connect_timeout=5).close()
    except psycopg.Error:
        return None
    return f"{base.rpartition('/')[0]}/sagg_e2e_{secrets.token_hex(4)}"


def _drop_databases(base_url: str) -> None:
    server, _, name = base_url.rpartition("/")
    with psycopg.connect(f"{server}/postgres", autocommit=True, connect_timeout=5) as conn:
        for role in ("leader", "helper", "collector"):
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
                    sql.Identifier(f"{name}_{role}")
                )
            )


@pytest.fixture
def up(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Up]:
    """`sagg up` on free ports; `request.param` picks the store (sqlite or postgres)."""
    store = getattr(request, "param", "sqlite")
    store_args: list[str] = []
    postgres_base = None
    if store == "postgres":
        postgres_base = _postgres_base()
        if postgres_base is None:
            pytest.skip("no PostgreSQL server for the postgres deployment")
        store_args = ["--store", "postgres", "--postgres-url", postgres_base]
    data_dir = tmp_path / "data"
    env = {k: v for k, v in os.environ.items() if not k.startswith("SAGG_")}
    env["PYTHONPATH"] = str(REPO)
    env["SAGG_DEPLOYMENT"] = str(data_dir / "deployment.json")
    # Inherited by the services: shorter driver waits keep the test quick (defaults are tuned
    # for throughput, not for a 300-report batch).
    env.update(
        SAGG_AGGREGATOR_MAX_REPORT_WAIT_S="1",
        SAGG_AGGREGATOR_DRIVER_POLL_S="0.2",
        SAGG_AGGREGATOR_COLLECTION_RETRY_S="1",
        SAGG_COLLECTOR_POLL_INTERVAL="0.5",
        SAGG_COLLECTOR_MAX_BACKOFF="1",
    )
    ports = [str(free_port()) for _ in range(3)]
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "deploy.cli",
            "up",
            "--data-dir",
            str(data_dir),
            "--leader-port",
            ports[0],
            "--helper-port",
            ports[1],
            "--collector-port",
            ports[2],
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


def _collect(up: Up, task_id: str, start: int, fmt: str) -> str:
    done = up.sagg(
        "collect",
        "--task",
        task_id,
        "--interval-start",
        str(start),
        "--interval-duration",
        str(PRECISION),
        "--format",
        fmt,
        "--wait",
        "60",
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.slow
@pytest.mark.parametrize("up", ["sqlite", "postgres"], indirect=True)
def test_up_create_upload_collect_teardown(up: Up) -> None:
    created = up.sagg(
        "task",
        "create",
        "--vdaf",
        json.dumps({"type": "Prio3Histogram", "length": BUCKETS, "chunk_length": 2}),
        "--min-batch-size",
        str(REPORTS),
        "--time-precision",
        str(PRECISION),
        "--max-batch-query-count",
        "2",
    )
    assert created.returncode == 0, created.stderr
    info: dict[str, Any] = json.loads(created.stdout)
    assert info["query_type"] == "time_interval" and info["time_precision"] == PRECISION

    measurements = [(i * 7) % BUCKETS if i % 3 else 0 for i in range(REPORTS)]
    now = int(time.time())
    start = now - now % PRECISION
    result = upload_reports(ClientTask.model_validate(info), measurements, report_time=now)
    assert (result.uploaded, result.rejected) == (REPORTS, [])

    counts = Counter(measurements)
    expected = [counts[b] for b in range(BUCKETS)]
    body = json.loads(_collect(up, info["task_id"], start, "json"))
    assert body["state"] == "complete"
    assert body["result"] == expected
    assert body["report_count"] == REPORTS
    assert body["interval"]["start"] >= start

    # Collecting the same batch again gives the same answer (DAP-09 §4.6.5 counts distinct
    # aggregation parameters, and Prio3 has one).
    csv = _collect(up, info["task_id"], start, "csv").strip().splitlines()
    assert csv[0] == "bucket,value"
    assert [int(line.split(",")[1]) for line in csv[1:]] == expected

    # A batch below min_batch_size stays pending: the CLI reports that and exits non-zero.
    empty = up.sagg(
        "collect",
        "--task",
        info["task_id"],
        "--interval-start",
        str(start + PRECISION),
        "--interval-duration",
        str(PRECISION),
        "--wait",
        "1",
    )
    assert empty.returncode == 1 and "still pending" in empty.stderr

    # Ctrl-C/SIGTERM stops every service.
    leader_port = int(info["leader"].rsplit(":", 1)[1])
    up.process.send_signal(signal.SIGTERM)
    assert up.process.wait(timeout=30) == 0
    with pytest.raises(OSError), socket.create_connection(("127.0.0.1", leader_port), timeout=1):
        pass


@pytest.mark.slow
def test_fixed_size_task_from_a_config_file(up: Up, tmp_path: Path) -> None:
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
