"""Prio3 costs: client sharding per report and aggregator preparation throughput per core.

Preparation is measured the way an aggregation job runs it: a batch of reports of one task,
each aggregator's work timed separately (the helper also combines the prep shares), with and
without opening the HPKE-sealed input share. A second table sets VDAF-08 and VDAF-20 side by side
on the same circuits (VDAF-20 under an application context). Run alone with
`python -m bench.vdaf`; `python -m bench.vdaf --quick` runs only the comparison, on fewer reports.

`prep_and_open_cpu` is the same per-report cost in CPU time, round by round, for
`bench.deployment` to set the servers' measured CPU per report against in the same run (issue
#15's goal: at most 1.6x).

The XOF table times TurboSHAKE128 streams the way Prio3 reads them, the compiled batch against
one pycryptodome object a stream (what the batch replaced), alone and beside a busy Python
thread, as in an aggregator: each of pycryptodome's foreign calls releases the GIL.
"""

from __future__ import annotations

import json
import secrets
import statistics
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np
from Crypto.Hash import TurboSHAKE128

from bench.common import Result, best_of, print_table
from shared import hpke
from shared.dap.hpke_context import input_share_info
from shared.dap.messages import Role
from shared.vdaf import prio3_20
from shared.vdaf.prio3 import (
    PrepBatch,
    Prio3,
    prio3_count,
    prio3_histogram,
    prio3_multihot_histogram,
    prio3_sum,
    prio3_sum_vec,
)
from shared.vdaf.turboshake import turboshake128

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


#: VDAF-08 and VDAF-20 instances of the same circuits, for the side-by-side table.
COMPARED: list[tuple[str, Callable[[], Prio3], Callable[[], Prio3], Callable[[int], Any]]] = [
    ("Count", prio3_count, prio3_20.prio3_count, lambda i: i % 2),
    ("Sum(255)", lambda: prio3_sum(8), lambda: prio3_20.prio3_sum(255), lambda i: i % 256),
    (
        "SumVec(100, 255, 28)",
        lambda: prio3_sum_vec(100, 8, 28),
        lambda: prio3_20.prio3_sum_vec(100, 255, 28),
        lambda i: [i % 256] * 100,
    ),
    (
        "Histogram(100, 10)",
        lambda: prio3_histogram(100, 10),
        lambda: prio3_20.prio3_histogram(100, 10),
        lambda i: i % 100,
    ),
    (
        "Histogram(1000, 32)",
        lambda: prio3_histogram(1000, 32),
        lambda: prio3_20.prio3_histogram(1000, 32),
        lambda i: i % 1000,
    ),
]

#: The application context of the VDAF-20 runs: DAP-19's "dap-19" || task_id.
CTX_20 = b"dap-19" + bytes(32)


class _Reports:
    """A batch of sharded reports of one instance and its preparation, step by step."""

    def __init__(self, vdaf: Prio3, measure: Callable[[int], Any], count: int) -> None:
        self.vdaf, self.count = vdaf, count
        self.ctx = CTX_20 if vdaf.version.has_context else b""
        self.verify_key = secrets.token_bytes(vdaf.VERIFY_KEY_SIZE)
        self.measurements = [measure(i) for i in range(count)]
        self.nonces = [secrets.token_bytes(16) for _ in range(count)]
        self.rands = [secrets.token_bytes(vdaf.RAND_SIZE) for _ in range(count)]
        start = time.perf_counter()
        sharded = vdaf.shard_batch(self.measurements, self.nonces, self.rands, self.ctx)
        self.shard_batched = (time.perf_counter() - start) / count
        self.publics = [p for p, _ in sharded]
        self.shares = [[s[agg] for _, s in sharded] for agg in range(2)]
        self.leader = self.init(0)
        self.helper_msgs = self.combine(self.init(1))

    def shard_one(self, reports: int) -> float:
        """Seconds per report sharded one at a time."""
        v, m, n, r = self.vdaf, self.measurements, self.nonces, self.rands
        return (
            best_of(lambda: [v.shard(m[i], n[i], r[i], self.ctx) for i in range(reports)], 3)
            / reports
        )

    def init(self, agg: int) -> PrepBatch:
        return self.vdaf.prep_init_batch(
            self.verify_key, agg, self.nonces, self.publics, self.shares[agg], self.ctx
        )

    def combine(self, helper: PrepBatch) -> list[bytes | None]:
        pairs = [[self.leader.prep_shares[r], helper.prep_shares[r]] for r in range(self.count)]
        return self.vdaf.prep_shares_to_prep_batch(pairs, self.ctx)

    def leader_prep(self) -> None:
        self.vdaf.prep_next_batch(self.init(0), self.helper_msgs)

    def helper_prep(self) -> None:
        batch = self.init(1)
        self.vdaf.prep_next_batch(batch, self.combine(batch))

    def prep_seconds(self) -> tuple[float, float]:
        """Seconds per report for the leader's and the helper's preparation."""
        leader = best_of(self.leader_prep, repeat=3) / self.count
        return leader, best_of(self.helper_prep, repeat=3) / self.count


class _Sealed:
    """The input shares of a batch sealed to each aggregator as a DAP-09 client does (its
    info strings, an AAD of a report's size), to time the aggregators' HPKE opens."""

    def __init__(self, shares: list[list[bytes]]) -> None:
        self.keys = [hpke.generate_keypair(1), hpke.generate_keypair(2)]
        self.aad = b"\x00" * 56
        self.infos = [input_share_info(Role.LEADER), input_share_info(Role.HELPER)]
        self.sealed = [
            [
                hpke.seal(self.keys[agg].public_key, self.infos[agg], self.aad, s)
                for s in shares[agg]
            ]
            for agg in range(2)
        ]

    def open_all(self, agg: int) -> list[bytes]:
        key, info, aad = self.keys[agg], self.infos[agg], self.aad
        return [hpke.open(key, enc, info, aad, ct) for enc, ct in self.sealed[agg]]


