"""A recipe's whole life against `sagg up`: publish, devices with tokens and binding, collect.

The recipe server provisions the recipe's task bound to the recipe's digest and its issuer's
token policy, so the leader and the helper take only reports that carry a Privacy Pass token
of that issuer and the recipe binding. `sagg devices run` enrolls simulated devices with the
attester, fetches tokens and uploads; `sagg collect --recipe` verifies the recipe and analyses
the aggregate. A report without a token is then refused by the leader and counted.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from deploy.config import Deployment
from tests.deploy.conftest import Up, age_buckets_draft
from tests.recipe.helpers import sfp_randomizer

DEVICES = 200
BATCH = 150  # asymmetric one-hot, eps0 = 2, reaches epsilon 1.5 at delta 1e-6 from B = 116 on
PRECISION = 3600


def _admin_get(deployment: Deployment, path: str) -> dict[str, Any]:
    with httpx.Client(timeout=10.0) as http:
        response = http.get(
            f"{deployment.leader}{path}",
            headers={"Authorization": f"Bearer {deployment.admin_tokens['leader']}"},
        )
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def _rejections(stats: dict[str, Any]) -> dict[str, int]:
    return {r: n for reasons in stats["rejections"].values() for r, n in reasons.items()}


@pytest.mark.slow
def test_publish_devices_collect_and_a_tokenless_report_is_refused(up: Up, tmp_path: Path) -> None:
    deployment = Deployment.model_validate_json((up.data_dir / "deployment.json").read_text())
    draft_file = tmp_path / "ages.json"
    draft_file.write_text(
        json.dumps(
            age_buckets_draft("e2e", "age buckets, one-hot", [13, 20, 30, 45, 65, 91], BATCH, 1.5)
        )
    )
    published = up.sagg("recipe", "publish", str(draft_file))
    assert published.returncode == 0, published.stderr
    summary = json.loads(published.stdout)
    task_id = summary["task_id"]

    # The task enforces the recipe: bound to its digest and the issuer's token policy.
    task = _admin_get(deployment, f"/internal/tasks/{task_id}")
    assert task["recipe_digest"] and task["tokens"]["issuer_url"] == deployment.token_issuer
    assert task["min_batch_size"] == BATCH

    devices = up.sagg(
        "devices", "run", "--recipe", "e2e.ages", "--count", str(DEVICES), "--data", "ages"
    )
    assert devices.returncode == 0, devices.stderr + devices.stdout
    uploaded = int(re.search(r"uploaded (\d+)", devices.stdout).group(1))  # type: ignore[union-attr]
    assert uploaded == DEVICES, devices.stdout

    # Every report is timed within the last hour (the run is far shorter): this interval of
    # two precisions holds them all, even if an hour boundary passed meanwhile.
    start = int(time.time()) // PRECISION * PRECISION - PRECISION
    collected = up.sagg(
        "collect",
        "--task",
        task_id,
        "--recipe",
        "e2e.ages",
        "--interval-start",
        str(start),
        "--interval-duration",
        str(2 * PRECISION),
        "--format",
        "json",
        "--wait",
        "45",
    )
    assert collected.returncode == 0, collected.stderr
    body = json.loads(collected.stdout)
    assert body["report_count"] == uploaded, body
    stats = _admin_get(deployment, f"/internal/tasks/{task_id}/stats")
    refused = _rejections(stats)
    assert not {r: n for r, n in refused.items() if "token" in r or "binding" in r}, refused

    # A device without tokens: the leader refuses its report (reportRejected), and counts it.
    tokenless = up.sagg(
        "devices",
        "run",
        "--recipe",
        "e2e.ages",
        "--count",
        "1",
        "--data",
        "ages",
        "--no-tokens",
        "--seed",
        "99",
    )
    assert "uploaded 1" not in tokenless.stdout, tokenless.stdout
    assert "reportRejected" in tokenless.stdout + tokenless.stderr, tokenless.stdout
    stats = _admin_get(deployment, f"/internal/tasks/{task_id}/stats")
    assert _rejections(stats).get("token_missing") == 1, stats["rejections"]


SFP_DEVICES = 600


def _sfp_draft() -> dict[str, Any]:
    """New words (002 §4.3): 4-character strings over a-z, the SFP randomizer at 3 + 5."""
    return {
        "recipe_id": "e2e.words",
        "version": 1,
        "analysis_id": "e2e",
        "description": "new words, sequence fragment puzzle",
        "query": {
            "stream": "keyboard",
            "fields": ["word"],
            "selection": {"kind": "random_event", "window_seconds": 86400},
        },
        "encoding": {"features": [{"kind": "string", "field": "word"}]},
        "randomizer": sfp_randomizer((3.0, 16, 64), (5.0, 16, 32), length=4, top=1000),
        "sampling_rate": 1.0,
        "min_batch_size": 100,
        "privacy": {"epsilon": 8.0, "delta": 1e-6, "analysis": "stronger_clones"},
        "task": {"time_precision": PRECISION},
    }


@pytest.mark.slow
def test_sfp_recipe_discovers_new_words_end_to_end(up: Up, tmp_path: Path) -> None:
    """An sfp recipe through the recipe server, `sagg devices run --data new_words` (half the
    devices' words are coined strings) and the aggregators; `sagg collect --recipe` decodes
    the sketches and reports the discovered words, the privacy statement and a chart."""
    draft_file = tmp_path / "words.json"
    draft_file.write_text(json.dumps(_sfp_draft()))
    published = up.sagg("recipe", "publish", str(draft_file))
    assert published.returncode == 0, published.stderr
    task_id = json.loads(published.stdout)["task_id"]
    devices = up.sagg(
        "devices",
        "run",
        "--recipe",
        "e2e.words",
        "--count",
        str(SFP_DEVICES),
        "--data",
        "new_words",
    )
    assert devices.returncode == 0, devices.stderr + devices.stdout
    uploaded = int(re.search(r"uploaded (\d+)", devices.stdout).group(1))  # type: ignore[union-attr]
    assert uploaded == SFP_DEVICES, devices.stdout

    start = int(time.time()) // PRECISION * PRECISION - PRECISION
    chart = tmp_path / "words.png"
    collected = up.sagg(
        "collect",
        "--task",
        task_id,
        "--recipe",
        "e2e.words",
        "--interval-start",
        str(start),
        "--interval-duration",
        str(2 * PRECISION),
        "--format",
        "json",
        "--chart",
        str(chart),
        "--wait",
        "60",
    )
    assert collected.returncode == 0, collected.stderr
    body = json.loads(collected.stdout)
    assert body["randomizer"] == "sfp" and body["report_count"] == uploaded
    words = {item["label"]: item for item in body["items"]}
    # "rizz" is the most common coined word (a sixth of the devices): discovered, counted.
    assert "rizz" in words, body["notes"]
    rizz = words["rizz"]
    assert 0.05 * uploaded < rizz["estimate"] < 0.4 * uploaded
    assert rizz["ci_low"] < rizz["estimate"] < rizz["ci_high"] and not rizz["below_threshold"]
    assert any("candidate words" in note for note in body["notes"])
    privacy = body["privacy"]
    assert privacy["local_epsilon"] == 8.0 and privacy["claim_met"]
    assert chart.read_bytes().startswith(b"\x89PNG")
