"""The batched preparation path decides exactly as report-by-report preparation does.

Random batches mix valid reports with tampered ones (a changed proof element, a flipped share
byte, a wrong joint-randomness part, a swapped helper seed, a value >= p). Preparing the whole
batch at once must give, for every report, the same status, prep messages and output shares as
preparing that report alone; valid reports must be accepted and tampered ones rejected; and the
aggregate of the accepted reports must be the sum of their measurements. Both drafts' instances
(VDAF-08, and VDAF-20 under an application context: names ending in "@20") run the same test.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shared.vdaf import prio3_20
from shared.vdaf.field import Field64
from shared.vdaf.prio3 import PrepBatch, Prio3
from tests.shared.vectors import SMALL_VDAFS, small_measurement

CTX = b"test context"


VDAFS: dict[str, Callable[[], Prio3]] = {
    **SMALL_VDAFS,
    "count@20": prio3_20.prio3_count,
    "sum@20": lambda: prio3_20.prio3_sum(200),
    "sumvec@20": lambda: prio3_20.prio3_sum_vec(5, 12, 3),
    "histogram@20": lambda: prio3_20.prio3_histogram(7, 3),
    "multihot@20": lambda: prio3_20.prio3_multihot_count_vec(6, 3, 4),
    "multiproof@20": lambda: prio3_20.prio3_sum_vec_with_multiproof(Field64, 3, 5, 12, 3),
}
_INSTANCES = {name: make() for name, make in VDAFS.items()}

TAMPERINGS = ("none", "proof", "share_byte", "joint_rand", "helper_seed", "out_of_range")


def _tamper(
    vdaf: Prio3, kind: str, public: bytes, leader: bytes, helper: bytes, rng: random.Random
) -> tuple[bytes, bytes, bytes]:
    size = vdaf.field.ENCODED_SIZE
    meas_bytes = vdaf.flp.MEAS_LEN * size
    if kind == "proof":
        pos = meas_bytes + size * rng.randrange(vdaf.flp.PROOF_LEN * vdaf.PROOFS)
        leader = leader[:pos] + bytes([leader[pos] ^ 1]) + leader[pos + 1 :]
    elif kind == "share_byte":
        pos = rng.randrange(meas_bytes)
        leader = leader[:pos] + bytes([leader[pos] ^ (1 << rng.randrange(8))]) + leader[pos + 1 :]
    elif kind == "joint_rand" and public:
        pos = rng.randrange(len(public))
        public = public[:pos] + bytes([public[pos] ^ 0x80]) + public[pos + 1 :]
    elif kind == "joint_rand":
        helper = bytes([helper[0] ^ 0x80]) + helper[1:]
    elif kind == "helper_seed":
        helper = helper[:16] + bytes(16) + helper[32:]
    elif kind == "out_of_range":
        leader = b"\xff" * size + leader[size:]
    return public, leader, helper


def _prepare(
    vdaf: Prio3,
    nonces: list[bytes],
    publics: list[bytes],
    leaders: list[bytes],
    helpers: list[bytes],
) -> tuple[list[PrepBatch], list[bytes | None], list[np.ndarray]]:
    ctx = _ctx(vdaf)
    verify_key = bytes(range(vdaf.VERIFY_KEY_SIZE))
    batches = [
        vdaf.prep_init_batch(verify_key, agg_id, nonces, publics, shares, ctx)
        for agg_id, shares in enumerate((leaders, helpers))
    ]
    msgs = vdaf.prep_shares_to_prep_batch(
        [[b.prep_shares[r] for b in batches] for r in range(len(nonces))], ctx
    )
    finished = [vdaf.prep_next_batch(b, msgs) for b in batches]
    return batches, msgs, finished


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    name=st.sampled_from(sorted(VDAFS)),
    seed=st.integers(0, 2**32 - 1),
    kinds=st.lists(st.sampled_from(TAMPERINGS), min_size=1, max_size=12),
)
def test_batched_preparation_matches_report_by_report(
    name: str, seed: int, kinds: list[str]
) -> None:
    vdaf = _INSTANCES[name]
    rng = random.Random(seed)
    measurements = [small_measurement(name, rng) for _ in kinds]
    nonces = [rng.randbytes(16) for _ in kinds]
    rands = [rng.randbytes(vdaf.RAND_SIZE) for _ in kinds]
    sharded = vdaf.shard_batch(measurements, nonces, rands, _ctx(vdaf))
    publics, leaders, helpers = [], [], []
    for kind, (public, (leader, helper)) in zip(kinds, sharded, strict=True):
        public, leader, helper = _tamper(vdaf, kind, public, leader, helper, rng)
        publics.append(public)
        leaders.append(leader)
        helpers.append(helper)

    batches, msgs, finished = _prepare(vdaf, nonces, publics, leaders, helpers)

    for r, kind in enumerate(kinds):
        alone, alone_msgs, alone_finished = _prepare(
            vdaf, nonces[r : r + 1], publics[r : r + 1], leaders[r : r + 1], helpers[r : r + 1]
        )
        assert alone_msgs[0] == msgs[r]
        for agg_id in range(2):
            assert alone[agg_id].status[0] == batches[agg_id].status[r]
            assert alone_finished[agg_id][0] == finished[agg_id][r]
            assert alone[agg_id].prep_shares[0] == batches[agg_id].prep_shares[r]
            assert np.array_equal(alone[agg_id].out_shares[0], batches[agg_id].out_shares[r])
        assert bool(finished[0][r]) == (kind == "none"), (kind, r)
        assert bool(finished[1][r]) == (kind == "none"), (kind, r)

    accepted = [m for m, kind in zip(measurements, kinds, strict=True) if kind == "none"]
    agg_shares = [vdaf.encode_agg_share(vdaf.aggregate(b.out_shares)) for b in batches]
    result = vdaf.unshard(agg_shares, len(accepted))
    assert result == _expected_aggregate(name, accepted)


def _ctx(vdaf: Prio3) -> bytes:
    return CTX if vdaf.version.has_context else b""


def _expected_aggregate(name: str, measurements: list[Any]) -> Any:
    name = name.removesuffix("@20")
    if name in ("count", "sum"):
        return sum(measurements)
    if name == "histogram":
        return [sum(1 for m in measurements if m == b) for b in range(7)]
    width = 5 if name in ("sumvec", "multiproof") else 6
    return [sum(m[i] for m in measurements) for i in range(width)]
