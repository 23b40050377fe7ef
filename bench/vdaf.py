"""Prio3 costs: client sharding per report and aggregator preparation throughput per core.

Preparation is measured the way an aggregation job runs it: a batch of reports of one task,
each aggregator's work timed separately (the helper also combines the prep shares), with and
without opening the HPKE-sealed input share. Run alone with `python -m bench.vdaf`.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from functools import partial
from typing import Any

from bench.common import Result, best_of, print_table
from shared import hpke
from shared.dap.hpke_context import input_share_info
from shared.dap.messages import Role
from shared.vdaf.prio3 import (
    Prio3,
    prio3_count,
    prio3_histogram,
    prio3_multihot_histogram,
    prio3_sum,
    prio3_sum_vec,
)

BATCH = 1000
SHARD_REPORTS = 200

CASES: list[tuple[str, Callable[[], Prio3], Callable[[int], Any]]] = [
    ("Count", prio3_count, lambda i: i % 2),
    ("Sum(bits=8)", lambda: prio3_sum(8), lambda i: i % 256),
    ("SumVec(100, bits=8)", lambda: prio3_sum_vec(100, 8, 28), lambda i: [i % 256] * 100),
    ("Histogram(100)", lambda: prio3_histogram(100, 10), lambda i: i % 100),
    ("Histogram(1000)", lambda: prio3_histogram(1000, 32), lambda i: i % 1000),
    (
        "MultiHotHistogram(100)",
        lambda: prio3_multihot_histogram(100, 10, 10),
        lambda i: [1 if (i + b) % 17 == 0 else 0 for b in range(100)],
    ),
]


def _bench_case(name: str, vdaf: Prio3, measure: Callable[[int], Any]) -> list[Result]:
    verify_key = secrets.token_bytes(16)
    measurements = [measure(i) for i in range(BATCH)]
    nonces = [secrets.token_bytes(16) for _ in range(BATCH)]
    rands = [secrets.token_bytes(vdaf.RAND_SIZE) for _ in range(BATCH)]

    shard_one = (
        best_of(
            lambda: [
                vdaf.shard(measurements[i], nonces[i], rands[i]) for i in range(SHARD_REPORTS)
            ],
            repeat=3,
        )
        / SHARD_REPORTS
    )
    start = time.perf_counter()
    sharded = vdaf.shard_batch(measurements, nonces, rands)
    shard_batched = (time.perf_counter() - start) / BATCH

    publics = [p for p, _ in sharded]
    shares = [[s[agg] for _, s in sharded] for agg in range(2)]
    keys = [hpke.generate_keypair(1), hpke.generate_keypair(2)]
    aad = b"\x00" * 56
    infos = [input_share_info(Role.LEADER), input_share_info(Role.HELPER)]
    sealed = [
        [hpke.seal(keys[agg].public_key, infos[agg], aad, share) for share in shares[agg]]
        for agg in range(2)
    ]

    def open_all(agg: int) -> list[bytes]:
        return [hpke.open(keys[agg], enc, infos[agg], aad, ct) for enc, ct in sealed[agg]]

    leader = vdaf.prep_init_batch(verify_key, 0, nonces, publics, shares[0])

    def leader_prep() -> None:
        batch = vdaf.prep_init_batch(verify_key, 0, nonces, publics, shares[0])
        vdaf.prep_next_batch(batch, helper_msgs)

    def helper_prep() -> None:
        batch = vdaf.prep_init_batch(verify_key, 1, nonces, publics, shares[1])
        msgs = vdaf.prep_shares_to_prep_batch(
            [[leader.prep_shares[r], batch.prep_shares[r]] for r in range(BATCH)]
        )
        vdaf.prep_next_batch(batch, msgs)

    helper = vdaf.prep_init_batch(verify_key, 1, nonces, publics, shares[1])
    helper_msgs = vdaf.prep_shares_to_prep_batch(
        [[leader.prep_shares[r], helper.prep_shares[r]] for r in range(BATCH)]
    )

    leader_s = best_of(leader_prep, repeat=3) / BATCH
    helper_s = best_of(helper_prep, repeat=3) / BATCH
    open_s = [best_of(partial(open_all, agg), repeat=2) / BATCH for agg in range(2)]

    return [
        Result("vdaf", name, "client shard, one report", shard_one * 1e3, "ms/report"),
        Result("vdaf", name, "client shard, batched", shard_batched * 1e3, "ms/report"),
        Result("vdaf", name, "leader prep, no HPKE", 1 / leader_s, "reports/s"),
        Result("vdaf", name, "helper prep, no HPKE", 1 / helper_s, "reports/s"),
        Result("vdaf", name, "leader prep + HPKE open", (leader_s + open_s[0]) * 1e3, "ms/report"),
        Result("vdaf", name, "helper prep + HPKE open", (helper_s + open_s[1]) * 1e3, "ms/report"),
        Result("vdaf", name, "leader prep + HPKE open", 1 / (leader_s + open_s[0]), "reports/s"),
        Result("vdaf", name, "helper prep + HPKE open", 1 / (helper_s + open_s[1]), "reports/s"),
    ]


def run() -> list[Result]:
    results: list[Result] = []
    for name, make, measure in CASES:
        results += _bench_case(name, make(), measure)
    return results


if __name__ == "__main__":
    print_table(run(), f"Prio3 (VDAF-08), one core, batches of {BATCH} reports")
