"""A seeded population's shards and mix, and many devices' state in one worker store."""

from __future__ import annotations

import math
import sqlite3
from pathlib import Path

import pytest

from client_sdk.audit import AuditLog
from client_sdk.budget import BudgetAccountant
from client_sdk.device import Device, DeviceConfig
from client_sdk.events import EventStore
from client_sdk.population import CHUNK, PopulationMix, Shard, chunk_devices
from client_sdk.simulator import together
from client_sdk.storage import StateDb
from shared.recipe.model import RecipeDraft
from tests.client_sdk.harness import draft, policy
from tests.recipe.helpers import complete


@pytest.mark.parametrize("population", [1, CHUNK, 10 * CHUNK + 7])
@pytest.mark.parametrize(("shard", "workers"), [("0/1", 3), ("1/3", 2), ("2/5", 4)])
def test_workers_of_a_shard_simulate_exactly_its_devices(
    population: int, shard: str, workers: int
) -> None:
    """Brute force: the devices of k shards partition the population, and the workers of a
    shard partition the shard."""
    whole = Shard.parse(shard)

    def members(s: Shard) -> list[int]:
        return [i for c in s.chunks(population) for i in chunk_devices(c, population)]

    every = [i for s in range(whole.count) for i in members(Shard(s, whole.count))]
    assert sorted(every) == list(range(population))
    split = [i for w in whole.split(workers) for i in members(w)]
    assert sorted(split) == sorted(members(whole))
    assert sum(w.devices(population) for w in whole.split(workers)) == whole.devices(population)


def test_shard_syntax() -> None:
    assert Shard.parse("1/4") == Shard(1, 4)
    for bad in ("4/4", "1", "a/b", "-1/2"):
        with pytest.raises(ValueError, match="shard"):
            Shard.parse(bad)


def test_mix_is_a_function_of_the_seed_and_the_device() -> None:
    mix = PopulationMix(offline=0.3, malicious=0.1, clock_skew=10, window=3600)
    n = 4000
    offline = [mix.is_offline(7, i) for i in range(n)]
    assert offline == [mix.is_offline(7, i) for i in range(n)]
    assert offline != [mix.is_offline(8, i) for i in range(n)]
    # Binomial(4000, 0.3): mean 1200, sd 29.
    assert abs(sum(offline) - 0.3 * n) < 5 * math.sqrt(n * 0.3 * 0.7)
    assert abs(sum(mix.is_malicious(7, i) for i in range(n)) - 0.1 * n) < 5 * math.sqrt(n * 0.09)
    offsets = [mix.clock_offset(7, i, 1_800_000_000) for i in range(n)]
    assert all(-3600 - 60 < o < 60 for o in offsets)  # the window, and 6 sd of skew


