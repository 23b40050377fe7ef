"""SFP and prefix-tree heavy hitters on seeded Zipf vocabularies."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from shared.dp.estimators import Estimate
from shared.dp.heavy_hitters import prefix_tree_heavy_hitters, sfp_heavy_hitters
from shared.dp.randomizers.cms import CountMeanSketch, item_keys
from shared.dp.randomizers.sfp import SequenceFragmentPuzzle, puzzle_hash

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
