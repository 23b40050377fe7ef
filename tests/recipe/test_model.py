"""Recipe model: 000 appendix B's example, validation messages, encoding, VDAF and privacy."""

from __future__ import annotations

import math

import pytest
from pydantic import ValidationError

from shared.dap.task import AggregatorNoise
from shared.dp import amplification as amp
from shared.dp.aggregator_noise import noise_guarantee
from shared.dp.composition import cdp_eps
from shared.dp.gaussian import analytic_gaussian_sigma
from shared.dp.policy import TrustModel
from shared.recipe.accounting import (
    assess_privacy,
    check_recipe_claims,
    expected_vdaf,
    noise_problems,
    required_batch_size,
    trust_model_guarantees,
)
from shared.recipe.model import PrivacyClaim, Recipe, RecipeDraft
from shared.recipe.signing import recipe_bytes
from shared.vdaf.spec import VdafSpec
from tests.recipe.helpers import KNOWN, draft_json, example_recipe


def test_appendix_b_dimension() -> None:
    recipe = example_recipe()
    # 000 appendix B counts (1 + 7) x (1 + 3 x (1 + 1 + 9)) bins; its age boundaries 20..80
    # make six intervals, so here OOV + 6 = 7 age buckets.
    assert recipe.encoding.dimension == (1 + 6) * (1 + 3 * (1 + 1 + 9))
    ages, ngrams = recipe.encoding.features
    assert ages.size == 7  # OOV + 6 intervals from 7 boundaries
    assert ngrams.size == 1 + 3 * (1 + 1 + len(KNOWN))
    assert recipe.encoding.dimension == ages.size * ngrams.size


def test_one_hot_index() -> None:
    enc = example_recipe().encoding
    n = enc.features[1].size
    assert enc.index({"age": 25, "typed_ngrams": ["hello", "world", "a"]}) == 1 * n + 3
    assert enc.index({"age": 79.5, "typed_ngrams": ["i", "got"]}) == 6 * n + 1 + 11  # end token
    assert enc.index({"age": 80, "typed_ngrams": ["i", "got", "zebra"]}) == 0 * n + 1 + 11 + 1
    assert enc.index({"age": 19, "typed_ngrams": ["not", "known", "a"]}) == 0
    assert enc.index({}) == 0
    seen = {
        enc.index({"age": a, "typed_ngrams": [*p, t]})
        for a in (10, 25, 35, 45, 55, 65, 75)
        for p in (["hello", "world"], ["i", "got"], ["how", "are"])
        for t in [*KNOWN, "oov"]
    }
    assert max(seen) < enc.dimension


@pytest.mark.parametrize(
    ("override", "field"),
    [
        ({"sampling_rate": 0}, "sampling_rate"),
        ({"sampling_rate": 1.5}, "sampling_rate"),
        ({"min_batch_size": 0}, "min_batch_size"),
        ({"randomizer": {"name": "one_hot", "eps0": 0}}, "eps0"),
        ({"privacy": {"epsilon": 1, "delta": 0.01}}, "delta"),
        ({"privacy": {"epsilon": 1, "delta": 0}}, "delta"),
        ({"recipe_id": "Bad Id"}, "recipe_id"),
        ({"surprise": 1}, "surprise"),
    ],
)
def test_invalid_parameters_name_the_field(override: dict[str, object], field: str) -> None:
    with pytest.raises(ValidationError) as info:
        RecipeDraft.model_validate(draft_json(**override))
    assert field in str(info.value)


def test_structural_consistency() -> None:
    doc = draft_json()
    doc["query"]["fields"] = ["typed_ngrams"]  # the age feature reads an unqueried field
    with pytest.raises(ValidationError, match=r"not in query\.fields"):
        RecipeDraft.model_validate(doc)
    doc = draft_json()
    doc["query"]["selection"]["n"] = 2
    with pytest.raises(ValidationError, match="same n"):
        RecipeDraft.model_validate(doc)
    doc = draft_json(cohorts=[{"field": "age", "values": ["x"]}])
    with pytest.raises(ValidationError, match="cohort field"):
        RecipeDraft.model_validate(doc)
    doc = draft_json(randomizer={"name": "cms", "eps0": 2, "k": 4, "m": 16})
    doc["privacy"]["analysis"] = "sym_rappor_exact"
    with pytest.raises(ValidationError, match="symmetric one_hot"):
        RecipeDraft.model_validate(doc)


