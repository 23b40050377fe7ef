"""`sagg up --demo` (`make demo`): the papers' analyses, end to end through every service.

Each analysis is a module with ``run(ctx: DemoContext) -> AnalysisReport``
(`deploy.demo.framework`); `ANALYSES` lists them in the order the demo runs them. `run_demo`
runs them against a deployment, prints each report as it completes (estimates against the
simulator's ground truth, the privacy statement, the charts written) and returns the reports.
"""

from __future__ import annotations

import importlib
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

from client_sdk.http import http_client
from deploy.collect import CollectError
from deploy.config import Deployment
from deploy.demo.compose import demo_recipe
from deploy.demo.framework import SCALES, AnalysisReport, DemoContext, DemoError, DemoScale
from deploy.recipes import RecipeError

__all__ = ["ANALYSES", "AnalysisReport", "DemoError", "demo_recipe", "run_demo"]

#: Analysis name -> module of `deploy.demo` with its `run`, in demo order.
ANALYSES: dict[str, str] = {
    "ngrams": "deploy.demo.ngrams",
    "emoji": "deploy.demo.emoji",
    "moments": "deploy.demo.moments",
    "new_words": "deploy.demo.new_words",
}


def run_demo(
    deployment: Deployment,
    *,
    scale: str | DemoScale = "full",
    out_dir: Path,
    seed: int = 0,
    only: Sequence[str] | None = None,
    out: TextIO = sys.stdout,
    progress: TextIO | None = sys.stderr,
) -> list[AnalysisReport]:
    """Run the analyses (all, or those named in `only`) in `ANALYSES` order."""
    if isinstance(scale, str):
        if scale not in SCALES:
            raise DemoError(f"unknown demo scale {scale!r}; one of {', '.join(SCALES)}")
        scale = SCALES[scale]
    only = only or scale.analyses
    names = list(ANALYSES) if not only else [n for n in ANALYSES if n in only]
    unknown = sorted(set(only or ()) - set(ANALYSES))
    if unknown:
        raise DemoError(f"unknown analyses {', '.join(unknown)}; one of {', '.join(ANALYSES)}")
    reports: list[AnalysisReport] = []
    # Recipe ids are unique per run: a demo may run again against the same deployment.
    tag = time.strftime("%Y%m%d%H%M%S", time.gmtime())
    with http_client(deployment.transport, timeout=60.0) as http:
        ctx = DemoContext(deployment, out_dir, seed, scale, tag, http, progress)
        for name in names:
            module = importlib.import_module(ANALYSES[name])
            started = time.perf_counter()
            try:
                report: AnalysisReport = module.run(ctx)
            except (DemoError, RecipeError, CollectError) as exc:
                raise DemoError(f"{name}: {exc}") from None
            report.lines.append(f"({time.perf_counter() - started:.0f} s)")
            print(report.text(), file=out, flush=True)
            reports.append(report)
    passed = sum(r.passed for r in reports)
    print(f"demo: {passed} of {len(reports)} analyses pass", file=out, flush=True)
    return reports
