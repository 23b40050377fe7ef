"""Running a recipe's query on the device: selection, encoding, local randomization and the
mapping to the VDAF measurement (000 §4.1, §4.4 and appendix B; 004 §6).

1. Selection (`select_record`): which record of the event store answers the query:
   ``random_event`` a uniformly random event of the window; ``latest`` the most recent one;
   ``random_ngram`` a uniformly random n-gram typed in the window whose (n-1)-gram prefix is
   a leaf of the recipe's prefix tree, else a random n-gram (000 footnote 3: "sending nothing
   can itself be disclosive"). A text field holds a token list or a whitespace-separated
   string; an n-gram may end with the sentence (n-1 tokens, the encoding's end token). With no
   data at all the record is empty, which every bucketed feature encodes as OOV.
2. Encoding: `Encoding.index(record)`, the one-hot index (000 appendix B).
3. Local randomization with the recipe's randomizer (`shared.dp.randomizers`), batched over
   many devices' indices for the simulator (each index still gets its own independent noise).
4. The VDAF measurement (`shared.dp.vdaf_mapping`): what is secret-shared. It is already
   randomized, so it is what the audit log may show.

For CMS / HCMS the sketched item is the one-hot index (its decimal string hashed by
`item_keys`), so the server side hashes candidate indices the same way.
For SFP (002 §4.3) the answer is the string itself, not an index: `encode_record` returns the
queried string field, and a value that is missing, not a string, or has a character outside
the recipe's alphabet is answered as the empty string (all pad; the collector labels it OOV),
since refusing would itself disclose (000 footnote 3). `SequenceFragmentPuzzle.randomize` pads
or truncates it to the recipe's length and produces the report that `vdaf_mapping.encode_sfp`
lays out.
Bit pushing picks bit j with p_j proportional to 2^j (003's one-round weighting with alpha = 1;
the recipe format has no alpha): the collector's estimate uses per-bit means, so any fixed
weighting is unbiased.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from client_sdk.errors import ClientError
from client_sdk.events import EventStore
from shared.dp import vdaf_mapping
from shared.dp.randomizers.bitpushing import BitPushing, weighted_probabilities
from shared.dp.randomizers.cms import CountMeanSketch, HadamardCountMeanSketch, item_keys
from shared.dp.randomizers.onehot import OneHotRandomizer as DpOneHot
from shared.recipe.model import (
    BitPushingRandomizer,
    CmsRandomizer,
    HcmsRandomizer,
    IntegerFeature,
    LatestValueSelection,
    NgramFeature,
    OneHotRandomizer,
    RandomEventSelection,
    RandomNgramSelection,
    Recipe,
    SfpRandomizer,
)

__all__ = [
    "Answer",
    "Measurement",
    "NoDataError",
    "encode_record",
    "randomize_indices",
    "select_record",
]

Measurement = int | list[int]
#: What a device answers before randomization: a one-hot index (the integer itself for bit
#: pushing), or the string for SFP.
Answer = int | str


class NoDataError(ClientError, ValueError):
    """The query cannot be answered from this device's data (e.g. an integer feature with no
    value: there is no OOV bucket to fall back to)."""


def _tokens(value: object) -> list[str]:
    if isinstance(value, str):
        return value.split()
    if isinstance(value, Sequence):
        return [str(v) for v in value]
    return []


def _ngrams(tokens: list[str], n: int) -> list[tuple[str, ...]]:
    grams = [tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)]
    if n > 1 and len(tokens) >= n - 1:
        # Ends with the sentence; a 1-gram cannot (the empty gram is no typed word).
        grams.append(tuple(tokens[len(tokens) - (n - 1) :]))
    return grams


def select_record(
    recipe: Recipe, events: EventStore, now: int, rng: random.Random
) -> dict[str, Any]:
    """The record that answers the query (step 1 of the module docstring)."""
    query = recipe.query
    sel = query.selection
    if isinstance(sel, LatestValueSelection):
        return events.latest(query.stream, now) or {}
    assert isinstance(sel, RandomEventSelection | RandomNgramSelection)
    records = events.records(query.stream, now - sel.window_seconds, now)
    if isinstance(sel, RandomEventSelection):
        return dict(rng.choice(records)) if records else {}
    feature = next(f for f in recipe.encoding.features if f.field == sel.field)
    assert isinstance(feature, NgramFeature)
    leaves = set(feature.prefixes)
    matching: list[tuple[dict[str, Any], tuple[str, ...]]] = []
    every: list[tuple[dict[str, Any], tuple[str, ...]]] = []
    for record in records:
        for gram in _ngrams(_tokens(record.get(sel.field)), sel.n):
            every.append((record, gram))
            if gram[: sel.n - 1] in leaves:
                matching.append((record, gram))
    pool = matching or every
    if not pool:
        return {}
    record, gram = rng.choice(pool)
    return {**record, sel.field: gram}


def encode_record(recipe: Recipe, record: Mapping[str, Any]) -> Answer:
    """The one-hot index (the integer value itself for bit pushing; the string for SFP)."""
    features = recipe.encoding.features
    r = recipe.randomizer
    if isinstance(r, SfpRandomizer):
        value = record.get(features[0].field)
        if not isinstance(value, str) or any(ch not in r.alphabet for ch in value):
            return ""
        return value
    if any(isinstance(f, IntegerFeature) for f in features) and any(
        record.get(f.field) is None for f in features
    ):
        raise NoDataError("no value for the queried integer field")
    try:
        return recipe.encoding.index(record)
    except ValueError as exc:
        raise NoDataError(str(exc)) from None


def randomize_indices(
    recipe: Recipe, indices: Sequence[Answer], rng: np.random.Generator
) -> list[Measurement]:
    """Steps 3 and 4 for a batch of devices' answers: the randomized VDAF measurements."""
    r = recipe.randomizer
    if not indices:
        return []
    if isinstance(r, SfpRandomizer):
        if not all(isinstance(i, str) for i in indices):
            raise TypeError("sfp answers are strings (encode_record)")
        sfp = r.puzzle()
        words = [str(i) for i in indices]
        return list(vdaf_mapping.encode_sfp(sfp, sfp.randomize(words, rng)))
    if not all(isinstance(i, int) for i in indices):
        raise TypeError(f"{r.name} answers are one-hot indices (encode_record)")
    ints = [int(i) for i in indices]
    if isinstance(r, OneHotRandomizer):
        one_hot = DpOneHot(r.eps0, recipe.encoding.dimension, r.symmetric)
        return list(vdaf_mapping.encode_one_hot(one_hot.randomize(ints, rng)))
    if isinstance(r, CmsRandomizer):
        cms = CountMeanSketch(r.eps0, r.k, r.m, r.seed)
        return list(vdaf_mapping.encode_cms(cms, cms.randomize(item_keys(ints), rng)))
    if isinstance(r, HcmsRandomizer):
        hcms = HadamardCountMeanSketch(r.eps0, r.k, r.m, r.seed)
        return list(vdaf_mapping.encode_hcms(hcms, hcms.randomize(item_keys(ints), rng)))
    assert isinstance(r, BitPushingRandomizer)
    feature = recipe.encoding.features[0]
    assert isinstance(feature, IntegerFeature)
    bp = BitPushing(feature.bits, r.eps0)
    probabilities = weighted_probabilities(feature.bits, 1.0)
    return list(vdaf_mapping.encode_bit_pushing(bp.randomize(ints, probabilities, rng)))
