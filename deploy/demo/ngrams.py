"""Popular n-grams, interactively: 000's running example (§1, §4.1), in three rounds.

Each device holds a few typed sentences (`client_sdk.datagen.keyboard_events`: a bigram chain
over a small vocabulary, so some n-grams are popular). The analyst knows a dictionary of
tokens (`KNOWN`; other typed words are OOV) and refines a prefix tree level by level with
`shared.dp.heavy_hitters.prefix_tree_heavy_hitters`, whose frequency oracle here is a whole
round trip through the deployment:

1. 1-grams: a recipe whose n-gram feature has the root as its only prefix; every device sends
   one random word it typed, one-hot encoded, through symmetric RAPPOR;
2. 2-grams under the significant words: the next recipe's prefix tree holds them (at most
   `MAX_SURVIVORS`), and a device sends a random 2-gram starting with one of them (000 §4.1);
3. 3-grams under the significant 2-grams, likewise.

Each recipe is built from the previous round's collected result. The same devices answer all
three, and their budget accountants admit exactly three reports (000 §4.3, Table 1): a
fourth query is refused on the device. Each round's estimates are compared with the n-grams
the devices really encoded; the verdict also asks that every n-gram whose true count clears the
detection threshold by a wide margin was found.
"""

from __future__ import annotations

import string
from typing import Any

import numpy as np
from scipy import special

from client_sdk.datagen import WORDS, keyboard_events
from client_sdk.device import Device
from client_sdk.recipes import VerifiedRecipe
from client_sdk.simulator import Simulator
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
from shared.dp.estimators import Estimate
from shared.dp.heavy_hitters import prefix_tree_heavy_hitters
from shared.recipe.model import RecipeDraft

__all__ = ["run"]

NAME = "ngrams"
ROUNDS = 3
#: The words the population types, and the analyst's dictionary (the rest is OOV).
VOCABULARY = WORDS[:16]
KNOWN = tuple(VOCABULARY[:14])
#: Symmetric RAPPOR per bit at eps0 (local epsilon 2 eps0), analysed exactly (004 §6.1.1).
EPS0 = 2.0
#: One-sided level at which an n-gram counts as found, and the most prefixes kept per level.
LEVEL = 0.999
MAX_SURVIVORS = 6
#: An n-gram whose truth exceeds the threshold by this many standard errors must be found.
MARGIN = 3.5
#: Populations of this many times the scale's floor: the rarer n-grams need the reports.
POPULATION_FACTOR = 3
#: One character per known token: the alphabet `prefix_tree_heavy_hitters` extends by.
ALPHABET = string.ascii_letters[: len(KNOWN)]


def _tokens(item: str) -> tuple[str, ...]:
    return tuple(KNOWN[ALPHABET.index(c)] for c in item)


def _draft(ctx: DemoContext, n: int, prefixes: list[tuple[str, ...]]) -> RecipeDraft:
    body: dict[str, Any] = {
        "recipe_id": ctx.recipe_id(f"{NAME}.{n}"),
        "version": 1,
        "analysis_id": f"demo.{NAME}",
        "description": f"a random {n}-gram typed this week under the prefix tree (000 §4.1)",
        "query": {
            "stream": "keyboard",
            "fields": ["text"],
            "selection": {
                "kind": "random_ngram",
                "field": "text",
                "n": n,
                "window_seconds": 7 * 86400,
            },
        },
        "encoding": {
            "features": [
                {
                    "kind": "ngram",
                    "field": "text",
                    "n": n,
                    "prefixes": [list(p) for p in prefixes],
                    "known_tokens": list(KNOWN),
                }
            ]
        },
        "randomizer": {"name": "one_hot", "eps0": EPS0, "symmetric": True},
        "sampling_rate": 1.0,
        "privacy": ctx.scale.claim("sym_rappor_exact").model_dump(),
    }
    return ctx.draft(body)


