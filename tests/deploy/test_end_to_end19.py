"""A DAP-19 task and a DAP-09 task side by side through real processes (`sagg up`): created
with `sagg task create` (the DAP-19 one also from its encoded TaskConfiguration), reports
uploaded with `sagg upload` (DAP-19 in bulk UploadRequests), aggregated by the leader and
helper processes, collected with `sagg collect`; then a DAP-19 recipe answered by SDK devices
(`sagg devices run`, tokens and recipe binding in the private extensions). The aggregates are
checked against the measurements sent."""

from __future__ import annotations

import base64
import json
import re
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.deploy.conftest import Up, age_buckets_draft, collect_args

PRECISION = 60
REPORTS = 40
HIST09 = {"type": "Prio3Histogram", "length": 4, "chunk_length": 2}
HIST20 = {**HIST09, "version": "VDAF-20"}


def _create(up: Up, *args: str) -> dict[str, Any]:
    created = up.sagg("task", "create", *args)
    assert created.returncode == 0, created.stderr
    info: dict[str, Any] = json.loads(created.stdout)
    return info


def _upload(
    up: Up, tmp_path: Path, info: dict[str, Any], measurements: list[int], now: int
) -> None:
    task_file = tmp_path / f"{info['task_id'][:8]}.json"
    task_file.write_text(json.dumps(info))
    sent = up.sagg(
        "upload",
        *("--task-file", str(task_file), "--measurements", json.dumps(measurements)),
        *("--per-request", "16"),  # DAP-19: three UploadRequests of 16, 16 and 8 reports
        *("--time", str(now)),  # inside the collected interval however slow the machine
    )
    assert sent.returncode == 0, sent.stderr
    assert json.loads(sent.stdout)["uploaded"] == len(measurements)


def _collect(up: Up, task_id: str, start: int, duration: int) -> dict[str, Any]:
    done = up.sagg(*collect_args(task_id, start, duration, "--format", "json", "--wait", "60"))
    assert done.returncode == 0, done.stderr
    body: dict[str, Any] = json.loads(done.stdout)
    return body


@pytest.mark.slow
@pytest.mark.parametrize("up", ["sqlite", "postgres"], indirect=True)
def test_dap_19_and_dap_09_side_by_side(up: Up, tmp_path: Path) -> None:
    common = ["--min-batch-size", str(REPORTS), "--time-precision", str(PRECISION)]
    task09 = _create(up, "--vdaf", json.dumps(HIST09), *common)
    task19 = _create(up, "--dap", "19", "--vdaf", json.dumps(HIST20), *common)
    assert (task09["dap"], task19["dap"]) == ("dap-09", "dap-19")
    # A third task from the second one's configuration with a different task_info: the blob
    # alone provisions it, and its id is the taskprov derivation (checked in unit tests).
    raw = base64.urlsafe_b64decode(task19["task_configuration"] + "==")
    blob = bytes([3]) + b"e2e" + raw[1 + raw[0] :]
    blob_file = tmp_path / "task.bin"
    blob_file.write_bytes(blob)
    task19b = _create(up, "--dap", "19", "--task-configuration-file", str(blob_file))
    assert task19b["vdaf"] == HIST20 and task19b["task_id"] != task19["task_id"]

    now = int(time.time())
    start = now - now % PRECISION - PRECISION  # two precisions hold every report below
    sent = {}
    for i, info in enumerate((task09, task19, task19b)):
        measurements = [(j * (i + 3)) % 4 for j in range(REPORTS)]
        _upload(up, tmp_path, info, measurements, now)
        counts = Counter(measurements)
        sent[info["task_id"]] = [counts[b] for b in range(4)]
    for info in (task09, task19, task19b):
        body = _collect(up, info["task_id"], start, 2 * PRECISION)
        assert body["state"] == "complete", body
        assert (body["result"], body["report_count"]) == (sent[info["task_id"]], REPORTS)


DEVICES = 150
BATCH = 120  # asymmetric one-hot, eps0 = 2: epsilon 1.5 at delta 1e-6 from B = 116
HOUR = 3600


