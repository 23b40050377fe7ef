"""Every CLI failure is one line on stderr with a non-zero exit, never a traceback."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

import client_sdk.cli as client_sdk_cli
from client_sdk.cli import DevicesRun
from deploy.cli import collect as collect_command
from deploy.cli import main
from deploy.collect import CollectError
from deploy.config import Deployment, write_deployment
from deploy.launcher import free_port

VDAF = '{"type":"Prio3Count"}'
URLS = ["--leader", "http://127.0.0.1:1", "--helper", "http://127.0.0.1:1"]


@pytest.fixture(autouse=True)
def _isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # No deployment file, token or URLs leak in from the developer's environment.
    monkeypatch.chdir(tmp_path)
    for name in (
        "SAGG_ADMIN_TOKEN",
        "SAGG_DEPLOYMENT",
        "SAGG_LEADER_URL",
        "SAGG_HELPER_URL",
        "SAGG_COLLECTOR_URL",
    ):
        monkeypatch.delenv(name, raising=False)


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    try:
        code = main(list(argv))
    except SystemExit as exc:  # argparse usage errors
        code = int(exc.code or 0)
    err = capsys.readouterr().err
    return code, err


USAGE_ERRORS = [
    [],
    ["collect"],
    ["collect", "--task", "t", "--batch-id", "b", "--current-batch"],
    ["collect", "--task", "t", "--current-batch", "--interval-start", "0"],
    ["collect", "--task", "t", "--interval-start", "yesterday", "--interval-duration", "60"],
    [
        "collect",
        "--task",
        "t",
        "--interval-start",
        "2026-01-01T00:00:00",
        "--interval-duration",
        "1",
    ],
    ["collect", "--task", "t", "--interval-start", "0", "--interval-duration", "0"],
    ["collect", "--task", "t", "--current-batch", "--format", "xml"],
    ["collect", "--task", "t", "--current-batch", "--wait", "-1"],
    ["task", "create", "--min-batch-size", "zero"],
    ["task", "create", "--expected-reports-per-bucket", "0"],
    ["task", "destroy"],
    ["serve", "everything"],
    ["serve", "recipe-server", "--port", "eighty"],
    ["keys", "init"],
    ["keys", "pin-issuer", "--dir", "keys"],
    ["recipe"],
    ["recipe", "publish"],
    ["privacy", "sampling", "--eps", "1"],
    ["interop", "leader", "--port", "1"],
    ["devices", "run"],
    ["up", "--store", "oracle"],
    ["up", "--demo", "--demo-scale", "huge"],
    ["up", "--demo", "--demo-only", "emoji,nonsense"],
    ["up", "--demo", "--demo-only", ","],
    ["upload", "--task-file", "t.json"],
    ["upload", "--task-file", "t.json", "--random", "0"],
    ["upload", "--task-file", "t.json", "--random", "3", "--measurements", "[1]"],
]


@pytest.mark.parametrize("argv", USAGE_ERRORS, ids=lambda a: " ".join(a) or "(none)")
def test_usage_errors_exit_2_with_one_line(capsys: pytest.CaptureFixture[str], argv: list[str]):
    code, err = _run(capsys, *argv)
    assert code == 2
    assert len(err.strip().splitlines()) == 1 and "error:" in err


FAILURES = [
    (["collect", "--task", "t", "--current-batch"], "no collector URL"),
    (["collect", "--task", "t", "--collector", "http://127.0.0.1:1"], "interval-start"),
    (
        ["collect", "--task", "t", "--current-batch", "--collector", "http://x"],
        "no collector admin token",
    ),
    (["task", "create", "--vdaf", "{nope", *URLS, "--collector", "http://c"], "must be JSON"),
    (["task", "create", *URLS, "--collector", "http://c"], "--vdaf is required"),
    (["task", "create", "--vdaf", VDAF, "--leader", "http://a"], "no helper URL"),
    (
        ["task", "create", "--vdaf", '{"type":"Prio3Sum"}', *URLS, "--collector", "http://c"],
        "needs the parameter 'bits'",
    ),
    (
        [
            "task",
            "create",
            "--vdaf",
            VDAF,
            "--max-batch-size",
            "5",
            *URLS,
            "--collector",
            "http://c",
        ],
        "fixed_size tasks only",
    ),
    (["task", "create", "--vdaf", VDAF, *URLS, "--collector", "ftp://c"], "http://"),
    (
        ["task", "create", "--vdaf", VDAF, "--max-multiple", "3", *URLS, "--collector", "http://c"],
        "--max-multiple needs --expected-reports-per-bucket",
    ),
    (
        [
            *("task", "create", "--vdaf", VDAF, "--expected-reports-per-bucket", "4"),
            *("--max-multiple", "0.5", *URLS, "--collector", "http://c"),
        ],
        "max_multiple",
    ),
    (["task", "create", "--config", "missing.toml"], "cannot read missing.toml"),
    (["up", "--store", "postgres"], "--postgres-url"),
    (["upload", "--task-file", "none.json", "--random", "3"], "cannot read none.json"),
    (
        ["--deployment", "nowhere.json", "collect", "--task", "t", "--current-batch"],
        "does not exist",
    ),
]


@pytest.mark.parametrize(("argv", "message"), FAILURES, ids=lambda a: str(a)[:40])
def test_failures_exit_1_with_one_line(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    code, err = _run(capsys, *argv)
    assert code == 1, err
    assert len(err.strip().splitlines()) == 1, err
    assert err.startswith("sagg: ") and message in err


def test_unreachable_services_are_named(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SAGG_ADMIN_TOKEN", "a" * 32)
    dead = f"http://127.0.0.1:{free_port()}"
    code, err = _run(capsys, "collect", "--task", "t", "--current-batch", "--collector", dead)
    assert code == 1 and f"cannot reach the collector at {dead}" in err
    code, err = _run(
        capsys,
        "task",
        "create",
        "--vdaf",
        VDAF,
        "--leader",
        dead,
        "--helper",
        dead,
        "--collector",
        dead,
    )
    assert code == 1 and "cannot reach the collector" in err
    code, err = _run(capsys, "keys", "pin-issuer", "--dir", ".", "--token-issuer", dead)
    assert code == 1 and f"token issuer directory {dead}/.well-known/" in err


def test_devices_need_the_parties_they_trust(tmp_path: Path) -> None:
    """Without a policy file or a deployment naming them, `sagg devices run` refuses to trust
    whatever leader, helper and issuer a recipe names (before contacting anything)."""
    done = subprocess.run(
        [sys.executable, "-m", "deploy.cli", "devices", "run", "--recipe", "r"],
        check=False,
        cwd=tmp_path,
        env={
            "PATH": str(Path(sys.executable).parent),
            "HOME": str(tmp_path),
            "PYTHONPATH": str(Path(__file__).resolve().parents[2]),
        },
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1, done.stderr
    assert done.stderr.strip() == (
        "sagg: without --policy, name the trusted parties: --leader, --helper and --token-issuer"
    )


def test_config_files_are_checked(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    bad_toml = tmp_path / "task.toml"
    bad_toml.write_text("vdaf = {type = ")
    code, err = _run(capsys, "task", "create", "--config", str(bad_toml))
    assert code == 1 and "not valid TOML" in err
    listing = tmp_path / "task.json"
    listing.write_text("[1, 2]")
    code, err = _run(capsys, "task", "create", "--config", str(listing))
    assert code == 1 and "must hold an object" in err
    extra = tmp_path / "extra.json"
    extra.write_text(json.dumps({"vdaf": {"type": "Prio3Count"}, "colour": "blue"}))
    code, err = _run(
        capsys, "task", "create", "--config", str(extra), *URLS, "--collector", "http://c"
    )
    assert code == 1 and "colour" in err


def test_invalid_deployment_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    (tmp_path / ".data").mkdir()
    (tmp_path / ".data" / "deployment.json").write_text('{"leader": 1}')
    code, err = _run(capsys, "collect", "--task", "t", "--current-batch")
    assert code == 1 and "deployment file" in err and "invalid" in err


def test_the_installed_command_prints_no_traceback(tmp_path: Path) -> None:
    env = {"PATH": str(Path(sys.executable).parent), "HOME": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-m", "deploy.cli", "collect", "--task", "t", "--current-batch"],
        check=False,
        cwd=tmp_path,
        env={**env, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    assert done.stderr.strip() == "sagg: no collector URL: pass --collector or run `sagg up` first"
    assert "Traceback" not in done.stderr


def test_sagg_up_refuses_busy_ports(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = str(busy.getsockname()[1])
        code, err = _run(
            capsys,
            "up",
            "--data-dir",
            str(tmp_path / "d"),
            "--leader-port",
            port,
            "--helper-port",
            str(free_port()),
            "--collector-port",
            str(free_port()),
        )
    assert code == 1 and f"cannot use 127.0.0.1:{port} for the leader" in err
    code, err = _run(
        capsys, "up", "--data-dir", str(tmp_path / "d"), "--leader-port", "9", "--helper-port", "9"
    )
    assert code == 1 and "5 services need 5 different ports" in err


def test_upload_checks_its_inputs(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    task = tmp_path / "task.json"
    task.write_text(json.dumps({"task_id": "x", "leader": "http://l", "helper": "http://h"}))
    code, err = _run(capsys, "upload", "--task-file", str(task), "--random", "2")
    assert code == 1 and "vdaf" in err
    good = {
        "task_id": "A" * 43,
        "leader": f"http://127.0.0.1:{free_port()}",
        "helper": "http://127.0.0.1:1",
        "vdaf": {"type": "Prio3Count"},
        "time_precision": 60,
    }
    task.write_text(json.dumps(good))
    for bad in ("{", "[]", "3"):
        code, err = _run(capsys, "upload", "--task-file", str(task), "--measurements", bad)
        assert code == 1 and "--measurements must be" in err
    code, err = _run(capsys, "upload", "--task-file", str(task), "--measurements", "[1]")
    assert code == 1 and "cannot reach http://127.0.0.1" in err


DASH_ID = "-" + "A" * 42  # a 32-byte DAP id whose base64url begins with "-" (1 in 64 do)
DASH_BATCH = "-" + "B" * 42


class _RecordedError(CollectError):
    """Raised by the stand-ins below once they have recorded what reached them."""


def test_ids_beginning_with_a_dash_reach_collect_as_given(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Every id-taking option of `sagg collect` (--task, --batch-id, --recipe) takes the next
    word as its value, "-" or not, in either order, and passes it on unchanged."""
    monkeypatch.setenv("SAGG_ADMIN_TOKEN", "a" * 32)
    seen: list[tuple[str, Any]] = []

    def fetch_task(http: object, collector: str, token: str, task_id: str) -> Any:
        seen.append(("task", task_id))
        return SimpleNamespace(aggregator_noise=None)

    def request_collection(
        http: object, collector: str, token: str, task_id: str, query: dict[str, Any]
    ) -> str:
        seen.append(("query", (task_id, query)))
        raise _RecordedError("recorded")

    monkeypatch.setattr(collect_command, "fetch_task", fetch_task)
    monkeypatch.setattr(collect_command, "request_collection", request_collection)
    fixed = {"type": "fixed_size", "batch_id": DASH_BATCH}
    for argv in (
        ["--task", DASH_ID, "--batch-id", DASH_BATCH],
        ["--batch-id", DASH_BATCH, "--task", DASH_ID],
        [f"--task={DASH_ID}", f"--batch-id={DASH_BATCH}"],
    ):
        seen.clear()
        code, err = _run(capsys, "collect", *argv, "--collector", "http://127.0.0.1:1")
        assert (code, err) == (1, "sagg: recorded\n")
        assert seen == [("task", DASH_ID), ("query", (DASH_ID, fixed))]

    def fetch_recipe(server: str, recipe_id: str, key: str, **kwargs: Any) -> Any:
        seen.append(("recipe", recipe_id))
        raise _RecordedError("recorded")

    monkeypatch.setattr(collect_command, "fetch_recipe", fetch_recipe)
    deployment = tmp_path / "deployment.json"
    write_deployment(
        deployment,
        Deployment(
            leader="http://l",
            helper="http://h",
            collector="http://127.0.0.1:1",
            recipe_server="http://127.0.0.1:1",
            recipe_server_public_key="k",
        ),
    )
    seen.clear()
    code, err = _run(
        capsys,
        *("--deployment", str(deployment), "collect", "--recipe", "-r", "--task", DASH_ID),
        "--current-batch",
    )
    assert (code, err) == (1, "sagg: recorded\n")
    assert seen == [("recipe", "-r")]


def test_ids_beginning_with_a_dash_reach_the_devices(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    runs: list[DevicesRun] = []

    def run_devices(options: DevicesRun) -> int:
        runs.append(options)
        return 0

    monkeypatch.setattr(client_sdk_cli, "run_devices", run_devices)
    code, err = _run(capsys, "devices", "run", "--recipe", "-r", "--leader", "-l", "--count", "3")
    assert code == 0, err
    assert (runs[0].recipe, runs[0].leader, runs[0].count) == ("-r", ["-l"], 3)


def test_an_option_without_its_value_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    code, err = _run(capsys, "collect", "--current-batch", "--task")
    assert code == 2 and "--task" in err and len(err.strip().splitlines()) == 1
