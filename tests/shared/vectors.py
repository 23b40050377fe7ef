"""What the VDAF tests share: the published test vectors (read from the workplace's
shared/test-vectors, never copied here) and the Prio3 instances they build from them, and one
small instance of every Prio3 variant with a measurement generator for the property tests."""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

from shared.vdaf import prio3
from shared.vdaf.prio3 import Prio3
from tests.conftest import vectors_path

#: Prio3SumVecWithMultiproof_0 (VDAF-08) does not record its proof count; the reference code's
#: last loop iteration (and the share length) fix it at 4 (see the test-vector README).
MULTIPROOF_PROOFS = 4


def vector_dir(draft: str = "vdaf-08") -> Path:
    """The directory of one draft's vectors (`vdaf-08`, ...)."""
    return vectors_path() / draft


def load_vector(name: str, draft: str = "vdaf-08") -> dict[str, Any]:
    """One test vector file (`Prio3Count_0`, `XofTurboShake128`, ...) of `draft`, parsed."""
    data: dict[str, Any] = json.loads((vector_dir(draft) / f"{name}.json").read_text())
    return data


def vector_names(prefix: str, draft: str = "vdaf-08") -> list[str]:
    """The vector files of `draft` whose names start with `prefix`, sorted (a placeholder that
    fails the coverage test when none are there, so that a missing directory is not a pass)."""
    return sorted(p.stem for p in vector_dir(draft).glob(f"{prefix}*.json")) or [
        "(missing vectors)"
    ]


def prio3_of_vector(name: str, vec: dict[str, Any]) -> Prio3:
    """The VDAF-08 Prio3 instance a vector file describes (its parameters and share count)."""
    shares = vec["shares"]
    kind = name.rsplit("_", 1)[0]
    if kind == "Prio3Count":
        return prio3.prio3_count(shares)
    if kind == "Prio3Sum":
        return prio3.prio3_sum(vec["bits"], shares)
    if kind == "Prio3SumVec":
        return prio3.prio3_sum_vec(vec["length"], vec["bits"], vec["chunk_length"], shares)
    if kind == "Prio3Histogram":
        return prio3.prio3_histogram(vec["length"], vec["chunk_length"], shares)
    if kind == "Prio3MultiHotHistogram":
        return prio3.prio3_multihot_histogram(
            vec["length"], vec["max_count"], vec["chunk_length"], shares
        )
    if kind == "Prio3SumVecWithMultiproof":
        return prio3.prio3_sum_vec_multiproof(
            vec["length"], vec["bits"], vec["chunk_length"], MULTIPROOF_PROOFS, shares
        )
    raise AssertionError(f"unknown vector {name}")


#: One small instance of every Prio3 variant, by short name.
SMALL_VDAFS: dict[str, Callable[[], Prio3]] = {
    "count": prio3.prio3_count,
    "sum": lambda: prio3.prio3_sum(8),
    "sumvec": lambda: prio3.prio3_sum_vec(5, 4, 3),
    "histogram": lambda: prio3.prio3_histogram(7, 3),
    "multihot": lambda: prio3.prio3_multihot_histogram(6, 3, 4),
    "multiproof": lambda: prio3.prio3_sum_vec_multiproof(5, 4, 3, proofs=3),
}


def small_measurement(name: str, rng: random.Random) -> Any:
    """A random valid measurement of `SMALL_VDAFS[name]`, and of the VDAF-20 instance of the same
    shape named `name@20` (whose Sum and SumVec take values up to 200 and 12)."""
    name = name.removesuffix("@20")
    if name == "count":
        return rng.randrange(2)
    if name == "sum":
        return rng.randrange(201)
    if name in ("sumvec", "multiproof"):
        return [rng.randrange(13) for _ in range(5)]
    if name == "histogram":
        return rng.randrange(7)
    bits = [0] * 6
    for i in rng.sample(range(6), rng.randrange(4)):
        bits[i] = 1
    return bits
