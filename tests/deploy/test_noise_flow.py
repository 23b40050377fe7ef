"""Aggregator noise (004 §5) end to end against `sagg up`: a plain noisy task and a noisy recipe.

`sagg task create --aggregator-noise` provisions the noise into collector, leader and helper;
both aggregators noise their aggregate shares; `sagg collect` reads the task from the collector
(``GET /internal/tasks/{id}``), decodes signed values and states the noise in the standard
errors and the privacy statement. A recipe whose B alone is too small for its claim publishes
because its aggregator noise meets it; devices report; `sagg collect --recipe` states the
combined guarantee. An unknown task is a one-line error.
"""

from __future__ import annotations

import json
import math
import re
import time
from collections import Counter
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest

from client_sdk.upload import ClientTask, upload_reports
from services.collector.analysis import PLAIN_TASK_DELTA
from shared.dap.ids import TaskId
from shared.dap.task import AggregatorNoise
from shared.dp.aggregator_noise import noise_guarantee
from shared.recipe.accounting import expected_vdaf
from shared.recipe.model import RecipeDraft
from shared.vdaf.spec import VdafSpec
from tests.deploy.conftest import Up, collect_args

REPORTS = 60
BUCKETS = 4
PRECISION = 60
SIGMA = "3"
DEVICES = 60
RECIPE_PRECISION = 3600


def _recipe_draft() -> dict[str, Any]:
    """B = 40 amplifies only to epsilon ~2 (116 would be needed for 1.5); sigma 12 on the
    6-bucket multi-hot histogram gives ~0.92 at delta 1e-6 (zCDP)."""
    return {
        "recipe_id": "e2e.noisy-ages",
        "version": 1,
        "analysis_id": "e2e",
        "query": {"stream": "profile", "fields": ["age"], "selection": {"kind": "latest"}},
        "encoding": {
            "features": [
                {"kind": "buckets", "field": "age", "boundaries": [13, 20, 30, 45, 65, 91]}
            ]
        },
        "randomizer": {"name": "one_hot", "eps0": 2.0, "symmetric": False},
        "sampling_rate": 1.0,
        "min_batch_size": 40,
        "privacy": {"epsilon": 1.5, "delta": 1e-6, "analysis": "stronger_clones"},
        "aggregator_noise": {"mechanism": "discrete_gaussian", "sigma": "12"},
        "task": {"time_precision": RECIPE_PRECISION},
    }


def _collect(up: Up, task_id: str, start: int, duration: int, *extra: str) -> Any:
    done = up.sagg(*collect_args(task_id, start, duration, "--wait", "60", *extra))
    assert done.returncode == 0, done.stderr
    return done


@pytest.mark.slow
@pytest.mark.parametrize("dap", ["09", "19"])
def test_noisy_task_and_noisy_recipe_through_sagg_collect(up: Up, tmp_path: Path, dap: str) -> None:
    unknown = TaskId.random().to_b64url()
    missing = up.sagg("collect", "--task", unknown, "--current-batch", "--wait", "1")
    assert missing.returncode == 1
    assert missing.stderr.strip() == f"sagg: unknown task {unknown}: the collector has no such task"

    noise = {"mechanism": "discrete_gaussian", "sigma": SIGMA}
    vdaf: dict[str, Any] = {"type": "Prio3Histogram", "length": BUCKETS, "chunk_length": 2}
    if dap == "19":
        vdaf["version"] = "VDAF-20"
    created = up.sagg(
        "task",
        "create",
        "--dap",
        dap,
        "--vdaf",
        json.dumps(vdaf),
        "--min-batch-size",
        str(REPORTS),
        "--time-precision",
        str(PRECISION),
        "--aggregator-noise",
        json.dumps(noise),
    )
    assert created.returncode == 0, created.stderr
    info: dict[str, Any] = json.loads(created.stdout)
    assert info["aggregator_noise"] == noise
    # Bucket 3 stays empty: its noisy total is below 0 about half the time, which only signed
    # decoding turns into a small negative number instead of p - |total|.
    measurements = [i % 3 for i in range(REPORTS)]
    now = int(time.time())
    start = now - now % PRECISION
    result = upload_reports(ClientTask.model_validate(info), measurements, report_time=now)
    assert (result.uploaded, result.rejected) == (REPORTS, [])
    counts = Counter(measurements)

    body = json.loads(_collect(up, info["task_id"], start, PRECISION, "--format", "json").stdout)
    assert body["randomizer"] == "none" and body["report_count"] == REPORTS
    sd = math.sqrt(2) * float(SIGMA)  # two aggregators, N_Z(0, sigma^2) each
    for item in body["items"]:
        truth = counts[item["index"]]
        assert abs(item["estimate"] - truth) < 8 * sd, item  # signed: never near p
        assert item["stderr"] == pytest.approx(sd, rel=1e-12)
        assert item["ci_low"] < item["estimate"] < item["ci_high"]
    setting = AggregatorNoise.model_validate(noise)
    want = noise_guarantee(setting, VdafSpec.model_validate(vdaf), PLAIN_TASK_DELTA)
    assert want is not None
    lines = body["privacy"]["guarantees"]
    assert [g["trust_model"] for g in lines] == ["OAMC", "OAOC"]
    assert all((g["epsilon"], g["delta"]) == (want.eps, want.delta) for g in lines)
    table = _collect(up, info["task_id"], start, PRECISION).stdout
    assert f"epsilon={want.eps:.4g}" in table and "no guarantee" in table

    # A recipe whose claim rests on its aggregator noise.
    document = _recipe_draft()
    document["task"]["dap"] = f"dap-{dap}"
    draft = RecipeDraft.model_validate(document)
    draft_file = tmp_path / "noisy.json"
    draft_file.write_text(json.dumps(document))
    published = up.sagg("recipe", "publish", str(draft_file))
    assert published.returncode == 0, published.stderr
    task_id = json.loads(published.stdout)["task_id"]
    devices = up.sagg(
        "devices", "run", "--recipe", draft.recipe_id, "--count", str(DEVICES), "--data", "ages"
    )
    assert devices.returncode == 0, devices.stderr + devices.stdout
    uploaded = int(re.search(r"uploaded (\d+)", devices.stdout).group(1))  # type: ignore[union-attr]
    assert uploaded == DEVICES, devices.stdout
    begin = int(time.time()) // RECIPE_PRECISION * RECIPE_PRECISION - RECIPE_PRECISION
    done = _collect(
        up, task_id, begin, 2 * RECIPE_PRECISION, "--recipe", draft.recipe_id, "--format", "json"
    )
    analysis = json.loads(done.stdout)
    assert analysis["report_count"] == DEVICES
    privacy = analysis["privacy"]
    spec = expected_vdaf(draft.randomizer, draft.encoding, "VDAF-20" if dap == "19" else "VDAF-08")
    assert draft.aggregator_noise is not None
    central = noise_guarantee(draft.aggregator_noise, spec, draft.privacy.delta)
    assert central is not None and central.eps < draft.privacy.epsilon
    by_model = {g["trust_model"]: g for g in privacy["guarantees"]}
    assert (by_model["OAOC"]["epsilon"], by_model["OAOC"]["basis"]) == (central.eps, central.basis)
    assert by_model["OAMC"]["epsilon"] == privacy["epsilon"] <= central.eps
    assert by_model["OC"]["epsilon"] == draft.randomizer.local_epsilon
    assert privacy["claim_met"] is True
    # The noise is in every standard error: above the randomizer's alone, by the debias gain.
    noise_var = 2 * float(Fraction(12) ** 2)
    assert all(item["stderr"] ** 2 > noise_var for item in analysis["items"])
