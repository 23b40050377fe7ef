"""A real leader process (`python -m services.aggregator`) flooded with hostile traffic from
several threads for a bounded time (`bench.flood`): oversized uploads (declared and chunked),
oversized admin requests, garbage, random task and HPKE config ids, slowloris connections, and
honest uploads among them. Every request is answered (none waits for a body it will never
get), each with the answer its kind calls for, honest reports are accepted, and the leader's
memory stays flat: a bound on RSS growth after a warm-up, not a timing (issue 12 item 5)."""

from __future__ import annotations

from bench.flood import run_flood

#: Generous: the flood streams gigabytes of declared bodies, which must cost nothing.
GROWTH_BOUND_MIB = 48

EXPECTED = {
    "honest upload": {"201"},
    "4 GiB declared upload": {"413"},
    "chunked upload past the cap": {"413"},
    "1 GiB declared admin request": {"413"},
    "garbage report": {"400"},
    "random task id upload": {"400"},
    "random task id hpke_config": {"400"},
    "random HPKE config id": {"400"},
    "slowloris": {"408"},
}


def test_flood_leaves_the_leader_memory_flat() -> None:
    summary = run_flood(duration=12, warmup=4, threads=6)
    print(
        f"flood: {summary.requests} requests, peak RSS {summary.rss_peak_kib / 1024:.1f} MiB,"
        f" growth {summary.growth_mib:.1f} MiB, {dict(summary.statuses)}"
    )
    for kind, expected in EXPECTED.items():
        seen = summary.by_kind[kind]
        assert seen, f"no {kind} was sent"
        assert set(seen) <= expected, f"{kind}: {dict(seen)}"
    assert summary.by_kind["honest upload"]["201"] > 0
    assert summary.growth_mib < GROWTH_BOUND_MIB, summary