def test_expected_vdaf_per_randomizer() -> None:
    recipe = example_recipe()
    spec = expected_vdaf(recipe.randomizer, recipe.encoding)
    assert spec.type == "Prio3MultiHotHistogram" and spec.length == recipe.encoding.dimension
    hcms = RecipeDraft.model_validate(
        draft_json(randomizer={"name": "hcms", "eps0": 2, "k": 4, "m": 8})
    )
    assert expected_vdaf(hcms.randomizer, hcms.encoding).length == 2 * 4 * 8
    bp = draft_json(
        randomizer={"name": "bit_pushing", "eps0": 1},
        encoding={"features": [{"kind": "integer", "field": "age", "bits": 8}]},
    )
    bp["query"] = {"stream": "profile", "fields": ["age"], "selection": {"kind": "latest"}}
    bp_draft = RecipeDraft.model_validate(bp)
    assert expected_vdaf(bp_draft.randomizer, bp_draft.encoding).length == 16


def test_privacy_claim_against_the_library() -> None:
    recipe = example_recipe()
    claim = recipe.privacy
    needed = required_batch_size(recipe.randomizer, recipe.sampling_rate, claim)
    assert needed is not None
    # Independently: aggregation at delta/q must reach ln(1 + (e^eps - 1)/q).
    q = recipe.sampling_rate

    target = math.log1p(math.expm1(claim.epsilon) / q)
    direct = amp.min_batch_size(2.0, target, claim.delta / q, "stronger_clones")
    assert needed == direct
    assert assess_privacy(recipe.model_copy(update={"min_batch_size": needed})).claim_met
    below = assess_privacy(recipe.model_copy(update={"min_batch_size": needed - 1}))
    assert not below.claim_met and below.required_batch_size == needed
    # Sampling helps: without it a larger batch is needed.
    unsampled = required_batch_size(recipe.randomizer, 1.0, claim)
    assert unsampled is not None and unsampled > needed


def test_closed_form_outside_its_regime_is_not_met() -> None:
    recipe = example_recipe()
    claim = PrivacyClaim(epsilon=1.0, delta=1e-8, analysis="closed_form")
    closed = {"privacy": claim, "min_batch_size": 10, "sampling_rate": 1.0}
    assert not assess_privacy(recipe.model_copy(update=closed)).claim_met


def test_device_rechecks_the_claims() -> None:
    recipe = example_recipe()
    assert check_recipe_claims(recipe) == []
    small = recipe.model_copy(update={"min_batch_size": 100})
    (problem,) = check_recipe_claims(small)
    assert "B=100" in problem
    vdaf = recipe.task.vdaf
    assert vdaf.max_count is not None
    wider = VdafSpec(
        type=vdaf.type,
        length=vdaf.length,
        chunk_length=vdaf.chunk_length,
        max_count=vdaf.max_count + 1,
    )
    other_vdaf = recipe.task.model_copy(update={"vdaf": wider})
    problems = check_recipe_claims(recipe.model_copy(update={"task": other_vdaf}))
    assert len(problems) == 1 and "task VDAF" in problems[0]


def sfp_json(**randomizer: object) -> dict[str, object]:
    """002 §4.3 as a recipe: new words typed this week, one string feature, the SFP randomizer."""
    params: dict[str, object] = {
        "name": "sfp",
        "length": 6,
        "fragment_length": 2,
        "alphabet": "abcdefghijklmnopqrstuvwxyz ",
        "pad": " ",
        "word": {"eps0": 0.5, "k": 16, "m": 64, "seed": 1},
        "fragment": {"eps0": 1.0, "k": 16, "m": 32, "seed": 2},
        "top": 1000,
    }
    params.update(randomizer)
    doc = draft_json(
        randomizer=params, encoding={"features": [{"kind": "string", "field": "word"}]}
    )
    doc["query"] = {
        "stream": "keyboard",
        "fields": ["word"],
        "selection": {"kind": "random_event", "window_seconds": 7 * 86400},
    }
    doc["cohorts"] = []
    return doc


