"""Mean and variance of a number with bit pushing (003 §3.1, §3.3 and the LDP variant §3.3).

Each device holds an integer x below 2^BITS (synthetic: `client_sdk.datagen.value_events`)
and, derived from it, x^2. The same population answers two recipes: the mean of x (BITS-bit
bit pushing: one bit j per device, drawn with p_j proportional to 2^j, through randomized
response at eps0) and the mean of x^2 (2 BITS bits). The variance is then E[X^2] - E[X]^2
(003 §3.3's second estimator), with a delta-method standard error from the two independent
collections' standard errors. Both recipes are charged to the devices' budgets, and the
composed guarantee is stated.
"""

from __future__ import annotations

import math
from typing import Any

from client_sdk.datagen import value_events
from deploy.demo.framework import (
    AnalysisReport,
    Check,
    DemoContext,
    Round,
    claim_check,
    coverage_check,
    exact_check,
)
from services.collector.analysis import to_table
from shared.dp.estimators import z_value

__all__ = ["run"]

NAME = "moments"
BITS = 5
EPS0 = 3.0
FIELD = "minutes"
SQUARE = "minutes_sq"
STREAM = "usage"
#: The population is at least this many times the scale's floor: a variance needs many more
#: reports than a mean (003 §4 uses 100,000 clients for it).
POPULATION_FACTOR = 3
ALPHA = 1e-3


def _body(ctx: DemoContext, name: str, field: str, bits: int) -> dict[str, Any]:
    return {
        "recipe_id": ctx.recipe_id(name),
        "version": 1,
        "analysis_id": f"demo.{NAME}",
        "description": f"mean of {field} by bit pushing ({bits} bits, randomized response)",
        "query": {"stream": STREAM, "fields": [field], "selection": {"kind": "latest"}},
        "encoding": {"features": [{"kind": "integer", "field": field, "bits": bits}]},
        "randomizer": {"name": "bit_pushing", "eps0": EPS0},
        "sampling_rate": 1.0,
        "privacy": ctx.scale.claim().model_dump(),
    }


def _mean(result: Round, field: str) -> tuple[float, float, float]:
    """(estimate, standard error, truth) of the mean item of a bit-pushing round."""
    item = next(it for it in result.analysis.items if it.label == f"mean({field})")
    return item.estimate, item.stderr, result.truth[item.label]


def run(ctx: DemoContext) -> AnalysisReport:
    report = AnalysisReport(NAME, "Mean and variance by bit pushing (003 §3)")
    mean_v, _ = ctx.publish(ctx.draft(_body(ctx, f"{NAME}.mean", FIELD, BITS)))
    square_v, _ = ctx.publish(ctx.draft(_body(ctx, f"{NAME}.square", SQUARE, 2 * BITS)))
    recipes = (mean_v.recipe, square_v.recipe)
    count = max(ctx.population_size(r, POPULATION_FACTOR) for r in recipes)
    for r in recipes:
        report.lines.append(
            f"recipe {r.recipe_id}: task {r.task.task_id} ({r.task.vdaf.describe()}), "
            f"B = {r.min_batch_size} from the claim ({r.privacy.epsilon:g}, {r.privacy.delta:g})"
        )
    # Budget for exactly these two reports per device.
    policy = ctx.policy(recipes, rounds=2)
    simulator = ctx.simulator(policy)
    rng = ctx.rng(NAME)
    devices = ctx.population(
        simulator, policy, STREAM, count, lambda now: value_events(rng, now, BITS, FIELD, SQUARE)
    )
    try:
        first = ctx.answer_and_collect(mean_v, simulator, devices)
        second = ctx.answer_and_collect(square_v, simulator, devices)
        composed = ctx.composition_lines((first, second), devices[0], f"demo.{NAME}")
    finally:
        simulator.close(devices)

    for label, result in (("mean", first), ("mean of squares", second)):
        report.lines += ["", f"--- {label}: {result.recipe.recipe_id}", *result.summary.lines()]
        report.lines += ["", to_table(result.analysis)]
        chart, table = ctx.write(
            result.recipe.recipe_id.split(".", 2)[2], result.analysis, result.truth
        )
        report.charts.append(chart)
        report.files.append(table)
        report.checks.append(
            coverage_check(f"{label}: estimates vs the truth", result.analysis, result.truth)
        )

    m1, se1, t1 = _mean(first, FIELD)
    m2, se2, t2 = _mean(second, SQUARE)
    variance = m2 - m1 * m1
    # Delta method; the two collections' randomizations are independent.
    se = math.sqrt(se2 * se2 + (2 * m1 * se1) ** 2)
    truth = t2 - t1 * t1
    z = z_value(1 - ALPHA)
    report.lines += [
        "",
        f"mean of {FIELD}:     {m1:.3f} ± {1.96 * se1:.3f} (95%); truth {t1:.3f}",
        f"variance of {FIELD}: {variance:.3f} ± {1.96 * se:.3f} (95%); truth {truth:.3f} "
        f"(E[X^2] - E[X]^2, 003 §3.3)",
        *composed,
    ]
    report.checks.append(
        Check(
            "variance vs the truth",
            abs(variance - truth) <= z * se,
            f"|{variance:.3f} - {truth:.3f}| = {abs(variance - truth):.3f} <= {z:.2f} x "
            f"{se:.3f} (level {1 - ALPHA:g})",
        )
    )
    report.checks += [exact_check(first), exact_check(second)]
    report.checks += [claim_check(first), claim_check(second)]
    return report
