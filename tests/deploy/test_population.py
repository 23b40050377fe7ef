"""A seeded population against `sagg up`: split over worker processes, the same aggregate.

`sagg devices run --seed S` simulates a population whose data, coins and noise follow from S
(`client_sdk.population`), so one process, `--workers 2` and two runs `--shard 0/2` and
`--shard 1/2` send the same measurements: the collected aggregates are equal, count for count.
The oracle for what the population holds is its synthetic data regenerated from the seed
(`client_sdk.datagen`), bucketed by hand; the debiased estimates must lie within a few standard
errors of those true counts.
"""

from __future__ import annotations

import json
import re
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from client_sdk.datagen import generate_events
from client_sdk.population import device_random
from shared.recipe.model import RecipeDraft
from tests.deploy.conftest import Up, age_buckets_draft, collect_args

DEVICES = 200
BATCH = 150  # asymmetric one-hot, eps0 = 2: epsilon 1.5 at delta 1e-6 from B = 116 on
PRECISION = 3600
SEED = 20261124
BOUNDARIES = [13, 20, 30, 45, 65, 91]


def _publish(up: Up, tmp_path: Path, name: str) -> str:
    draft = tmp_path / f"{name}.json"
    draft.write_text(json.dumps(age_buckets_draft(name, "ages", BOUNDARIES, BATCH, 1.5)))
    published = up.sagg("recipe", "publish", str(draft))
    assert published.returncode == 0, published.stderr
    task_id: str = json.loads(published.stdout)["task_id"]
    return task_id


def _start() -> int:
    """The start of the two hours around now that a test collects (computed once a test: a
    second collection of a batch must name the same interval)."""
    return int(time.time()) // PRECISION * PRECISION - PRECISION


def _collect(up: Up, task_id: str, recipe_id: str, start: int) -> dict[str, Any]:
    args = collect_args(task_id, start, 2 * PRECISION, "--recipe", recipe_id)
    collected = up.sagg(*args, "--format", "json", "--wait", "60")
    assert collected.returncode == 0, collected.stderr
    body: dict[str, Any] = json.loads(collected.stdout)
    return body


def _true_buckets(recipe: RecipeDraft) -> Counter[int]:
    """Each device's latest age (its `latest` selection), bucketed as 000 appendix B says:
    bucket 0 out of range, bucket b for BOUNDARIES[b-1] <= age < BOUNDARIES[b]."""
    truth: Counter[int] = Counter()
    for device in range(DEVICES):
        events = generate_events("ages", recipe, device_random(SEED, "data", device), 10**9)
        # The latest event; among equal times, the one added last.
        _, latest = max((t, i) for i, (_, t) in enumerate(events))
        value = events[latest][0]["age"]
        bucket = next(
            (b for b in range(1, len(BOUNDARIES)) if BOUNDARIES[b - 1] <= value < BOUNDARIES[b]),
            0,
        )
        truth[bucket] += 1
    return truth


@pytest.mark.slow
def test_two_workers_send_what_one_process_sends(up: Up, tmp_path: Path) -> None:
    one = _publish(up, tmp_path, "one")
    two = _publish(up, tmp_path, "two")
    three = _publish(up, tmp_path, "three")
    sent = {name: tmp_path / f"{name}.sent.json" for name in ("one", "two", "three0", "three1")}
    runs = {
        "one.ages": up.sagg(
            "devices", "run", "--recipe", "one.ages", "--count", str(DEVICES),
            "--data", "ages", "--seed", str(SEED), "--summary-json", str(sent["one"]),
        ),
        "two.ages": up.sagg(
            "devices", "run", "--recipe", "two.ages", "--count", str(DEVICES),
            "--data", "ages", "--seed", str(SEED), "--workers", "2",
            "--summary-json", str(sent["two"]),
        ),
    }  # fmt: skip
    for name, run in runs.items():
        assert run.returncode == 0, name + run.stderr + run.stdout
        found = re.search(r"uploaded (\d+)", run.stdout)
        assert found is not None and int(found.group(1)) == DEVICES, run.stdout
    # Two machines, each its share: together the same population.
    shares = [
        up.sagg(
            "devices", "run", "--recipe", "three.ages", "--count", str(DEVICES),
            "--data", "ages", "--seed", str(SEED), "--shard", f"{i}/2",
            "--summary-json", str(sent[f"three{i}"]),
        )
        for i in range(2)
    ]  # fmt: skip
    uploaded = [int(re.findall(r"uploaded (\d+)", r.stdout)[0]) for r in shares]
    assert sum(uploaded) == DEVICES and min(uploaded) > 0

    start = _start()
    bodies = [_collect(up, task, f"{name}.ages", start) for task, name in
              ((one, "one"), (two, "two"), (three, "three"))]  # fmt: skip
    first = bodies[0]
    assert [b["report_count"] for b in bodies] == [DEVICES] * 3
    estimates = [[item["estimate"] for item in body["items"]] for body in bodies]
    assert estimates[0] == estimates[1] == estimates[2]
    # Exact: what was collected is what the devices sent, count for count (the simulators'
    # plain-text totals; the two shards' added).
    totals = {name: _sent(path, task) for name, path, task in (
        ("one", sent["one"], one), ("two", sent["two"], two),
        ("three0", sent["three0"], three), ("three1", sent["three1"], three),
    )}  # fmt: skip
    shards = [a + b for a, b in zip(totals["three0"], totals["three1"], strict=True)]
    raw = [_raw(up, task, start)["result"] for task in (one, two, three)]
    assert raw == [totals["one"], totals["two"], shards]
    assert json.loads(sent["one"].read_text())["sent"][one]["reports"] == DEVICES

    draft = age_buckets_draft("one", "ages", BOUNDARIES, BATCH, 1.5)
    truth = _true_buckets(RecipeDraft.model_validate(draft))
    assert sum(truth.values()) == DEVICES
    # Six estimates at once: each within 4 standard errors (a miss has probability < 4e-4).
    for item in first["items"]:
        true = truth.get(item["index"], 0)
        assert abs(item["estimate"] - true) <= 4 * item["stderr"], (item, truth)


