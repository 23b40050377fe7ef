"""`sagg up --demo --demo-scale large`'s path at a size a test affords: the emoji analysis with
its population streamed through `Simulator.run` (chunks, a per-worker store) instead of kept
devices, against a real `sagg up`. The verdict compares the collected, debiased sketch with
the emoji the seeded devices really sketched (the simulator's ground truth), and the report
count with the population; the time per device is printed, not asserted."""

from __future__ import annotations

import io
import time
from pathlib import Path

from deploy.config import Deployment
from deploy.demo import run_demo
from deploy.demo.framework import SCALES, DemoScale
from tests.deploy.conftest import Up

DEVICES = 1500


def test_large_scale_is_streamed() -> None:
    large = SCALES["large"]
    assert large.streaming and large.analyses == ("emoji",)
    assert large.min_devices >= 100_000


def test_streamed_emoji_analysis_matches_the_population(up: Up, tmp_path: Path) -> None:
    deployment = Deployment.model_validate_json((up.data_dir / "deployment.json").read_text())
    scale = DemoScale(
        "streaming-check",
        epsilon=1.0,
        delta=1e-6,
        min_devices=DEVICES,
        streaming=True,
        analyses=("emoji",),
    )
    out = io.StringIO()
    started = time.perf_counter()
    (report,) = run_demo(
        deployment, scale=scale, out_dir=tmp_path / "demo", seed=5, out=out, progress=None
    )
    seconds = time.perf_counter() - started
    text = out.getvalue()
    assert report.name == "emoji"
    assert report.passed, text
    assert f"devices {DEVICES}: sampled {DEVICES}" in text, text
    assert f"uploaded {DEVICES}, failed 0" in text, text
    print(
        f"streamed emoji analysis: {DEVICES} devices in {seconds:.1f} s, "
        f"{seconds / DEVICES * 1e3:.1f} ms a device (wall, shared machine)"
    )