class _Oracle:
    """`prefix_tree_heavy_hitters`' frequency oracle: one published, answered, collected and
    analysed recipe per level, on one population."""

    def __init__(self, ctx: DemoContext, simulator: Simulator, devices: list[Device]) -> None:
        self.ctx, self.simulator, self.devices = ctx, simulator, devices
        self.rounds: list[Round] = []
        self.missed: list[list[str]] = []
        self.verified: list[VerifiedRecipe] = []

    def __call__(self, depth: int, candidates: list[str]) -> Estimate:
        prefixes = list(dict.fromkeys(_tokens(c[:-1]) for c in candidates))
        verified, _ = self.ctx.publish(_draft(self.ctx, depth + 1, prefixes))
        result = self.ctx.answer_and_collect(verified, self.simulator, self.devices)
        self.rounds.append(result)
        self.verified.append(verified)
        by_label = {it.label: it for it in result.analysis.items}
        items = [by_label[" ".join(_tokens(c))] for c in candidates]
        est = Estimate(
            np.array([it.estimate for it in items]), np.array([it.stderr for it in items])
        )
        found = est.significant(LEVEL)
        z = float(special.ndtri(LEVEL))
        self.missed.append(
            [
                it.label
                for it, f in zip(items, found, strict=True)
                if not f and result.truth.get(it.label, 0.0) > (z + MARGIN) * it.stderr
            ]
        )
        return est


def run(ctx: DemoContext) -> AnalysisReport:
    report = AnalysisReport(NAME, "Popular n-grams in three interactive rounds (000 §1, §4.1)")
    first = _draft(ctx, 1, [()])
    # Every round has the same randomizer and claim, hence the same B.
    count = ctx.population_size(first, POPULATION_FACTOR)
    policy = ctx.policy([first], rounds=ROUNDS)
    simulator = ctx.simulator(policy)
    rng = ctx.rng(NAME)
    devices = ctx.population(
        simulator,
        policy,
        "keyboard",
        count,
        lambda now: keyboard_events(rng, now, "text", vocabulary=VOCABULARY),
    )
    oracle = _Oracle(ctx, simulator, devices)
    try:
        found = prefix_tree_heavy_hitters(
            oracle, ALPHABET, ROUNDS, level=LEVEL, max_survivors=MAX_SURVIVORS
        )
        last = oracle.verified[-1] if oracle.verified else None
        refusal = devices[0].budget.check(last.recipe, last.canonical) if last else []
        composed = ctx.composition_lines(oracle.rounds, devices[0], f"demo.{NAME}")
    finally:
        simulator.close(devices)
    for result in oracle.rounds:
        recipe = result.recipe
        feature = recipe.encoding.features[0]
        report.lines += [
            "",
            f"--- round {len(report.charts) + 1}: {recipe.recipe_id} "
            f"(task {recipe.task.task_id}, {recipe.task.vdaf.describe()}, "
            f"B = {recipe.min_batch_size})",
            f"prefix tree leaves: {len(getattr(feature, 'prefixes', ()))}, known tokens "
            f"{len(KNOWN)}, one-hot dimension {recipe.encoding.dimension}",
            *result.summary.lines(),
            "",
            to_table(result.analysis, max_rows=15),
        ]
        chart, table = ctx.write(recipe.recipe_id.split(".", 2)[2], result.analysis, result.truth)
        report.charts.append(chart)
        report.files.append(table)
        n = len(report.charts)
        report.checks += [
            coverage_check(f"round {n}: estimates vs the truth", result.analysis, result.truth),
            exact_check(result),
            claim_check(result),
        ]
    for n, missed in enumerate(oracle.missed, 1):
        report.checks.append(
            Check(
                f"round {n}: discovery",
                not missed,
                f"every {n}-gram whose true count clears the threshold by {MARGIN:g} standard "
                "errors was found" + (f"; missed {missed}" if missed else ""),
            )
        )
    report.checks.append(
        Check(
            "rounds",
            len(oracle.rounds) == ROUNDS,
            f"{len(oracle.rounds)} of {ROUNDS} rounds ran (each built on the last one's result)",
        )
    )
    report.checks.append(
        Check(
            "device budget",
            any(p.startswith("check 1") for p in refusal),
            "after the rounds a device refuses another query: "
            + ("; ".join(refusal) if refusal else "it does NOT"),
        )
    )
    truth = oracle.rounds[-1].truth if oracle.rounds else {}
    report.lines += ["", f"popular {ROUNDS}-grams found (estimate ± 95%, truth):"]
    for hit in found:
        label = " ".join(_tokens(hit.item))
        report.lines.append(
            f"  {label:<24} {hit.count:8.1f} ± {1.96 * hit.stderr:6.1f}   {truth.get(label, 0):.0f}"
        )
    report.lines += composed
    return report
