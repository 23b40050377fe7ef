"""`sagg up --demo` end to end: every analysis of `deploy.demo.ANALYSES` through real processes.

`sagg up --demo --demo-scale small --exit-after-demo` starts leader, helper, collector, token
issuer and recipe server as processes on free ports with SQLite stores, runs each analysis
(recipes published and signed, simulated devices verifying them, enrolling, fetching tokens and
uploading, collections aggregated and analysed), and exits 1 if any analysis' estimates miss
the simulator's ground truth. The test checks the exit status, every analysis' verdict line and
that every chart it names is a complete PNG.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image

from deploy.demo import ANALYSES
from tests.collector.test_charts import png_size
from tests.deploy.conftest import free_port_args, quick_env

#: The whole small demo takes about a minute on an idle 2-core machine.
TIMEOUT = 420


@pytest.mark.slow
def test_small_demo_runs_every_analysis_and_each_passes(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    out_dir = tmp_path / "charts"
    env = quick_env()
    ports = free_port_args()
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "deploy.cli",
            "up",
            "--data-dir",
            str(data_dir),
            *ports,
            "--demo",
            "--demo-scale",
            "small",
            "--demo-out",
            str(out_dir),
            "--exit-after-demo",
        ],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )
    out = done.stdout
    assert done.returncode == 0, out[-4000:] + done.stderr[-4000:]
    assert f"demo: {len(ANALYSES)} of {len(ANALYSES)} analyses pass" in out, out[-4000:]
    # Every collected round is exactly what its devices sent (no demo recipe noises).
    rounds = out.count("] privacy claim of ")
    assert rounds >= len(ANALYSES) and out.count("[PASS] exact aggregate of ") == rounds, out
    # The emoji analysis runs on a DAP-19 task beside the DAP-09 ones (issue #15.5).
    assert re.search(r"recipe demo\.\w+\.emoji v1: .* dap-19 task ", out), out[-4000:]
    for name in ANALYSES:
        section = out.split(f"[{name}]\n", 1)
        assert len(section) == 2, f"no report for {name}"
        body = section[1].split("verdict: ", 1)
        assert body[1].startswith("PASS"), body[0][-3000:]
        assert "[FAIL]" not in body[0] and "[PASS]" in body[0]
        assert "privacy: (" in body[0] and "recipe claims" in body[0]
        charts = [Path(p) for p in re.findall(r"^chart  (.+)$", body[0], re.MULTILINE)]
        assert charts, f"{name} wrote no chart"
        for chart in charts:
            assert chart.parent == out_dir
            width, height = png_size(chart)
            assert width > 100 and height > 100
            with Image.open(chart) as image:
                image.verify()