def test_sfp_recipe_vdaf_and_composed_epsilon() -> None:
    draft = RecipeDraft.model_validate(sfp_json())
    r = draft.randomizer
    assert r.name == "sfp" and r.local_epsilon == 1.5  # eps + eps', 002 Theorem 4.5
    spec = expected_vdaf(r, draft.encoding)
    assert spec.type == "Prio3MultiHotHistogram"
    assert spec.length == 16 * 64 + 16 + 3 * (16 * 32 + 16)
    # The accounting takes eps0 = eps + eps': the same B as any 1.5-LDP randomizer.
    q, claim = draft.sampling_rate, draft.privacy
    needed = required_batch_size(r, q, claim)
    target = math.log1p(math.expm1(claim.epsilon) / q)
    assert needed == amp.min_batch_size(1.5, target, claim.delta / q, "stronger_clones")
    cms = RecipeDraft.model_validate(
        draft_json(randomizer={"name": "cms", "eps0": 1.5, "k": 4, "m": 16})
    )
    assert needed == required_batch_size(cms.randomizer, q, claim)
    assert assess_privacy(draft.model_copy(update={"min_batch_size": needed})).claim_met
    assert not assess_privacy(draft.model_copy(update={"min_batch_size": needed - 1})).claim_met
    # Signed and logged like the others: the canonical form round-trips.
    assert RecipeDraft.model_validate_json(draft.model_dump_json()) == draft


