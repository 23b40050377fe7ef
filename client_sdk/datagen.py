"""Synthetic, seeded device data for the simulator: what a population's event stores hold.

- ``emoji`` / ``words``: one item per event, Zipf-distributed over a vocabulary (popular items
  dominate, the long tail is rare: the regime heavy-hitter recipes target, 002 §1);
- ``new_words``: half the events a Zipf draw from `NEW_WORDS` (coined strings a keyboard
  dictionary does not hold: what SFP discovers, 002 §4.3 and §6), half one from ``words``;
- ``ngrams``: typed sentences from a small keyboard corpus (a bigram chain over a word list),
  for n-gram recipes (000 §4.1 running example);
- ``ages``: integer ages 13-90, skewed young;
- ``values``: non-negative integers, log-normal, clipped to the recipe's integer range.

Each generator fills every queried field of the recipe with a value of the right shape: a
category from the recipe's own list when the feature is categorical (so the simulation hits
the buckets), a token list for an n-gram feature, a number for buckets and integers.

A population that answers several recipes (`Simulator.devices`) needs data that does not
depend on any one recipe: `keyboard_events` (typed sentences, for an interactive n-gram search
whose later recipes are built from earlier results) and `value_events` (an integer and its
square, for a mean and a variance by bit pushing, 003 §3.3).
"""

from __future__ import annotations

import math
import random
from typing import Any

from shared.recipe.model import (
    BucketFeature,
    CategoryFeature,
    IntegerFeature,
    NgramFeature,
    Recipe,
    RecipeDraft,
    StringFeature,
)

__all__ = ["GENERATORS", "NEW_WORDS", "WORDS", "generate_events", "keyboard_events", "value_events"]

GENERATORS = ("emoji", "words", "new_words", "ngrams", "ages", "values")

EMOJI = ["😂", "❤️", "🤣", "👍", "😭", "🙏", "😘", "🥰", "😍", "😊", "🎉", "🔥", "💯", "😁", "🤔"]
_CORPUS = (
    "the be to of and a in that have i it for not on with he as you do at this but "
    "his by from they we say her she or an will my one all would there their what so "
    "up out if about who get which go me when make can like time no just him know "
    "take people into"
)
WORDS = _CORPUS.split()
#: Coined strings, most popular first; none is in `WORDS`.
NEW_WORDS = [
    "rizz",
    "yeet",
    "skibid",
    "bussin",
    "gyatt",
    "delulu",
    "cheugy",
    "sheesh",
    "oomf",
    "finna",
    "glowup",
    "sksksk",
]


def _zipf(rng: random.Random, items: list[Any], s: float = 1.1) -> Any:
    weights = [1 / (i + 1) ** s for i in range(len(items))]
    return rng.choices(items, weights)[0]


def _sentence(rng: random.Random, vocabulary: list[str], length: int) -> list[str]:
    # A bigram chain: each word prefers a few successors, so some n-grams are popular.
    out = [_zipf(rng, vocabulary)]
    for _ in range(length - 1):
        base = vocabulary.index(out[-1]) if out[-1] in vocabulary else 0
        nxt = (base + 1 + int(rng.expovariate(0.7))) % len(vocabulary)
        out.append(vocabulary[nxt])
    return out


def _value(kind: str, feature: Any, rng: random.Random) -> Any:
    if isinstance(feature, CategoryFeature):
        return _zipf(rng, list(feature.values))
    if isinstance(feature, NgramFeature):
        vocab = sorted({t for p in feature.prefixes for t in p} | set(feature.known_tokens))
        if kind != "ngrams" or not vocab:
            vocab = WORDS
        return _sentence(rng, vocab, rng.randint(feature.n, feature.n + 6))
    if isinstance(feature, BucketFeature):
        if kind == "ages":
            return min(90, 13 + int(rng.expovariate(1 / 20)))
        low, high = feature.boundaries[0], feature.boundaries[-1]
        return rng.uniform(low - (high - low) * 0.05, high)
    if isinstance(feature, IntegerFeature):
        top = feature.size - 1
        if kind == "ages":
            return min(top, 13 + int(rng.expovariate(1 / 20)))
        return min(top, int(math.exp(rng.gauss(math.log(max(2, top) / 8), 1.0))))
    if kind == "new_words" and (feature is None or isinstance(feature, StringFeature)):
        return _zipf(rng, NEW_WORDS if rng.random() < 0.5 else WORDS, 1.0)
    return _zipf(rng, EMOJI if kind == "emoji" else WORDS)


def generate_events(
    kind: str, recipe: Recipe | RecipeDraft, rng: random.Random, now: int, events: int = 3
) -> list[tuple[dict[str, Any], int]]:
    """`events` records for the recipe's stream, timed within its window before `now`."""
    if kind not in GENERATORS:
        raise ValueError(f"unknown generator {kind!r}; one of {', '.join(GENERATORS)}")
    features = {f.field: f for f in recipe.encoding.features}
    window = getattr(recipe.query.selection, "window_seconds", 86400)
    out = []
    for _ in range(events):
        record = {name: _value(kind, features.get(name), rng) for name in recipe.query.fields}
        out.append((record, now - rng.randrange(max(1, window))))
    return out


def _times(rng: random.Random, now: int, window: int, events: int) -> list[int]:
    return [now - rng.randrange(max(1, window)) for _ in range(events)]


def keyboard_events(
    rng: random.Random,
    now: int,
    field: str,
    *,
    vocabulary: list[str] | None = None,
    events: int = 3,
    window: int = 86400,
) -> list[tuple[dict[str, Any], int]]:
    """`events` typed sentences (token lists in `field`) from the bigram chain over
    `vocabulary` (default `WORDS`), timed within `window` seconds before `now`."""
    words = vocabulary or WORDS
    return [
        ({field: _sentence(rng, words, rng.randint(3, 8))}, t)
        for t in _times(rng, now, window, events)
    ]


def value_events(
    rng: random.Random, now: int, bits: int, field: str, square_field: str
) -> list[tuple[dict[str, Any], int]]:
    """One record: an integer below 2^bits in `field` (Beta(1.2, 1.5) over the range: spread
    out, so its variance is a sizeable fraction of 4^bits) and its square in `square_field`
    (what a device derives to answer E[X^2], 003 §3.3)."""
    x = min((1 << bits) - 1, int(rng.betavariate(1.2, 1.5) * (1 << bits)))
    return [({field: x, square_field: x * x}, now - rng.randrange(3600))]
