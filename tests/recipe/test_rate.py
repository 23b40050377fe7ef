"""The recipe's expected report rate (001 §4.8): R = ceil(q N tp / W), its publication in the
recipe, and the device-side audit of it."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import ValidationError

from shared.b64url import b64url_encode
from shared.dap.task import RateValidation
from shared.recipe.canonical import canonical_json
from shared.recipe.model import DraftTask, Recipe, RecipeDraft
from shared.recipe.rate import expected_reports_per_bucket
from shared.recipe.signing import (
    RECIPE_SIGNATURE_CONTEXT,
    RecipeSigner,
    RecipeVerificationError,
    recipe_bytes,
    verify_signed_recipe,
)
from tests.recipe.helpers import complete, draft_json

SIGNER = RecipeSigner.from_seed(bytes(range(32)))


@pytest.mark.parametrize(
    ("q", "population", "precision", "window", "expected"),
    [
        # 1000 of 10^4 devices over a day: 41.67 per hour, rounded up.
        (0.1, 10_000, 3600, 86_400, 42),
        # Exactly 1 with q read as 3/10; 0.3 * 100 / 30 in doubles is 1.0000000000000002.
        (0.3, 10, 10, 30, 1),
        (1.0, 24, 3600, 86_400, 1),
        (1.0, 25, 3600, 86_400, 2),
        # A tiny expectation still allows M x 1 reports per bucket.
        (0.001, 10, 60, 86_400, 1),
        # A window of one bucket expects every sampled report in it.
        (0.5, 1000, 3600, 3600, 500),
    ],
)
def test_expected_reports_per_bucket(
    q: float, population: int, precision: int, window: int, expected: int
) -> None:
    assert expected_reports_per_bucket(q, population, precision, window) == expected


@pytest.mark.parametrize(
    "args",
    [
        (0.0, 10, 3600, 86_400),
        (1.5, 10, 3600, 86_400),
        (0.5, 0, 3600, 86_400),
        (0.5, 10, 3600, 1800),
    ],
)
def test_expected_rate_refuses_nonsense(args: tuple[float, int, int, int]) -> None:
    with pytest.raises(ValueError):
        expected_reports_per_bucket(*args)


def _draft(rate: dict[str, Any] | None, **task: Any) -> RecipeDraft:
    task_doc: dict[str, Any] = {"time_precision": 3600, **task}
    if rate is not None:
        task_doc["rate_validation"] = rate
    return RecipeDraft.model_validate(draft_json(task=task_doc))


def test_the_draft_derives_the_published_rate() -> None:
    # draft_json samples at q = 0.5.
    draft = _draft({"expected_population": 48_000, "collection_window": 86_400})
    published = draft.task.published_rate(draft.sampling_rate)
    assert published is not None
    assert published.expected_reports_per_bucket == 1000  # 0.5 * 48000 / 24
    assert published.setting() == RateValidation(expected_reports_per_bucket=1000, max_multiple=2)
    assert published.setting().max_reports_per_bucket == 2000
    # The window defaults to the task's lifetime; M is the analyst's.
    draft = _draft({"expected_population": 48_000, "max_multiple": 1.5}, expires_in=2 * 86_400)
    published = draft.task.published_rate(draft.sampling_rate)
    assert published is not None
    assert (published.collection_window, published.expected_reports_per_bucket) == (172_800, 500)
    assert published.setting().max_reports_per_bucket == 750
    assert _draft(None).task.published_rate(0.5) is None


@pytest.mark.parametrize(
    ("rate", "message"),
    [
        ({"expected_population": 1000}, "collection_window"),
        ({"expected_population": 1000, "collection_window": 600}, "below time_precision"),
        ({"expected_population": 0, "collection_window": 86_400}, "greater than or equal to 1"),
        (
            {"expected_population": 10, "collection_window": 86_400, "max_multiple": 0.9},
            "greater than or equal to 1",
        ),
        ({"expected_population": 10, "window": 86_400}, "window"),
    ],
)
def test_bad_rate_estimates_are_refused(rate: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        _draft(rate)


def _published() -> Recipe:
    draft = _draft({"expected_population": 48_000, "collection_window": 86_400})
    recipe = complete(draft)
    published = draft.task.published_rate(draft.sampling_rate)
    return recipe.model_copy(
        update={"task": recipe.task.model_copy(update={"rate_validation": published})}
    )


def test_the_rate_is_signed_and_a_device_audits_it() -> None:
    recipe = Recipe.model_validate(_published().model_dump(mode="json"))
    assert recipe.task.rate_validation is not None
    doc = SIGNER.sign_recipe(recipe).to_json_value()
    verified, canonical = verify_signed_recipe(json.dumps(doc), SIGNER.public_key)
    assert verified.task.rate_validation == recipe.task.rate_validation
    assert b'"expected_reports_per_bucket":1000' in canonical
    assert b'"max_multiple":2}' in canonical

    # A signer (compromised or buggy) that publishes a laxer R than q N tp / W gives: signed,
    # but every device refuses the recipe.
    raw = recipe.model_dump(mode="json", exclude_none=True)
    raw["task"]["rate_validation"]["expected_reports_per_bucket"] = 5000
    signature = SIGNER.sign(RECIPE_SIGNATURE_CONTEXT, canonical_json(raw))
    forged = {"recipe": raw, "key_id": SIGNER.key_id, "signature": b64url_encode(signature)}
    with pytest.raises(RecipeVerificationError, match="does not follow"):
        verify_signed_recipe(forged, SIGNER.public_key)


def test_a_recipe_without_rate_validation_keeps_its_bytes() -> None:
    """Recipes signed before rate validation existed encode (and so verify) as before."""
    recipe = complete(_draft(None))
    assert recipe.task.rate_validation is None
    assert b"rate_validation" not in recipe_bytes(recipe)
    assert DraftTask().rate_validation is None