@pytest.mark.parametrize(
    ("randomizer", "message"),
    [
        ({"length": 7}, "multiple of fragment_length"),
        ({"alphabet": "abca "}, "must not repeat"),
        ({"alphabet": "ab\ncd "}, "printable"),
        ({"pad": "_"}, "pad must be a character"),
        (
            {
                "fragment_length": 3,
                "length": 6,
                "alphabet": "abcdefghijklmnopqrstuvwxyz0123456789 ",
            },
            "fragments per position",
        ),
        ({"top": 256 * 3**2 + 1, "alphabet": "ab "}, "possible fragments"),
        ({"top": 100_001}, "less than or equal"),
        ({"word": {"eps0": 1, "k": 1024, "m": 1024}}, "measurement length"),
        # 002's deployed parameters: 12.6 million coordinates (shared.dp.vdaf_mapping).
        (
            {
                "length": 10,
                "word": {"eps0": 2, "k": 2048, "m": 1024},
                "fragment": {"eps0": 6, "k": 2048, "m": 1024},
            },
            "12595200 exceeds",
        ),
        ({"word": {"eps0": 0, "k": 4, "m": 16}}, "eps0"),
        ({"fragment": {"eps0": 1, "k": 4, "m": 1}}, "m"),
    ],
)
def test_sfp_parameters_are_validated(randomizer: dict[str, object], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        RecipeDraft.model_validate(sfp_json(**randomizer))


def test_string_features_and_sfp_go_together() -> None:
    doc = sfp_json()
    doc["randomizer"] = {"name": "cms", "eps0": 2, "k": 4, "m": 16}
    with pytest.raises(ValidationError, match="string features are only for sfp"):
        RecipeDraft.model_validate(doc)
    doc = sfp_json()
    doc["encoding"] = {"features": [{"kind": "categories", "field": "word", "values": ["a"]}]}
    with pytest.raises(ValidationError, match="exactly one string feature"):
        RecipeDraft.model_validate(doc)
    draft = RecipeDraft.model_validate(sfp_json())
    (feature,) = draft.encoding.features
    assert draft.encoding.dimension == 1
    with pytest.raises(ValueError, match="sketches it"):
        feature.bucket("word")


# --- aggregator noise (004 §5: client randomization, aggregator randomization or both) ----------


def _noise_setting(recipe_vdaf: VdafSpec, eps: float, delta: float) -> dict[str, object]:
    """A discrete Gaussian whose exact guarantee on `recipe_vdaf` is at most (eps, delta)."""
    sens = math.sqrt(min(2 * (recipe_vdaf.max_count or 1), recipe_vdaf.length or 1))
    sigma = analytic_gaussian_sigma(eps, delta, sens) * 1.5  # the zCDP bound needs more
    return {"mechanism": "discrete_gaussian", "sigma": f"{sigma:.4f}"}


def test_aggregator_noise_is_signed_and_optional() -> None:
    recipe = example_recipe()
    assert b"aggregator_noise" not in recipe_bytes(recipe)  # older signatures still verify
    noise = _noise_setting(recipe.task.vdaf, 1.0, 1e-8)
    noisy = example_recipe(aggregator_noise=noise)
    assert noisy.aggregator_noise == AggregatorNoise.model_validate(noise)
    assert b'"aggregator_noise":{"mechanism":"discrete_gaussian"' in recipe_bytes(noisy)
    assert Recipe.model_validate_json(recipe_bytes(noisy)) == noisy
    with pytest.raises(ValidationError, match="sigma"):
        example_recipe(aggregator_noise={"mechanism": "discrete_gaussian", "scale": "2"})


def test_claim_may_rest_on_the_aggregator_noise() -> None:
    """B = 100 is far from amplifying to the claim; one honest aggregator's noise meets it, under
    OAMC and OAOC alike, and the device's own check agrees. Weak noise does not."""
    recipe = example_recipe(min_batch_size=100)
    vdaf, claim, q = recipe.task.vdaf, recipe.privacy, recipe.sampling_rate
    assert not assess_privacy(recipe).claim_met
    setting = AggregatorNoise.model_validate(_noise_setting(vdaf, 1.0, 1e-8))
    noisy = example_recipe(min_batch_size=100, aggregator_noise=setting.model_dump())
    assessed = assess_privacy(recipe.model_copy(update={"aggregator_noise": setting}), vdaf)
    central = noise_guarantee(setting, vdaf, claim.delta)
    assert central is not None and "zCDP" in central.basis  # a multi-hot histogram moves many
    rho = min(2 * (vdaf.max_count or 0), vdaf.length or 0) / (2 * float(setting.parameter))
    assert central.eps == pytest.approx(cdp_eps(rho, claim.delta), rel=1e-12)
    assert assessed.claim_met and (assessed.epsilon, assessed.delta) == (central.eps, 1e-8)
    assert check_recipe_claims(noisy) == []
    lines = trust_model_guarantees(recipe, 100, setting, vdaf)
    assert lines[TrustModel.OAMC].eps == lines[TrustModel.OAOC].eps == central.eps
    assert lines[TrustModel.OC].eps == recipe.randomizer.local_epsilon
    # Weak noise: neither mechanism reaches the claim, and the needed B is amplification's.
    weak = AggregatorNoise(mechanism="discrete_gaussian", sigma="3")
    failed = assess_privacy(recipe.model_copy(update={"aggregator_noise": weak}), vdaf)
    assert not failed.claim_met
    assert failed.required_batch_size == required_batch_size(recipe.randomizer, q, claim)
    weak_recipe = example_recipe(min_batch_size=100, aggregator_noise=weak.model_dump())
    assert any("B=100" in p for p in check_recipe_claims(weak_recipe))
    # With a large B, amplification is the stronger OAMC guarantee; OAOC still rests on noise.
    big = trust_model_guarantees(recipe, 10**6, setting, vdaf)
    assert big[TrustModel.OAMC].basis.startswith("amplification")
    assert big[TrustModel.OAOC].basis.startswith("aggregator noise")


def test_a_calibration_below_the_vdafs_sensitivity_is_refused() -> None:
    """The model checks sigma against the stated sensitivity; accounting checks the stated
    sensitivity against what a valid report of the task's VDAF can move (here sqrt(2) < it)."""
    recipe = example_recipe()
    sigma = analytic_gaussian_sigma(1.0, 1e-8, math.sqrt(2))
    understated = {
        "mechanism": "discrete_gaussian",
        "sigma": f"{sigma * 1.001:.4f}",
        "epsilon": 1.0,
        "delta": 1e-8,
        "sensitivity": math.sqrt(2),
    }
    noisy = example_recipe(aggregator_noise=understated)
    (problem,) = noise_problems(noisy.aggregator_noise, recipe.task.vdaf, 1e-8)  # type: ignore[arg-type]
    assert "more than its stated epsilon=1" in problem
    assert problem in check_recipe_claims(noisy)


def test_dummy_rate_is_signed_optional_and_needs_a_zero_measurement() -> None:
    """001 §4.6's q': left out of the canonical bytes when absent (older signatures verify),
    signed when present; only with q < 1 (else no device is left to send dummies) and a task
    VDAF with a measurement that adds nothing (a Histogram report is exactly one bucket)."""
    assert b"dummy_rate" not in recipe_bytes(example_recipe())
    recipe = example_recipe(sampling_rate=0.5, min_batch_size=6000, dummy_rate=0.25)
    assert b'"dummy_rate":0.25' in recipe_bytes(recipe)
    assert Recipe.model_validate_json(recipe_bytes(recipe)) == recipe
    with pytest.raises(ValidationError, match="dummy_rate needs sampling_rate < 1"):
        example_recipe(sampling_rate=1.0, dummy_rate=0.25)
    with pytest.raises(ValidationError, match="less than or equal to 1"):
        example_recipe(sampling_rate=0.5, dummy_rate=1.5)
    body = recipe.model_dump(mode="json", exclude_none=True)
    body["task"]["vdaf"] = VdafSpec.of_histogram(5, 2).model_dump(exclude_none=True)
    with pytest.raises(ValidationError, match="has no measurement that adds nothing"):
        Recipe.model_validate(body)