@pytest.mark.slow
def test_sdk_devices_answer_a_dap_19_recipe(up: Up, tmp_path: Path) -> None:
    draft = age_buckets_draft(
        "e2e19", "age buckets over DAP-19", [13, 20, 30, 45, 65, 91], BATCH, 1.5
    )
    draft["task"] = {"time_precision": HOUR, "dap": "dap-19"}
    draft_file = tmp_path / "ages.json"
    draft_file.write_text(json.dumps(draft))
    published = up.sagg("recipe", "publish", str(draft_file))
    assert published.returncode == 0, published.stderr
    task_id = json.loads(published.stdout)["task_id"]
    devices = up.sagg(
        "devices", "run", "--recipe", "e2e19.ages", "--count", str(DEVICES), "--data", "ages"
    )
    assert devices.returncode == 0, devices.stderr + devices.stdout
    uploaded = int(re.search(r"uploaded (\d+)", devices.stdout).group(1))  # type: ignore[union-attr]
    assert uploaded == DEVICES, devices.stdout
    start = int(time.time()) // HOUR * HOUR - HOUR
    collected = up.sagg(
        *collect_args(task_id, start, 2 * HOUR, "--recipe", "e2e19.ages"),
        *("--format", "json", "--wait", "60"),
    )
    assert collected.returncode == 0, collected.stderr
    body = json.loads(collected.stdout)
    assert body["report_count"] == DEVICES, body


@pytest.mark.slow
def test_a_leader_selected_dap_19_task_collects_the_next_batch(up: Up, tmp_path: Path) -> None:
    info = _create(
        up,
        *("--dap", "19", "--query-type", "fixed_size", "--min-batch-size", "20"),
        *("--vdaf", json.dumps({"version": "VDAF-20", "type": "Prio3Sum", "max_measurement": 9})),
    )
    measurements = [j % 10 for j in range(20)]
    _upload(up, tmp_path, info, measurements, int(time.time()))
    done = up.sagg(
        "collect", "--task", info["task_id"], "--current-batch", "--format", "json", "--wait", "60"
    )
    assert done.returncode == 0, done.stderr
    body = json.loads(done.stdout)
    assert (body["result"], body["report_count"]) == (sum(measurements), 20), body


@pytest.mark.slow
@pytest.mark.parametrize("up", ["taskprov"], indirect=True)
def test_a_taskprov_task_through_the_cli(up: Up, tmp_path: Path) -> None:
    """`sagg up --taskprov`, `sagg task create --dap 19 --taskprov`: only the collector knows the
    task until `sagg upload` announces it; then both aggregators opt in and `sagg collect`
    gets exactly the measurements."""
    common = ["--min-batch-size", str(REPORTS), "--time-precision", str(PRECISION)]
    info = _create(up, "--dap", "19", "--taskprov", "--vdaf", json.dumps(HIST20), *common)
    assert info["taskprov"] is True
    deployment = json.loads((up.data_dir / "deployment.json").read_text())
    for role in ("leader", "helper"):
        token = deployment["admin_tokens"][role]
        known = httpx.get(
            f"{deployment[role]}/internal/tasks/{info['task_id']}",
            headers={"Authorization": f"Bearer {token}"},
            timeout=10,
        )
        assert known.status_code == 404, known.text
    noise = '{"mechanism":"discrete_gaussian","sigma":"8.5402"}'
    refused = up.sagg(
        "task", "create", "--dap", "19", "--taskprov", "--vdaf", json.dumps(HIST20),
        "--aggregator-noise", noise,
    )  # fmt: skip
    assert refused.returncode != 0 and "cannot have aggregator_noise" in refused.stderr

    now = int(time.time())
    measurements = [(j * 5) % 4 for j in range(REPORTS)]
    _upload(up, tmp_path, info, measurements, now)
    counts = Counter(measurements)
    body = _collect(up, info["task_id"], now - now % PRECISION - PRECISION, 2 * PRECISION)
    assert body["state"] == "complete", body
    assert (body["result"], body["report_count"]) == ([counts[b] for b in range(4)], REPORTS)
