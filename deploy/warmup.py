"""`python -m deploy.warmup`: compile the VDAF kernels once, at image build time.

The field arithmetic is numba code cached on disk (`shared.vdaf.field`, ``cache=True``); the
first report a fresh container prepares would otherwise pay the compilation (seconds). Running
every step of Prio3 (shard, prepare on both aggregators, aggregate, unshard) over the VDAFs the
deployment uses, in both drafts (VDAF-08 for DAP-09 tasks, VDAF-20 for DAP-19 ones: its
Lagrange-basis proofs and Field64 Sum compile other kernels), fills the cache in
`NUMBA_CACHE_DIR`, which the image keeps.
"""

from __future__ import annotations

import secrets
import sys
import time

from shared.vdaf.spec import VdafSpec

__all__ = ["main", "warm"]

SPECS = (
    VdafSpec(type="Prio3Count"),
    VdafSpec(type="Prio3Sum", bits=8),
    VdafSpec(type="Prio3Histogram", length=8, chunk_length=3),
    VdafSpec(type="Prio3SumVec", length=4, bits=2, chunk_length=2),
    VdafSpec(type="Prio3MultiHotHistogram", length=9, chunk_length=3, max_count=9),
    VdafSpec(version="VDAF-20", type="Prio3Count"),
    VdafSpec(version="VDAF-20", type="Prio3Sum", max_measurement=255),
    VdafSpec(version="VDAF-20", type="Prio3Histogram", length=8, chunk_length=3),
    VdafSpec(version="VDAF-20", type="Prio3SumVec", length=4, max_measurement=3, chunk_length=2),
    VdafSpec(
        version="VDAF-20", type="Prio3MultihotCountVec", length=9, chunk_length=3, max_weight=9
    ),
)


def _measurement(spec: VdafSpec) -> object:
    if spec.type == "Prio3Count":
        return 1
    if spec.type == "Prio3Sum":
        return 3
    if spec.type == "Prio3Histogram":
        return 2
    if spec.multihot:
        return [1, 0, 1] + [0] * ((spec.length or 3) - 3)
    return [1] * (spec.length or 1)


def warm(spec: VdafSpec) -> None:
    """One full Prio3 run of two reports; raises if the result is wrong."""
    vdaf = spec.instance()
    measurements = [_measurement(spec)] * 2
    nonces = [secrets.token_bytes(16) for _ in measurements]
    rands = [secrets.token_bytes(vdaf.RAND_SIZE) for _ in measurements]
    sharded = vdaf.shard_batch(measurements, nonces, rands)
    publics = [public for public, _ in sharded]
    verify_key = secrets.token_bytes(vdaf.VERIFY_KEY_SIZE)
    batches = [
        vdaf.prep_init_batch(
            verify_key, agg_id, nonces, publics, [shares[agg_id] for _, shares in sharded]
        )
        for agg_id in (0, 1)
    ]
    messages = vdaf.prep_shares_to_prep_batch(
        [[b.prep_shares[r] for b in batches] for r in range(len(nonces))]
    )
    for batch in batches:
        if not vdaf.prep_next_batch(batch, messages).all():
            raise RuntimeError(f"{spec.describe()}: preparation failed")
    shares = [vdaf.encode_agg_share(vdaf.aggregate(b.out_shares)) for b in batches]
    vdaf.unshard(shares, len(measurements))


def main() -> int:
    for spec in SPECS:
        start = time.monotonic()
        warm(spec)
        print(f"warm-up {spec.describe()}: {time.monotonic() - start:.1f}s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
