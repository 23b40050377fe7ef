"""`bench.population` reads what `sagg devices run` prints: the simulation's time, CPU and
counts, as `SimulationSummary.lines` wrote them."""

from __future__ import annotations

from collections import Counter

from bench.population import Run
from client_sdk.simulator import SimulationSummary


def test_the_bench_reads_the_summary_a_simulator_prints() -> None:
    summary = SimulationSummary(
        devices=2000,
        sampled=1990,
        uploaded=1985,
        seconds=12.34,
        cpu_seconds=3.456,
        failed=Counter({"leader refused": 5}),
    )
    run = Run("\n".join(summary.lines()) + "\n", seconds=14.0, max_rss_kib=1)
    assert run.simulated_seconds == 12.3
    assert run.simulated_cpu == 3.46
    assert (run.count("uploaded"), run.count("sampled")) == (1985, 1990)
