"""Heavy-hitter reconstruction over unknown dictionaries (collector side).

* SFP (002 §4.3, Algorithm 10): candidates from puzzle-anchored fragment products, scored by the
  word sketch, kept when significant.
* Prefix-tree refinement (the interactive n-gram discovery of 000 §5, and the usual LDP prefix
  extension): level by level, extend every surviving prefix by every block of `step` symbols,
  estimate the extensions with a fresh frequency oracle (each level queries its own clients, so
  the levels' privacy budgets do not compose per client), and keep the significant ones.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from shared.dp.estimators import Estimate
from shared.dp.randomizers.sfp import SequenceFragmentPuzzle, SfpReports, SfpSketches


@dataclass(frozen=True)
class HeavyHitter:
    item: str
    count: float
    stderr: float


def _significant(
    items: Sequence[str], est: Estimate, level: float, floor: float
) -> list[HeavyHitter]:
    keep = est.significant(level, floor)
    found = [
        HeavyHitter(item, float(v), float(s))
        for item, v, s, k in zip(items, est.value, est.stderr, keep, strict=True)
        if k
    ]
    return sorted(found, key=lambda h: -h.count)


def sfp_candidate_estimates(
    sfp: SequenceFragmentPuzzle, data: SfpReports | SfpSketches, top: int
) -> tuple[list[str], Estimate]:
    """Algorithm 10: the candidate dictionary (padded words) and their word-sketch estimates.

    The standard error uses the CMS variance with the candidates as the dictionary.
    """
    sketches = sfp.sketches(data) if isinstance(data, SfpReports) else data
    words = sfp.candidates(sketches, top)
    value = sfp.word_estimates(sketches, words)
    n = sketches.n
    stderr = np.sqrt(sfp.word_sketch.variance(n, np.clip(value, 0, n)))
    return words, Estimate(value, stderr)


def sfp_heavy_hitters(
    sfp: SequenceFragmentPuzzle,
    data: SfpReports | SfpSketches,
    top: int,
    level: float = 0.999,
    floor: float = 0.0,
) -> list[HeavyHitter]:
    """Words whose word-sketch estimate is significant at `level` (one-sided) and >= floor,
    from raw reports or from the sketches; the pad is stripped from the returned words."""
    words, est = sfp_candidate_estimates(sfp, data, top)
    found = _significant(words, est, level, floor)
    return [HeavyHitter(h.item.rstrip(sfp.pad), h.count, h.stderr) for h in found]


PrefixOracle = Callable[[int, list[str]], Estimate]


def prefix_tree_heavy_hitters(
    oracle: PrefixOracle,
    alphabet: str,
    length: int,
    step: int = 1,
    level: float = 0.999,
    floor: float = 0.0,
    max_survivors: int | None = None,
) -> list[HeavyHitter]:
    """Refine prefixes of `step` symbols at a time up to `length`.

    `oracle(depth, prefixes)` returns estimated counts of the given prefixes (all of length
    (depth + 1) * step) from the clients assigned to that depth. At most `max_survivors` of the
    largest significant prefixes continue to the next level.
    """
    if length % step:
        raise ValueError("length must be a multiple of step")
    blocks = ["".join(t) for t in itertools.product(alphabet, repeat=step)]
    survivors = [""]
    found: list[HeavyHitter] = []
    for depth in range(length // step):
        candidates = [p + b for p in survivors for b in blocks]
        found = _significant(candidates, oracle(depth, candidates), level, floor)
        if max_survivors is not None:
            found = found[:max_survivors]
        survivors = [h.item for h in found]
        if not survivors:
            break
    return found
