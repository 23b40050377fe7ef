"""Query-class verification (000 §4.2): in-class recipes pass, each violation is named."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from client_sdk.policy import TrustedParties
from shared.recipe.model import Recipe
from shared.recipe.query_class import QueryClass, check_query_class, matching_class
from tests.recipe.helpers import draft_json, example_recipe

# 000 Table 1 style: n-grams local eps 5 (here replacement), bucketed age local 2... per field.
KEYBOARD = QueryClass(
    name="keyboard-ngrams",
    streams=("keyboard",),
    fields=("age", "typed_ngrams"),
    selections=("random_ngram",),
    max_ngram_n=3,
    feature_kinds=("buckets", "ngram"),
    max_dimension=10_000,
    randomizers=("one_hot",),
    max_local_epsilon=5.0,
    field_max_local_epsilon={"age": 2.0},
    max_epsilon=1.0,
    max_delta=1e-6,
    min_batch_size=1000,
    max_sampling_rate=0.5,
    analysis_id_prefixes=("keyboard.",),
    cohort_fields=("locale",),
)


def _with(**overrides: Any) -> Recipe:
    return example_recipe(**overrides)


def test_in_class() -> None:
    assert check_query_class(_with(), KEYBOARD) == []
    assert matching_class(_with(), [KEYBOARD]) is KEYBOARD


def test_each_violation_is_reported() -> None:
    cases: list[tuple[dict[str, Any], str]] = [
        ({"analysis_id": "ads.ngrams"}, "analysis id"),
        ({"sampling_rate": 0.9}, "sampling rate"),
        ({"min_batch_size": 10}, "min_batch_size 10"),
        ({"privacy": {"epsilon": 2.0, "delta": 1e-8}}, "aggregate epsilon"),
        ({"privacy": {"epsilon": 1.0, "delta": 1e-4}}, "aggregate delta"),
        ({"randomizer": {"name": "one_hot", "eps0": 3.0}}, "local epsilon 6 exceeds 5"),
        ({"randomizer": {"name": "cms", "eps0": 1.0, "k": 4, "m": 16}}, "randomizer 'cms'"),
        ({"cohorts": [{"field": "country", "values": ["FR"]}]}, "cohort field 'country'"),
    ]
    for override, reason in cases:
        problems = check_query_class(_with(**override), KEYBOARD)
        assert any(reason in p for p in problems), (override, problems)


def test_field_budget_is_the_most_stringent() -> None:
    # eps0 1.5 per bit = 3 replacement: within the class's 5 but not the age field's 2.
    problems = check_query_class(_with(randomizer={"name": "one_hot", "eps0": 1.5}), KEYBOARD)
    assert problems == ["local epsilon 3 exceeds 2 allowed for field 'age'"]


def test_query_outside_the_class() -> None:
    doc = draft_json()
    doc["query"]["stream"] = "messages"
    doc["query"]["fields"] = ["age", "typed_ngrams", "contacts"]
    problems = check_query_class(_with(query=doc["query"]), KEYBOARD)
    assert "stream 'messages' is not in the class" in problems
    assert "field 'contacts' is not in the class" in problems
    latest = {
        "stream": "keyboard",
        "fields": ["age", "typed_ngrams"],
        "selection": {"kind": "latest"},
    }
    problems = check_query_class(_with(query=latest), KEYBOARD)
    assert problems == ["selection 'latest' is not allowed"]
    assert matching_class(_with(query=latest), [KEYBOARD]) is None


def test_the_device_policy_pins_aggregators_and_issuers() -> None:
    """Leaders, helpers and token issuers are pinned by the device policy, not per query
    class, and there is no empty list that would allow any."""
    trusted = TrustedParties(
        leaders=("https://leader.example",),
        helpers=("https://helper.example",),
        token_issuers=("https://issuer.example/",),
    )
    assert trusted.problems(_with()) == []
    narrow = trusted.model_copy(update={"helpers": ("https://other-helper.example",)})
    assert narrow.problems(_with()) == [
        "helper https://helper.example is not pinned by the device policy"
    ]
    for empty in ("leaders", "helpers", "token_issuers"):
        with pytest.raises(ValidationError):
            TrustedParties.model_validate({**trusted.model_dump(), empty: []})
