"""The demo framework's pure parts: population sizing, ground truth, the verdict rule."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np

from client_sdk.simulator import SimulationSummary
from deploy.demo.framework import (
    SAMPLE_SIGMAS,
    Check,
    Round,
    coverage_check,
    exact_check,
    population_for,
    truth_of,
)
from services.collector.analysis import Collection, analyze, item_labels
from shared.dp.randomizers.onehot import OneHotRandomizer as DpOneHot
from shared.recipe.model import RecipeDraft
from shared.vdaf.plain_aggregate import PlainAggregate
from tests.recipe.helpers import complete, draft_json


def test_population_reaches_b_with_margin() -> None:
    assert population_for(300, 1.0) == 300
    assert population_for(300, 1.0, floor=800) == 800
    n = population_for(300, 0.25)
    assert n * 0.25 - SAMPLE_SIGMAS * math.sqrt(n * 0.25 * 0.75) >= 300
    assert n < 1.3 * 300 / 0.25


def _recipe(randomizer: dict[str, object], feature: dict[str, object]) -> RecipeDraft:
    return RecipeDraft.model_validate(
        draft_json(
            query={"stream": "s", "fields": [feature["field"]], "selection": {"kind": "latest"}},
            cohorts=[],
            encoding={"features": [feature]},
            randomizer=randomizer,
        )
    )


def test_truth_keys_every_item_and_bit_pushing_means() -> None:
    words = complete(
        _recipe(
            {"name": "one_hot", "eps0": 2.0, "symmetric": True},
            {"kind": "categories", "field": "w", "values": ["a", "b", "c"]},
        )
    )
    summary = SimulationSummary(truth=Counter({1: 5, 3: 2}))
    assert truth_of(words, summary) == {"<OOV>": 0.0, "a": 5.0, "b": 0.0, "c": 2.0}
    values = complete(
        _recipe({"name": "bit_pushing", "eps0": 2.0}, {"kind": "integer", "field": "x", "bits": 3})
    )
    truth = truth_of(values, SimulationSummary(truth=Counter({5: 1, 2: 3})))
    assert truth == {"mean(x)": 11 / 4, "bit 0": 1 / 4, "bit 1": 3 / 4, "bit 2": 1 / 4}


def test_coverage_check_passes_the_truth_and_fails_a_wrong_one() -> None:
    recipe = _recipe(
        {"name": "one_hot", "eps0": 2.0, "symmetric": True},
        {"kind": "categories", "field": "w", "values": [f"w{i}" for i in range(9)]},
    )
    rng = np.random.default_rng(5)
    idx = rng.choice(10, size=3000, p=np.arange(10, 0, -1) / 55)
    agg = DpOneHot(2.0, 10, True).randomize(idx, rng).sum(axis=0)
    analysis = analyze(recipe, Collection(idx.size, tuple(int(v) for v in agg)))
    labels = item_labels(recipe.encoding)
    truth = {labels[i]: float(c) for i, c in enumerate(np.bincount(idx, minlength=10))}
    assert coverage_check("right", analysis, truth).passed
    wrong = {**truth, "w3": truth["w3"] + 400}
    check = coverage_check("wrong", analysis, wrong)
    assert not check.passed and "'w3'" in check.detail and "9 of 10" in check.detail


def test_exact_check_holds_a_collection_to_what_the_devices_sent() -> None:
    recipe = complete(
        _recipe(
            {"name": "one_hot", "eps0": 2.0, "symmetric": False},
            {"kind": "categories", "field": "w", "values": ["a", "b"]},
        )
    )
    vdaf = recipe.task.vdaf
    summary = SimulationSummary()
    summary.sent[recipe.task.task_id] = PlainAggregate.of(vdaf, [[1, 0, 1], [0, 0, 1]])

    def check(count: int, aggregate: tuple[int, ...], noised: bool = False) -> Check:
        noisy = recipe.model_copy(update={"aggregator_noise": object()}) if noised else recipe
        collection = Collection(count, aggregate)
        result = Round(noisy, summary, collection, analyze(recipe, collection), {})
        return exact_check(result)

    assert check(2, (1, 0, 2)).passed
    assert "2 reports collected of 2 sent" in check(2, (1, 0, 2)).detail
    # One report lost, or one coordinate off: not exact.
    assert not check(1, (1, 0, 1)).passed
    assert not check(2, (1, 1, 2)).passed
    # Aggregator noise changes the aggregate by design: only the count is held.
    assert check(2, (1, 1, 2), noised=True).passed
    assert not check(1, (1, 0, 2), noised=True).passed
