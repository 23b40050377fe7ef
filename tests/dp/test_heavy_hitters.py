"""SFP and prefix-tree heavy hitters on seeded Zipf vocabularies."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from shared.dp.estimators import Estimate
from shared.dp.heavy_hitters import (
    prefix_tree_heavy_hitters,
    sfp_candidate_estimates,
    sfp_heavy_hitters,
)
from shared.dp.randomizers.cms import CountMeanSketch, item_keys
from shared.dp.randomizers.sfp import SequenceFragmentPuzzle, SfpSketches, puzzle_hash
from shared.dp.vdaf_mapping import encode_sfp_array, sfp_sketches_from_aggregate

LETTERS = "abcdefgh"


def zipf_words(
    rng: np.random.Generator, n: int, vocab_size: int = 40
) -> tuple[list[str], list[str]]:
    vocab = sorted(
        {"".join(rng.choice(list(LETTERS), rng.integers(3, 7))) for _ in range(vocab_size)}
    )
    p = 1 / np.arange(1, len(vocab) + 1) ** 1.1
    idx = rng.choice(len(vocab), n, p=p / p.sum())
    return vocab, [vocab[i] for i in idx]


def test_sfp_recovers_the_heavy_words_without_false_positives():
    rng = np.random.default_rng(10)
    vocab, words = zipf_words(rng, 20_000)
    sfp = SequenceFragmentPuzzle(
        LETTERS + " ",
        word_sketch=CountMeanSketch(4.0, 32, 256, seed=1),
        fragment_sketch=CountMeanSketch(6.0, 32, 256, seed=2),
        length=6,
    )
    assert sfp.eps == 10.0
    assert sfp.report_bits() == 2 + 2 * (5 + 256)
    found = sfp_heavy_hitters(sfp, sfp.randomize(words, rng), top=40)
    counts = Counter(words)
    names = [h.item for h in found]
    assert {w for w, _ in counts.most_common(5)} <= set(names)
    assert set(names) <= set(vocab)
    for h in found[:5]:
        assert abs(h.count - counts[h.item]) < 4 * h.stderr


def test_sfp_validates_inputs():
    with pytest.raises(ValueError):
        SequenceFragmentPuzzle("abc", CountMeanSketch(1, 2, 4), CountMeanSketch(1, 2, 4), 6)
    sfp = SequenceFragmentPuzzle(
        "abc ", CountMeanSketch(1, 2, 4), CountMeanSketch(1, 2, 4), length=4
    )
    assert sfp.normalise("ab") == "ab  "
    assert sfp.normalise("abcabc") == "abca"
    with pytest.raises(ValueError):
        sfp.normalise("xyz")
    assert list(sfp.starts) == [0, 2]
    assert puzzle_hash(["ab  "])[0] == puzzle_hash(["ab  "])[0]


def test_prefix_tree_refinement_with_a_cms_oracle_per_level():
    rng = np.random.default_rng(11)
    length = 4
    vocab = ["abca", "bbad", "cadd", "dabc", "aaaa"]
    p = np.array([0.35, 0.25, 0.2, 0.15, 0.05])
    n = 40_000
    words = [vocab[i] for i in rng.choice(len(vocab), n, p=p)]
    # Each client answers for one level only: its prefix of that length.
    level_of = rng.integers(0, length, n)
    sketches = []
    for depth in range(length):
        cms = CountMeanSketch(3.0, 16, 128, seed=100 + depth)
        mine = [w[: depth + 1] for w, d in zip(words, level_of, strict=True) if d == depth]
        reports = cms.randomize(item_keys(mine), rng)
        sketches.append((cms, cms.sketch(reports), len(mine)))

    def oracle(depth: int, prefixes: list[str]) -> Estimate:
        cms, sketch, m = sketches[depth]
        est = cms.estimate(sketch, m, item_keys(prefixes))
        # Scale the level's sub-population up to all clients.
        return Estimate(est.value * length, est.stderr * length)

    found = prefix_tree_heavy_hitters(oracle, "abcd", length, level=0.9999, floor=n * 0.02)
    names = {h.item for h in found}
    assert {"abca", "bbad", "cadd", "dabc"} <= names
    assert names <= set(vocab)
    counts = Counter(words)
    for h in found:
        assert abs(h.count - counts[h.item]) < 4.5 * h.stderr


def test_prefix_tree_stops_when_nothing_survives():
    calls = []

    def oracle(depth: int, prefixes: list[str]) -> Estimate:
        calls.append(depth)
        return Estimate(np.zeros(len(prefixes)), np.ones(len(prefixes)))

    assert prefix_tree_heavy_hitters(oracle, "ab", 4, step=2) == []
    assert calls == [0]
    with pytest.raises(ValueError):
        prefix_tree_heavy_hitters(oracle, "ab", 3, step=2)


def _small_sfp() -> SequenceFragmentPuzzle:
    return SequenceFragmentPuzzle(
        LETTERS + " ",
        word_sketch=CountMeanSketch(4.0, 16, 64, seed=1),
        fragment_sketch=CountMeanSketch(6.0, 16, 64, seed=2),
        length=6,
    )


def test_sfp_from_the_vdaf_aggregate_finds_what_the_reports_find():
    """The collector only has the summed measurements: the same words, the same numbers."""
    rng = np.random.default_rng(12)
    _, words = zipf_words(rng, 4000)
    sfp = _small_sfp()
    reports = sfp.randomize(words, rng)
    aggregate = encode_sfp_array(sfp, reports).sum(axis=0)
    from_reports = sfp_heavy_hitters(sfp, reports, top=40)
    from_aggregate = sfp_heavy_hitters(sfp, sfp_sketches_from_aggregate(sfp, aggregate), top=40)
    assert from_reports and [h.item for h in from_aggregate] == [h.item for h in from_reports]
    assert np.allclose([h.count for h in from_aggregate], [h.count for h in from_reports])


def test_sfp_candidates_are_puzzle_consistent_and_bounded():
    rng = np.random.default_rng(13)
    _, words = zipf_words(rng, 8000)
    sfp = _small_sfp()
    sketches = sfp.sketches(sfp.randomize(words, rng))
    candidates = sfp.candidates(sketches, top=200)
    counts = Counter(words)
    assert {sfp.normalise(w) for w, _ in counts.most_common(3)} <= set(candidates)
    # Every candidate is anchored by its own puzzle piece: (h(c), c's fragment at l) is among
    # the kept fragments of every position l.
    kept = [set(sfp.top_fragments(s, n, 200)) for s, n in sketches.fragments]
    for c, h in zip(candidates, puzzle_hash(candidates), strict=True):
        for pos, start in zip(kept, sfp.starts, strict=True):
            assert (int(h), c[start : start + sfp.fragment]) in pos
    words_est, est = sfp_candidate_estimates(sfp, sketches, top=200)
    assert words_est == candidates and est.value.shape == (len(candidates),)
    with pytest.raises(ValueError, match="candidate products"):
        sfp.candidates(sketches, top=200, max_products=1)
    with pytest.raises(ValueError, match="positions"):
        sfp.candidates(SfpSketches(sketches.word, sketches.n, sketches.fragments[:1]), top=5)