def _raw(up: Up, task_id: str, start: int) -> dict[str, Any]:
    collected = up.sagg(*collect_args(task_id, start, 2 * PRECISION), "--format", "json")
    assert collected.returncode == 0, collected.stderr
    body: dict[str, Any] = json.loads(collected.stdout)
    return body


def _sent(path: Path, task_id: str) -> list[int]:
    """The aggregate a simulator's `--summary-json` says its devices sent to `task_id`."""
    sent: list[int] = json.loads(path.read_text())["sent"][task_id]["aggregate"]
    return sent


def _count(pattern: str, text: str) -> int:
    found = re.search(pattern, text)
    assert found is not None, text
    return int(found.group(1))


@pytest.mark.slow
def test_dummy_reports_add_nothing_and_replayed_tokens_are_refused(up: Up, tmp_path: Path) -> None:
    """The same seeded population (a quarter offline, q = 1/2) twice: once plain, once with
    the recipe's dummy reports (q' = 1/2) and a tenth of the devices malicious. The aggregate
    is the same count for count (dummies are zeros, every replay is refused); only the batch is
    larger, by the dummies uploaded."""
    tasks = {}
    for name in ("plain", "mixed"):
        draft = age_buckets_draft(name, "ages", BOUNDARIES, 60, 1.5)
        draft["sampling_rate"] = 0.5
        if name == "mixed":
            draft["dummy_rate"] = 0.5
        (tmp_path / f"{name}.json").write_text(json.dumps(draft))
        published = up.sagg("recipe", "publish", str(tmp_path / f"{name}.json"))
        assert published.returncode == 0, published.stderr
        tasks[name] = json.loads(published.stdout)["task_id"]
    common = ["--count", str(DEVICES), "--data", "ages", "--seed", str(SEED), "--offline", "0.25"]
    summaries = {name: tmp_path / f"{name}.sent.json" for name in tasks}
    plain = up.sagg(
        "devices",
        "run",
        "--recipe",
        "plain.ages",
        *common,
        "--summary-json",
        str(summaries["plain"]),
    )
    mixed = up.sagg(
        "devices", "run", "--recipe", "mixed.ages", *common, "--malicious", "0.1",
        "--summary-json", str(summaries["mixed"]),
    )  # fmt: skip
    assert plain.returncode == 0 and mixed.returncode == 0, plain.stderr + mixed.stderr
    offline = _count(r"offline (\d+)", mixed.stdout)
    assert 0 < offline < DEVICES / 2
    sampled = _count(r"sampled (\d+)", plain.stdout)
    assert sampled == _count(r"sampled (\d+)", mixed.stdout)
    assert sampled + _count(r"not sampled (\d+)", plain.stdout) + offline == DEVICES
    dummies = _count(r"dummy reports \d+ \(uploaded (\d+)\)", mixed.stdout)
    assert dummies > 0
    replays = re.findall(r"adversary x(\d+): token replay: (\w+)", mixed.stdout)
    assert replays and all(outcome == "refused" for _, outcome in replays), mixed.stdout

    start = _start()
    first, second = _raw(up, tasks["plain"], start), _raw(up, tasks["mixed"], start)
    assert first["report_count"] == sampled
    assert second["report_count"] == sampled + dummies
    assert first["result"] == second["result"]
    # ... and is what each population sent (the dummies' zeros counted among the reports).
    for name, body in (("plain", first), ("mixed", second)):
        total = json.loads(summaries[name].read_text())["sent"][tasks[name]]
        assert (body["result"], body["report_count"]) == (total["aggregate"], total["reports"])
