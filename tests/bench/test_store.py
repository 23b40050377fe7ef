"""`bench.store` measures real upload transactions into a store it filled first."""

from __future__ import annotations

import pytest

from bench import store


def test_the_store_bench_fills_the_store_then_times_real_uploads(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Small groups: three fill transactions (one partial) and two measured ones.
    monkeypatch.setattr(store, "FILL_GROUP", 500)
    monkeypatch.setattr(store, "GROUP", 60)
    # `measure` raises unless every upload was stored and the store holds all 1,320 reports.
    cpu, machine = store.measure("sqlite", 1_200, 2, (64, 2_448, 112))
    # The machine's CPU is counted in clock ticks: a run this short may show none.
    assert 0 < cpu < 1 and 0 <= machine < 1
    public, leader, helper = store._share_sizes()
    # Prio3 Histogram(100) VDAF-20: two joint-randomness parts; the helper's share is two
    # seeds, sealed.
    assert (public, helper) == (64, 64 + 48) and leader > 2_000
