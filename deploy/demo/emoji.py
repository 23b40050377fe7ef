"""Popular emoji with a Count Mean Sketch (002 §2.1 and §4.1: Apple's emoji use case), on a
DAP-19 task.

Each device holds a few typed emoji (Zipf over `client_sdk.datagen.EMOJI`), picks one at random
from the last day, sketches it with CMS at local epsilon eps0 (k hash functions into m
buckets, one row reported) and uploads the row as a VDAF-20 `Prio3MultihotCountVec` report to
the recipe's DAP-19 task (DAP-19 §4.4: its TaskConfiguration in every AAD, published in the
signed recipe; the other analyses run on DAP-09 tasks in the same deployment). The
collector debiases the sketch for every candidate emoji (002 Algorithm 3) and states the
aggregate privacy of the batch; the estimates are compared with the emoji the devices really
sketched.
"""

from __future__ import annotations

from client_sdk.datagen import EMOJI, generate_events
from deploy.demo.framework import (
    AnalysisReport,
    DemoContext,
    claim_check,
    coverage_check,
    exact_check,
)
from services.collector.analysis import to_table

__all__ = ["run"]

NAME = "emoji"
#: CMS parameters: eps0 = 2 keeps B small (a few hundred reports reach epsilon = 1); k rows of
#: m buckets is a (k m + k)-long multi-hot report.
EPS0 = 2.0
K = 8
M = 32


def run(ctx: DemoContext) -> AnalysisReport:
    report = AnalysisReport(NAME, "Popular emoji: Count Mean Sketch (002 §2.1)")
    draft = ctx.draft(
        {
            "recipe_id": ctx.recipe_id(NAME),
            "version": 1,
            "analysis_id": f"demo.{NAME}",
            "description": "which emoji devices type (one random emoji of the last day, CMS)",
            "query": {
                "stream": "keyboard_emoji",
                "fields": ["emoji"],
                "selection": {"kind": "random_event", "window_seconds": 86400},
            },
            "encoding": {"features": [{"kind": "categories", "field": "emoji", "values": EMOJI}]},
            "randomizer": {"name": "cms", "eps0": EPS0, "k": K, "m": M, "seed": ctx.seed},
            "sampling_rate": 1.0,
            "privacy": ctx.scale.claim().model_dump(),
            "task": {"dap": "dap-19"},
        }
    )
    verified, published = ctx.publish(draft)
    recipe = verified.recipe
    report.lines.append(
        f"recipe {recipe.recipe_id} v{recipe.version}: signed, logged (leaf "
        f"{published['leaf_index']}), {recipe.task.dap_version} task {recipe.task.task_id} "
        f"({recipe.task.vdaf.describe()}), B = {recipe.min_batch_size} from the claim "
        f"({recipe.privacy.epsilon:g}, {recipe.privacy.delta:g})"
    )
    policy = ctx.policy([recipe])
    simulator = ctx.simulator(policy)
    count = ctx.population_size(recipe)
    if ctx.scale.streaming:
        result = ctx.stream_and_collect(verified, simulator, count, "emoji")
    else:
        rng = ctx.rng(NAME)
        devices = ctx.population(
            simulator,
            policy,
            recipe.query.stream,
            count,
            lambda now: generate_events("emoji", recipe, rng, now),
        )
        try:
            result = ctx.answer_and_collect(verified, simulator, devices)
        finally:
            simulator.close(devices)
    report.lines += result.summary.lines()
    report.lines += ["", to_table(result.analysis)]
    chart, table = ctx.write(NAME, result.analysis, result.truth)
    report.charts.append(chart)
    report.files.append(table)
    report.checks.append(
        coverage_check("CMS estimates vs the emoji sketched", result.analysis, result.truth)
    )
    report.checks += [exact_check(result), claim_check(result)]
    return report
