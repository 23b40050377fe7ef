"""Sequence Fragment Puzzle (002 §4.3, Algorithms 8-10): heavy hitters over an unknown dictionary.

Client (string s padded / truncated to `length` with the pad character): a small puzzle hash
h(s) in [256]; a fragment start l uniform among 0, f, 2f, ... (002's 1, 3, 5, 7, 9 for length 10,
f = 2, written 1-based); the fragment r = h(s) || s[l : l + f] sent through CMS(eps', k', m') with
l, and s itself through CMS(eps, k, m). The report is (eps + eps')-LDP by basic composition
(002 §4.3). Deployed: (m, m') = (1024, 1024), (k, k') = (2048, 2048), (eps, eps') = (2, 6).

Server (Algorithm 10): a word sketch over all reports and one fragment sketch per position (over
the reports that chose it); per position keep the T (hash, fragment) pairs with the largest
estimates; for every hash value w, the Cartesian product of the kept fragments carrying w gives
candidate words; candidates are scored with the word sketch (`heavy_hitters.sfp_heavy_hitters`).
Ours: a candidate whose own puzzle piece h(candidate) differs from the w that anchored it is
dropped (every true word passes; a spurious product passes with probability 1/256).

The server side works on `SfpSketches`, so it is the same for raw reports (simulations) and for
the sum of VDAF measurements the collector receives (`shared.dp.vdaf_mapping`).
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import math
from dataclasses import dataclass

import numpy as np

from shared.dp.estimators import FloatArray
from shared.dp.randomizers.cms import CmsReports, CountMeanSketch, IntArray, item_keys

PUZZLE_RANGE = 256
#: Default cap on the Cartesian products `candidates` enumerates.
MAX_PRODUCTS = 2_000_000


def puzzle_hash(words: list[str]) -> IntArray:
    """The 8-bit puzzle piece h(s) (keyed BLAKE2b, separate from the sketch hashes)."""
    return np.asarray(
        [hashlib.blake2b(w.encode(), digest_size=1, key=b"sagg-sfp").digest()[0] for w in words],
        dtype=np.int64,
    )


def fragment_record(w: int, fragment: str) -> bytes:
    return bytes([w]) + fragment.encode()


@functools.lru_cache(maxsize=8)
def _all_fragments(alphabet: str, size: int) -> tuple[list[tuple[int, str]], IntArray]:
    """Every (puzzle value, fragment) pair over the alphabet, and their sketch keys."""
    frags = ["".join(t) for t in itertools.product(alphabet, repeat=size)]
    pairs = [(w, f) for w in range(PUZZLE_RANGE) for f in frags]
    return pairs, item_keys(fragment_record(w, f) for w, f in pairs)


@dataclass(frozen=True)
class SfpReports:
    position: IntArray
    fragments: CmsReports
    words: CmsReports


@dataclass(frozen=True)
class SfpSketches:
    """What the server keeps (Algorithm 10 lines 1-6): the word sketch over all `n` reports and,
    per position, the fragment sketch with the number of reports that chose that position.
    Built from raw reports (`SequenceFragmentPuzzle.sketches`) or from a VDAF aggregate
    (`shared.dp.vdaf_mapping.sfp_sketches_from_aggregate`)."""

    word: FloatArray
    #: Reports behind the word sketch (a float: the collector's expected real count, when the
    #: batch may hold dummy reports).
    n: float
    fragments: tuple[tuple[FloatArray, int], ...]


#: (puzzle value, fragment) pairs estimated per array operation in `top_fragments`: bounds the
#: k' x chunk bucket matrix (002's k' = 2048 over 256 * 27^2 pairs would otherwise take GBs).
_PAIR_CHUNK = 1 << 15


@dataclass(frozen=True)
class SequenceFragmentPuzzle:
    alphabet: str
    word_sketch: CountMeanSketch
    fragment_sketch: CountMeanSketch
    length: int = 10
    fragment: int = 2
    pad: str = " "

    def __post_init__(self) -> None:
        if self.pad not in self.alphabet or len(self.pad) != 1:
            raise ValueError("the pad character must be one character of the alphabet")
        if self.length % self.fragment:
            raise ValueError("length must be a multiple of the fragment size")

    @property
    def eps(self) -> float:
        """Total local epsilon: word and fragment reports compose."""
        return self.word_sketch.eps + self.fragment_sketch.eps

    @property
    def starts(self) -> range:
        return range(0, self.length, self.fragment)

    def normalise(self, word: str) -> str:
        if any(ch not in self.alphabet for ch in word):
            raise ValueError(f"{word!r} has characters outside the alphabet")
        return word[: self.length].ljust(self.length, self.pad)

    def randomize(self, words: list[str], rng: np.random.Generator) -> SfpReports:
        padded = [self.normalise(w) for w in words]
        puzzles = puzzle_hash(padded)
        position = np.asarray(rng.integers(0, len(self.starts), len(padded)), dtype=np.int64)
        records = [
            fragment_record(int(h), s[self.starts[p] : self.starts[p] + self.fragment])
            for s, h, p in zip(padded, puzzles, position, strict=True)
        ]
        return SfpReports(
            position,
            self.fragment_sketch.randomize(item_keys(records), rng),
            self.word_sketch.randomize(item_keys(padded), rng),
        )

    def sketches(self, reports: SfpReports) -> SfpSketches:
        """Algorithm 10 lines 1-6 over raw reports."""
        fragments = []
        for p in range(len(self.starts)):
            mask = reports.position == p
            sub = CmsReports(reports.fragments.signs[mask], reports.fragments.j[mask])
            fragments.append((self.fragment_sketch.sketch(sub), int(mask.sum())))
        word = self.word_sketch.sketch(reports.words)
        return SfpSketches(word, int(reports.position.size), tuple(fragments))

    def top_fragments(self, sketch: FloatArray, n: int, top: int) -> list[tuple[int, str]]:
        """The `top` (puzzle value, fragment) pairs with the largest estimated counts."""
        pairs, keys = _all_fragments(self.alphabet, self.fragment)
        est = np.concatenate(
            [
                self.fragment_sketch.estimate_counts(sketch, n, keys[lo : lo + _PAIR_CHUNK])
                for lo in range(0, keys.size, _PAIR_CHUNK)
            ]
        )
        top = min(top, est.size)
        best = np.argpartition(-est, top - 1)[:top]
        return [pairs[i] for i in best[np.argsort(-est[best], kind="stable")]]

    def candidates(
        self, sketches: SfpSketches, top: int, max_products: int = MAX_PRODUCTS
    ) -> list[str]:
        """Algorithm 10 lines 7-14: the dictionary of puzzle-anchored Cartesian products."""
        if len(sketches.fragments) != len(self.starts):
            raise ValueError(
                f"{len(sketches.fragments)} fragment sketches for {len(self.starts)} positions"
            )
        by_position: list[dict[int, list[str]]] = []
        for sketch, n in sketches.fragments:
            kept: dict[int, list[str]] = {}
            for w, frag in self.top_fragments(sketch, n, top):
                kept.setdefault(w, []).append(frag)
            by_position.append(kept)
        common = sorted(set(by_position[0]).intersection(*by_position[1:]))
        products = sum(math.prod(len(pos[w]) for pos in by_position) for w in common)
        if products > max_products:
            # Fragments concentrated on few puzzle values (e.g. crafted reports) would make the
            # product explode; refuse rather than enumerate.
            raise ValueError(
                f"the top {top} fragments give {products} candidate products (> {max_products})"
            )
        anchors: list[int] = []
        words: list[str] = []
        for w in common:
            for parts in itertools.product(*(pos[w] for pos in by_position)):
                anchors.append(w)
                words.append("".join(parts))
        if not words:
            return []
        # A product whose own puzzle piece is not w cannot be a word that sent those fragments.
        consistent = puzzle_hash(words) == np.asarray(anchors, dtype=np.int64)
        return sorted({word for word, ok in zip(words, consistent, strict=True) if ok})

    def word_estimates(self, sketches: SfpSketches, words: list[str]) -> FloatArray:
        return self.word_sketch.estimate_counts(sketches.word, sketches.n, item_keys(words))

    def report_bits(self) -> int:
        pos_bits = max(1, (len(self.starts) - 1).bit_length())
        return pos_bits + self.fragment_sketch.report_bits + self.word_sketch.report_bits
