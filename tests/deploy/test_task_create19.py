"""``sagg task create --dap 19``: from flags, from a TaskConfiguration given as base64url (also
one beginning with "-") or in a file (bytes or text), and its one-line refusals."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pytest

from deploy.cli import main
from deploy.cli import task as task_command
from services.common.provisioning import TaskParams
from shared.dap.messages import Url
from shared.dap.messages19 import TaskConfiguration
from shared.vdaf.spec import VdafSpec

URLS = ["--leader", "http://l.test", "--helper", "http://h.test", "--collector", "http://c.test"]
HIST20 = '{"version":"VDAF-20","type":"Prio3Histogram","length":4,"chunk_length":2}'


def _blob(task_info: bytes) -> bytes:
    return TaskConfiguration(
        task_info,
        Url(b"http://l.test"),
        Url(b"http://h.test"),
        3600,
        25,
        1,
        b"",
        2,
        (255).to_bytes(8, "big"),  # Prio3Sum, max_measurement 255
    ).encode()


#: task_info of 248 bytes: the first byte 0xf8 makes the base64url text begin with "-".
DASH_BLOB = _blob(b"\x00" * 248)
DASH_TEXT = base64.urlsafe_b64encode(DASH_BLOB).decode().rstrip("=")


@pytest.fixture
def created(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[tuple[TaskParams, Any]]:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SAGG_ADMIN_TOKEN", "a" * 32)
    for name in ("SAGG_DEPLOYMENT", "SAGG_LEADER_URL", "SAGG_HELPER_URL", "SAGG_COLLECTOR_URL"):
        monkeypatch.delenv(name, raising=False)
    calls: list[tuple[TaskParams, Any]] = []

    def create_task(params: TaskParams, tokens: Any, **kw: Any) -> dict[str, Any]:
        calls.append((params, kw["task_configuration"]))
        return {"task_id": "recorded"}

    monkeypatch.setattr(task_command, "create_task", create_task)
    return calls


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    try:
        code = main(["task", "create", *argv])
    except SystemExit as exc:
        code = int(exc.code or 0)
    return code, capsys.readouterr().err


def test_from_flags(created: list[Any], capsys: pytest.CaptureFixture[str]) -> None:
    code, err = _run(capsys, "--dap", "19", "--vdaf", HIST20, *URLS)
    assert code == 0, err
    params, blob = created[0]
    assert params.dap == "dap-19" and params.vdaf.draft == "VDAF-20" and blob is None
    code, err = _run(capsys, "--vdaf", '{"type":"Prio3Count"}', *URLS)
    assert code == 0 and created[1][0].dap == "dap-09"


def test_from_a_blob_beginning_with_a_dash(
    created: list[Any], capsys: pytest.CaptureFixture[str]
) -> None:
    assert DASH_TEXT.startswith("-")
    for argv in (
        ["--dap", "19", "--task-configuration", DASH_TEXT, "--collector", "http://c.test"],
        ["--task-configuration", DASH_TEXT, "--dap", "19", "--collector", "http://c.test"],
        [f"--task-configuration={DASH_TEXT}", "--dap=19", "--collector=http://c.test"],
    ):
        created.clear()
        code, err = _run(capsys, *argv)
        assert code == 0, err
        params, blob = created[0]
        assert blob == DASH_BLOB
        assert params.vdaf == VdafSpec(version="VDAF-20", type="Prio3Sum", max_measurement=255)
        assert (params.leader, params.helper, params.collector) == (
            "http://l.test",
            "http://h.test",
            "http://c.test",
        )
        assert (params.min_batch_size, params.time_precision) == (25, 3600)


def test_from_a_file_of_bytes_or_text(
    created: list[Any], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    raw = tmp_path / "task.bin"
    raw.write_bytes(_blob(b"x"))
    text = tmp_path / "task.txt"
    text.write_text(base64.urlsafe_b64encode(_blob(b"y")).decode().rstrip("=") + "\n")
    for path, blob in ((raw, _blob(b"x")), (text, _blob(b"y"))):
        code, err = _run(
            capsys, "--dap", "19", "--task-configuration-file", str(path), "--collector", "http://c"
        )
        assert code == 0, err
        assert created[-1][1] == blob


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--task-configuration", DASH_TEXT], "pass --dap 19"),
        (["--dap", "19", "--task-configuration", "AAAA"], "not an encoded TaskConfiguration"),
        (
            ["--dap", "19", "--task-configuration", DASH_TEXT, "--min-batch-size", "3"],
            "fixes min_batch_size",
        ),
        (
            ["--dap", "19", "--task-configuration", DASH_TEXT, "--task-configuration-file", "f"],
            "give one of",
        ),
        (["--dap", "19", "--task-configuration-file", "missing.bin"], "cannot read missing.bin"),
        (["--dap", "19", "--vdaf", '{"type":"Prio3Count"}', *URLS], "runs VDAF-20"),
        (["--dap", "20", "--vdaf", HIST20, *URLS], "--dap"),
        (["--taskprov", "--vdaf", '{"type":"Prio3Count"}', *URLS], "pass --dap 19"),
        (["--dap", "19", "--taskprov", "--vdaf", HIST20, *URLS], "sagg up --taskprov"),
    ],
)
def test_refusals_are_one_line(
    created: list[Any], capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    code, err = _run(capsys, *argv, "--collector", "http://c.test")
    assert code != 0 and message in err and len(err.strip().splitlines()) == 1, err
    assert not created