@dataclass(frozen=True)
class PrepCost:
    """CPU seconds per report of each aggregator's preparation plus HPKE open of its own
    input share: what an aggregator cannot avoid doing for a report."""

    leader: float
    helper: float

    @property
    def total(self) -> float:
        return self.leader + self.helper

    @staticmethod
    def mean(costs: Sequence[PrepCost]) -> PrepCost:
        return PrepCost(
            statistics.fmean(c.leader for c in costs), statistics.fmean(c.helper for c in costs)
        )


def prep_and_open_cpu(
    vdaf: Prio3, measure: Callable[[int], Any], rounds: int, count: int = BATCH
) -> list[PrepCost]:
    """`_bench_case`'s "prep + HPKE open" of both aggregators in CPU time per report, once per
    round over a batch of `count` reports (the four parts in turn, after one unmeasured
    round), which is what server CPU can be compared with on a machine shared with other
    work. Every round is returned: a server's CPU is a mean over whatever the machine did
    meanwhile, so the comparable figure is the rounds' mean (`PrepCost.mean`), not the
    fastest round."""
    reports = _Reports(vdaf, measure, count)
    sealed = _Sealed(reports.shares)
    parts = (
        reports.leader_prep,
        partial(sealed.open_all, 0),
        reports.helper_prep,
        partial(sealed.open_all, 1),
    )

    def one_round() -> PrepCost:
        used = []
        for part in parts:
            start = time.process_time()
            part()
            used.append((time.process_time() - start) / count)
        return PrepCost(used[0] + used[1], used[2] + used[3])

    one_round()
    return [one_round() for _ in range(rounds)]


def _bench_case(name: str, vdaf: Prio3, measure: Callable[[int], Any]) -> list[Result]:
    reports = _Reports(vdaf, measure, BATCH)
    shard_one = reports.shard_one(SHARD_REPORTS)
    shard_batched = reports.shard_batched
    sealed = _Sealed(reports.shares)
    leader_s, helper_s = reports.prep_seconds()
    open_s = [best_of(partial(sealed.open_all, agg), repeat=2) / BATCH for agg in range(2)]

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


def compare(batch: int, shard_reports: int) -> list[Result]:
    """VDAF-08 and VDAF-20 per report on the same circuits, and the ratio 20 / 08."""
    results: list[Result] = []
    for name, make_08, make_20, measure in COMPARED:
        costs = []
        for make in (make_08, make_20):
            reports = _Reports(make(), measure, batch)
            costs.append((reports.shard_one(shard_reports), *reports.prep_seconds()))
        for i, metric in enumerate(("client shard, one report", "leader prep", "helper prep")):
            old, new = costs[0][i], costs[1][i]
            results += [
                Result("vdaf 08 vs 20", name, f"{metric}, VDAF-08", old * 1e6, "us/report"),
                Result("vdaf 08 vs 20", name, f"{metric}, VDAF-20", new * 1e6, "us/report"),
                Result("vdaf 08 vs 20", name, f"{metric}, 20 / 08", new / old, "ratio"),
            ]
    return results


#: The XOF table's streams: a batch of Histogram(100) measurement shares (Field128), each read
#: from an 80-byte framed seed and binder.
XOF_STREAMS, XOF_MESSAGE, XOF_OUTPUT = 1000, 80, 1600


def xof_rows(streams: int = XOF_STREAMS) -> list[Result]:
    """Thread CPU per stream (median of 7 runs) of the two TurboSHAKE128 paths, alone and
    beside a thread running Python."""
    messages = np.frombuffer(secrets.token_bytes(streams * XOF_MESSAGE), np.uint8)
    messages = messages.reshape(streams, XOF_MESSAGE)

    def batch() -> None:
        turboshake128(messages, 1, XOF_OUTPUT)

    def one_object_a_stream() -> None:
        for row in messages:
            h = TurboSHAKE128.new(domain=1)
            h.update(row.tobytes())
            h.read(XOF_OUTPUT)

    def cpu(fn: Callable[[], None]) -> float:
        fn()
        runs = []
        for _ in range(7):
            start = time.thread_time()
            fn()
            runs.append(time.thread_time() - start)
        return statistics.median(runs) / streams * 1e6

    stop = threading.Event()

    def busy() -> None:
        while not stop.is_set():
            json.dumps(list(range(100)))

    results = []
    for beside in ("alone", "beside a busy Python thread"):
        thread = threading.Thread(target=busy) if beside != "alone" else None
        if thread is not None:
            thread.start()
        try:
            for name, fn in (("compiled batch", batch), ("pycryptodome", one_object_a_stream)):
                value = cpu(fn)
                results.append(Result("xof", f"TurboSHAKE128, {name}", beside, value, "µs/stream"))
        finally:
            stop.set()
            if thread is not None:
                thread.join()
            stop.clear()
    return results


def run() -> list[Result]:
    results: list[Result] = []
    for name, make, measure in CASES:
        results += _bench_case(name, make(), measure)
    return results + compare(BATCH, SHARD_REPORTS) + xof_rows()


if __name__ == "__main__":
    if "--quick" in sys.argv[1:]:
        print_table(compare(200, 20), "Prio3 VDAF-08 vs VDAF-20, one core, batches of 200")
    else:
        print_table(run(), f"Prio3 (VDAF-08 and VDAF-20), one core, batches of {BATCH} reports")