def test_diurnal_arrivals_follow_the_evening_peak() -> None:
    """Over a whole day, answer times are denser around 20:00 UTC than around 08:00 UTC:
    1 + 0.8 cos puts 9 times the density at the peak as at the trough."""
    start = 1_800_057_600  # midnight UTC
    mix = PopulationMix(window=86400, arrivals="diurnal")
    hours = [((start + mix.clock_offset(3, i, start)) % 86400) // 3600 for i in range(6000)]
    evening = sum(19 <= h <= 21 for h in hours)
    morning = sum(7 <= h <= 9 for h in hours)
    assert evening > 4 * morning


def test_devices_in_one_store_keep_their_own_state(tmp_path: Path) -> None:
    store = StateDb(tmp_path / "worker.sqlite3", durable=False)
    events = EventStore(tmp_path / "events.sqlite3")
    a, b = store.scoped(1), store.scoped(2)
    a.put("k", "a")
    assert b.get("k") is None and a.get("k") == "a"
    with a.transaction() as conn:
        AuditLog.write(conn, a.device, 5, "refused", reason="x")
    assert len(AuditLog(a).entries()) == 1 and AuditLog(b).entries() == []
    assert BudgetAccountant(b, policy()).analysis_usage("emoji").reports_used == 0
    ea, eb = events.scoped(1), events.scoped(2)
    ea.register_stream("s")
    ea.add("s", {"v": 1}, 10)
    assert eb.retention("s") is None and ea.latest("s", 10) == {"v": 1}
    a.close()  # a view: the store stays open for the others
    assert b.get("k") is None
    store.close()
    events.close()


def test_a_chunks_events_in_one_write_are_each_devices_own(tmp_path: Path) -> None:
    """`add_devices` stores what `register_stream` and `add_many` on each device's view
    would: compared with a store written device by device."""
    data = {
        3: [({"v": 1}, 10), ({"v": 2}, 30)],
        5: [({"v": 7}, 20)],
        8: [],
    }
    batched = EventStore(tmp_path / "batched.sqlite3")
    batched.add_devices("s", data.items(), retention_seconds=100)
    one_by_one = EventStore(tmp_path / "one_by_one.sqlite3")
    for device, events in data.items():
        view = one_by_one.scoped(device)
        view.register_stream("s", 100)
        view.add_many("s", events)
    for device in (*data, 4):
        mine, theirs = batched.scoped(device), one_by_one.scoped(device)
        assert mine.retention("s") == theirs.retention("s")
        assert mine.records("s", 0, 100) == theirs.records("s", 0, 100)
    assert batched.scoped(3).latest("s", 100) == {"v": 2}
    assert batched.scoped(4).retention("s") is None
    batched.close()
    one_by_one.close()


def test_a_one_device_store_from_before_is_device_zeros(tmp_path: Path) -> None:
    """A store written before stores held several devices (no device column) is upgraded in
    place: its rows are device 0's, and its upserts still work."""
    path = tmp_path / "old.sqlite3"
    conn = sqlite3.connect(path)
    conn.executescript(
        "CREATE TABLE kv (key TEXT PRIMARY KEY, value TEXT NOT NULL);"
        "CREATE TABLE analysis_budget (analysis_id TEXT PRIMARY KEY, eps_used REAL NOT NULL,"
        " reports_used INTEGER NOT NULL);"
        "INSERT INTO kv VALUES ('enrolled:x', '1');"
        "INSERT INTO analysis_budget VALUES ('emoji', 1.5, 2);"
    )
    conn.commit()
    conn.close()
    db = StateDb(path)
    assert db.get("enrolled:x") == "1"
    db.put("enrolled:x", "2")
    assert db.get("enrolled:x") == "2"
    usage = BudgetAccountant(db, policy()).analysis_usage("emoji")
    assert (usage.eps_used, usage.reports_used) == (1.5, 2)
    db.close()


def test_a_nested_transaction_undoes_only_its_own_writes(tmp_path: Path) -> None:
    """Inside a chunk's transaction a device's own transaction is a savepoint: its failure
    undoes its writes, not the others' (before, it joined the outer and kept them)."""
    store = StateDb(tmp_path / "worker.sqlite3", durable=False)
    a, b = store.scoped(1), store.scoped(2)
    with store.transaction():
        a.put("k", "a")
        with pytest.raises(RuntimeError), b.transaction() as conn:
            conn.execute("INSERT INTO kv (device, key, value) VALUES (?, 'k', 'b')", (b.device,))
            raise RuntimeError("device 2 fails")
    assert (a.get("k"), b.get("k")) == ("a", None)
    store.close()


def test_a_chunk_commits_its_devices_writes_at_once_each_its_own_unit(tmp_path: Path) -> None:
    """`together`: a chunk of one worker store's devices commits once; inside it a device's
    budget charge whose record failed is undone (its savepoint) while the others' stay, and
    a crash before the chunk ends commits nothing of it (nothing of it left the devices)."""
    store = StateDb(tmp_path / "worker.sqlite3", durable=False)
    events = EventStore(tmp_path / "events.sqlite3")
    recipe = complete(RecipeDraft.model_validate(draft()))
    devices = [
        Device(policy(), DeviceConfig(), stores=(store.scoped(i), events.scoped(i)))
        for i in range(3)
    ]

    def recorded(conn: sqlite3.Connection) -> None:
        return None

    def record_fails(conn: sqlite3.Connection) -> None:
        raise ValueError("the pending row could not be written")

    def used() -> list[int]:
        return [d.budget.analysis_usage(recipe.analysis_id).reports_used for d in devices]

    statements: list[str] = []
    store.conn.set_trace_callback(statements.append)
    with together(devices):
        for device in devices:
            device.budget.spend(recipe, recorded)
        with pytest.raises(ValueError):
            devices[2].budget.spend(recipe, record_fails)
    assert statements.count("COMMIT") == 1
    assert used() == [1, 1, 1]
    with pytest.raises(RuntimeError), together(devices):
        devices[0].budget.spend(recipe, recorded)
        raise RuntimeError("the simulator crashed mid-chunk")
    assert used() == [1, 1, 1]
    store.conn.set_trace_callback(None)
    for device in devices:
        device.close()
    store.close()
    events.close()
