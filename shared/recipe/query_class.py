"""Query classes: what a device's policy approves (000 §4.2 and §4.3).

A query class is part of the device's hard-coded policy (000 §4: "encodes the immutable parts of
the policy that ships with the OS"). It lists the data stream and fields a query may read, the
selections, encodings and randomizers it may use, the non-sensitive cohort fields it may
target, and privacy bounds: the largest local epsilon (overall and per field: "any query must
satisfy the most stringent privacy conditions of any data field that is accessed", 000 §4.3),
the largest aggregate (epsilon, delta), the smallest batch size B and the largest sampling rate.

`check_query_class` is the on-device verifier of 000 §4.2: it returns every violation, so that
a refusal can say why; an empty list means the recipe's query is in the class. It checks the
recipe only; the budget accountant (dp.md §2.4: what is left of the budgets) is separate.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict, Field

from shared.recipe.model import Recipe

__all__ = ["QueryClass", "check_query_class", "matching_class"]


class QueryClass(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(min_length=1)
    #: Data streams and fields queries may read.
    streams: tuple[str, ...] = Field(min_length=1)
    fields: tuple[str, ...] = Field(min_length=1)
    #: Selection kinds (`random_event`, `random_ngram`, `latest`).
    selections: tuple[str, ...] = ("random_event", "random_ngram", "latest")
    max_ngram_n: int = Field(default=8, ge=2)
    #: Feature kinds (`buckets`, `categories`, `ngram`, `integer`, `string`) and the largest
    #: dimension.
    feature_kinds: tuple[str, ...] = ("buckets", "categories", "ngram", "integer", "string")
    max_dimension: int = Field(default=1_000_000, ge=1)
    #: Randomizer names (`one_hot`, `cms`, `hcms`, `bit_pushing`, `sfp`).
    randomizers: tuple[str, ...] = ("one_hot", "cms", "hcms", "bit_pushing", "sfp")
    #: Largest replacement-model local epsilon, overall and per field read.
    max_local_epsilon: float = Field(gt=0)
    field_max_local_epsilon: dict[str, float] = Field(default_factory=dict)
    #: Largest aggregate (epsilon, delta) a recipe may claim.
    max_epsilon: float = Field(gt=0)
    max_delta: float = Field(gt=0)
    #: The recipe's B must be at least this (000: "a pre-specified minimum size").
    min_batch_size: int = Field(default=1, ge=1)
    max_sampling_rate: float = Field(default=1.0, gt=0, le=1)
    #: Allowed analysis-id prefixes (000 appendix B: "can be part of a list hardcoded as part of
    #: the device OS"); empty allows any.
    analysis_id_prefixes: tuple[str, ...] = ()
    #: Non-sensitive fields a recipe may target cohorts by (000 §4.1).
    cohort_fields: tuple[str, ...] = ()


def check_query_class(recipe: Recipe, policy_class: QueryClass) -> list[str]:
    """Every way `recipe` falls outside `policy_class` (empty: the recipe is in the class)."""
    c = policy_class
    out: list[str] = []
    q = recipe.query
    if q.stream not in c.streams:
        out.append(f"stream {q.stream!r} is not in the class")
    for name in q.fields:
        if name not in c.fields:
            out.append(f"field {name!r} is not in the class")
    kind = q.selection.kind
    if kind not in c.selections:
        out.append(f"selection {kind!r} is not allowed")
    n = getattr(q.selection, "n", None)
    if n is not None and n > c.max_ngram_n:
        out.append(f"n-gram length {n} exceeds {c.max_ngram_n}")
    for feature in recipe.encoding.features:
        if feature.kind not in c.feature_kinds:
            out.append(f"feature kind {feature.kind!r} ({feature.field}) is not allowed")
    if recipe.encoding.dimension > c.max_dimension:
        out.append(f"encoding dimension {recipe.encoding.dimension} exceeds {c.max_dimension}")
    r = recipe.randomizer
    if r.name not in c.randomizers:
        out.append(f"randomizer {r.name!r} is not allowed")
    local = r.local_epsilon
    if local > c.max_local_epsilon:
        out.append(f"local epsilon {local:g} exceeds {c.max_local_epsilon:g}")
    for name in q.fields:
        bound = c.field_max_local_epsilon.get(name)
        if bound is not None and local > bound:
            out.append(f"local epsilon {local:g} exceeds {bound:g} allowed for field {name!r}")
    p = recipe.privacy
    if p.epsilon > c.max_epsilon:
        out.append(f"aggregate epsilon {p.epsilon:g} exceeds {c.max_epsilon:g}")
    if p.delta > c.max_delta:
        out.append(f"aggregate delta {p.delta:g} exceeds {c.max_delta:g}")
    if recipe.min_batch_size < c.min_batch_size:
        out.append(f"min_batch_size {recipe.min_batch_size} is below {c.min_batch_size}")
    if recipe.sampling_rate > c.max_sampling_rate:
        out.append(f"sampling rate {recipe.sampling_rate:g} exceeds {c.max_sampling_rate:g}")
    if c.analysis_id_prefixes and not recipe.analysis_id.startswith(c.analysis_id_prefixes):
        out.append(f"analysis id {recipe.analysis_id!r} has no allowed prefix")
    for cohort in recipe.cohorts:
        if cohort.field not in c.cohort_fields:
            out.append(f"cohort field {cohort.field!r} is not an approved non-sensitive field")
    return out


def matching_class(recipe: Recipe, classes: Sequence[QueryClass]) -> QueryClass | None:
    """The first class of the device's policy that admits the recipe, if any."""
    for c in classes:
        if not check_query_class(recipe, c):
            return c
    return None
