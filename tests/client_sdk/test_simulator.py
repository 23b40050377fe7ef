"""The simulator drives real SDK devices: every sampled device uploads one sealed report."""

from __future__ import annotations

import io
import json
import random
import sqlite3
import threading
from pathlib import Path
from typing import Any

import pytest

from client_sdk.cli import main
from client_sdk.datagen import GENERATORS, NEW_WORDS, WORDS, generate_events
from client_sdk.device import DeviceConfig
from client_sdk.manufacturer import SimulatedDevice
from client_sdk.policy import FieldAllowance
from client_sdk.population import CHUNK, PopulationMix
from client_sdk.sampling import DonationSchedule
from client_sdk.simulator import Progress, SimulationSummary, Simulator
from client_sdk.storage import StateDb
from client_sdk.upload import Uploader, UploadResult
from shared.recipe.model import RecipeDraft
from shared.vdaf.plain_aggregate import PlainAggregate
from shared.vdaf.spec import VdafSpec
from tests.client_sdk.harness import RECIPES, TRUSTED, World, draft, policy
from tests.recipe.helpers import complete, example_recipe, sfp_randomizer


def world_simulator(
    world: World, donation: DonationSchedule, concurrency: int, **options: Any
) -> Simulator:
    """A simulator of attested devices against `world`'s deployment, on its clock."""
    config = DeviceConfig(
        recipe_server_url=RECIPES, recipe_server_key=world.signer.public_key, donation=donation
    )
    return Simulator(
        config,
        trusted=TRUSTED,
        http=world.http,
        identities=lambda: SimulatedDevice.manufacture(world.ca),
        concurrency=concurrency,
        clock=world.clock.now,
        **options,
    )


def test_simulator_uploads_every_sampled_device(tmp_path: Path) -> None:
    world = World(tmp_path)
    world.publish(sampling_rate=0.5, min_batch_size=2000)
    out = io.StringIO()
    simulator = world_simulator(world, DonationSchedule(4, 300), 8, progress=out)
    summary = simulator.run("emoji.daily", 60, "emoji")
    assert summary.sampled + summary.not_sampled == 60
    assert 10 < summary.sampled < 50  # q = 0.5
    assert summary.uploaded == summary.sampled == len(world.leader.uploads)
    assert not summary.failed and not summary.refused
    # Not a terminal: one line per finished phase, no bar redrawn with carriage returns.
    assert "devices    60/60" in out.getvalue() and "\r" not in out.getvalue()
    times = {r.report_metadata.time for r in world.leader.uploads}
    assert len(times) >= 1


def test_simulator_reports_refusals(tmp_path: Path) -> None:
    world = World(tmp_path, tokens=False)
    world.publish()
    strict = policy().model_copy(
        update={
            "query_classes": (
                policy().query_classes[0].model_copy(update={"max_local_epsilon": 1.0}),
            )
        }
    )
    config = DeviceConfig(
        recipe_server_url=RECIPES, recipe_server_key=world.signer.public_key, use_tokens=False
    )
    summary = Simulator(
        config, policy=strict, http=world.http, clock=world.clock.now, progress=None
    ).run("emoji.daily", 10, "emoji")
    assert sum(summary.refused.values()) == 10 and summary.uploaded == 0
    assert "local epsilon 2 exceeds 1" in next(iter(summary.refused))


def test_generators_fill_the_recipe_fields() -> None:
    rng = random.Random(3)
    ngram = example_recipe()
    for kind in GENERATORS:
        events = generate_events(kind, ngram, rng, 10_000, events=5)
        assert len(events) == 5
        for record, t in events:
            assert set(record) == {"age", "typed_ngrams"} and t <= 10_000
            assert isinstance(record["typed_ngrams"], list) and len(record["typed_ngrams"]) >= 3
    emoji = complete(RecipeDraft.model_validate(draft()))
    values = [generate_events("emoji", emoji, rng, 0, 1)[0][0]["emoji"] for _ in range(300)]
    # Zipf: the first category is the most common.
    assert max(set(values), key=values.count) == "smile"


SFP_RANDOMIZER = sfp_randomizer((1.0, 4, 16), (1.0, 4, 8))


def test_sfp_devices_upload_their_words_and_record_the_truth(tmp_path: Path) -> None:
    """A string feature under sfp: the new_words generator fills it, the devices randomize the
    string, and the simulator's ground truth counts the strings the uploads answered."""
    world = World(tmp_path, tokens=False)
    overrides: dict[str, Any] = {
        "encoding": {"features": [{"kind": "string", "field": "emoji"}]},
        "randomizer": SFP_RANDOMIZER,
        "privacy": {"epsilon": 2.0, "delta": 1e-6, "analysis": "stronger_clones"},
    }
    world.publish(**overrides)
    recipe = complete(RecipeDraft.model_validate(draft(**overrides)))
    config = DeviceConfig(
        recipe_server_url=RECIPES, recipe_server_key=world.signer.public_key, use_tokens=False
    )
    summary = Simulator(
        config, trusted=TRUSTED, http=world.http, clock=world.clock.now, progress=None, seed=5
    ).run("emoji.daily", 40, "new_words")
    assert summary.uploaded == 40 == len(world.leader.uploads) and not summary.refused
    assert sum(summary.truth.values()) == 40
    assert set(summary.truth) <= set(NEW_WORDS) | set(WORDS)
    assert any(w in NEW_WORDS for w in summary.truth) and any(w in WORDS for w in summary.truth)
    events = generate_events("new_words", recipe, random.Random(1), 0, events=400)
    share = sum(e["emoji"] in NEW_WORDS for e, _ in events) / 400
    assert 0.4 < share < 0.6


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_draws_a_bar_only_on_a_terminal() -> None:
    for stream, bar in ((_Terminal(), True), (io.StringIO(), False)):
        progress = Progress(4, "answering", stream)
        for _ in range(4):
            progress.add()
        text = stream.getvalue()
        assert "answering" in text and "4/4" in text
        assert ("\x1b[" in text or "\r" in text) == bar, text


def test_cli_requires_a_recipe(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["devices", "run"]) == 2  # --recipe is required
    assert "--recipe" in capsys.readouterr().err


def test_cli_refuses_a_summary_file_it_could_not_write_before_running(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Nothing is simulated (no server is reached) when the summary could not be written."""
    parties = ["--leader", "http://127.0.0.1:1", "--helper", "http://127.0.0.1:1"]
    parties += ["--token-issuer", "http://127.0.0.1:1", "--recipe-server", "http://127.0.0.1:1"]
    missing = tmp_path / "missing" / "summary.json"
    argv = ["devices", "run", "--recipe", "r", *parties, "--summary-json", str(missing)]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert err.startswith("sagg: --summary-json: no directory") and str(missing.parent) in err


def test_a_kept_population_composes_budgets_and_knows_the_truth(tmp_path: Path) -> None:
    """`devices` + `answer`: the same devices answer again only within their budget, and the
    summary's truth counts the one-hot index of every uploaded report."""
    world = World(tmp_path)
    world.publish()
    config = DeviceConfig(recipe_server_url=RECIPES, recipe_server_key=world.signer.public_key)
    simulator = Simulator(
        config,
        trusted=TRUSTED,
        http=world.http,
        identities=lambda: SimulatedDevice.manufacture(world.ca),
        clock=world.clock.now,
        progress=None,
    )
    verified = simulator.verify("emoji.daily")
    assert verified is not None
    recipe = verified.recipe
    # Budget for exactly one report of the field.
    one = policy(emoji=FieldAllowance(local_epsilon=5, epsilon=3.0, reports=1))
    devices = simulator.devices(12, one)
    rng = random.Random(5)
    for device in devices:
        device.events.register_stream(recipe.query.stream)
        device.events.add_many(recipe.query.stream, generate_events("emoji", recipe, rng, 0))
    try:
        first = simulator.answer(devices, verified)
        assert first.uploaded == 12 == sum(first.truth.values())
        assert all(isinstance(i, int) and 0 <= i < recipe.encoding.dimension for i in first.truth)
        again = simulator.answer(devices, verified)
    finally:
        simulator.close(devices)
    assert again.uploaded == 0 and not again.truth
    assert sum(again.refused.values()) == 12
    assert "has used its 1 report(s)" in next(iter(again.refused))
    assert len(world.leader.uploads) == 12


def test_a_sybil_surge_answers_one_value_at_one_instant(tmp_path: Path) -> None:
    """The Sybils are devices past the population's count: enrolled, budgeted and tokened like
    the others, all answering `sybil_answer` at the simulation's start; offline devices do
    nothing at all."""
    world = World(tmp_path, tokens=False)
    world.publish()
    config = DeviceConfig(
        recipe_server_url=RECIPES,
        recipe_server_key=world.signer.public_key,
        use_tokens=False,
        donation=DonationSchedule(1, 0),
    )
    mix = PopulationMix(offline=0.5, sybils=30, sybil_answer=3, window=3600)
    simulator = Simulator(
        config, trusted=TRUSTED, http=world.http, clock=world.clock.now, progress=None, mix=mix
    )
    summary = simulator.run("emoji.daily", 40, "emoji")
    assert summary.devices == 70 and summary.sybils == 30
    assert summary.offline == sum(mix.is_offline(0, i) for i in range(40)) > 0
    assert summary.uploaded == len(world.leader.uploads) == 70 - summary.offline
    assert summary.truth[3] >= 30
    times = [r.report_metadata.time for r in world.leader.uploads]
    # 30 reports at the start's time bucket: the Sybils'; the others spread over the hour before.
    start_bucket = world.clock.now() - world.clock.now() % 3600
    assert sum(t == start_bucket for t in times) == 30


def test_network_phases_reach_every_device_even_when_one_fails() -> None:
    """`Simulator._each` (a few pool tasks pulling devices): every item is handled exactly
    once, by up to `concurrency` threads, and an unexpected failure of one item is raised
    after all the others were done."""
    for concurrency in (1, 4):
        _each_reaches_every_item(concurrency)


def _each_reaches_every_item(concurrency: int) -> None:
    simulator = Simulator(DeviceConfig(), trusted=TRUSTED, concurrency=concurrency, progress=None)
    seen: list[int] = []
    threads: set[int] = set()

    def fn(item: int) -> None:
        threads.add(threading.get_ident())
        if item == 7:
            raise RuntimeError("device 7")
        seen.append(item)

    with pytest.raises(RuntimeError, match="device 7"):
        simulator._each(fn, list(range(100)))
    assert sorted(seen) == [i for i in range(100) if i != 7]
    assert 1 <= len(threads) <= concurrency
    simulator._each(fn, [])


def test_shards_side_by_side_take_the_span_from_first_start_to_last_end() -> None:
    """`sagg devices run --workers N` merges its processes' summaries: they started a little
    apart, so the merged time is from the first start to the last end, not the longest shard's
    own (which made the merged devices/s too high)."""
    merged = SimulationSummary()
    for started, seconds in ((100.0, 10.0), (101.5, 10.5)):
        shard = SimulationSummary(devices=50, uploaded=50, seconds=seconds, cpu_seconds=1.0)
        shard.started, shard.ended = started, started + seconds
        merged.merge(shard)
    assert merged.seconds == pytest.approx(12.0)
    assert (merged.devices, merged.uploaded, merged.cpu_seconds) == (100, 100, 2.0)
    assert (merged.started, merged.ended) == (100.0, 112.0)


def test_shards_sent_aggregates_add_up_per_task_and_read_back_as_json() -> None:
    """Each process keeps what its devices sent per task; merged, the totals add coordinate
    by coordinate (a task only one shard reached included), and the JSON of
    `--summary-json` carries them with the counts. The first shard's totals stay its own."""
    histogram = VdafSpec(type="Prio3Histogram", length=3, chunk_length=1)
    count = VdafSpec(type="Prio3Count")
    shards = [SimulationSummary(uploaded=3), SimulationSummary(uploaded=2)]
    shards[0].sent["A"] = PlainAggregate.of(histogram, [0, 2, 2])
    shards[1].sent["A"] = PlainAggregate.of(histogram, [1, 2])
    shards[1].sent["B"] = PlainAggregate.of(count, [1, 1, 0])
    merged = SimulationSummary()
    for shard in shards:
        merged.merge(shard)
    body = json.loads(json.dumps(merged.as_json()))
    assert body["sent"] == {
        "A": {"reports": 5, "aggregate": [1, 1, 3]},
        "B": {"reports": 3, "aggregate": 2},
    }
    assert body["uploaded"] == 5
    assert shards[0].sent["A"].result == [1, 0, 2]


def test_a_chunk_with_tokens_commits_once_a_device_and_four_times_together(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The worker store's commits for a chunk of devices with tokens: each device's tokens
    attached to its pending row as they arrive, and the chunk's enrolment marks, budget
    charges, sealed reports and upload outcomes one transaction each (six a device before)."""
    commits: list[str] = []

    class Traced(StateDb):
        def __init__(self, path: Path | str | None, *, durable: bool = True) -> None:
            super().__init__(path, durable=durable)
            self.conn.set_trace_callback(
                lambda sql: commits.append(sql) if sql == "COMMIT" else None
            )

    monkeypatch.setattr("client_sdk.simulator.StateDb", Traced)
    world = World(tmp_path)
    world.publish()
    simulator = world_simulator(world, DonationSchedule(1, 0), 4, progress=None)
    summary = simulator.run("emoji.daily", CHUNK, "emoji")
    assert summary.uploaded == CHUNK == len(world.leader.uploads)
    assert len(commits) == CHUNK + 4


def test_when_one_upload_raises_the_others_outcomes_are_recorded(tmp_path: Path) -> None:
    """A chunk's upload outcomes are recorded after its uploads: one device's upload raising
    (a bug, not a refusal) still leaves every other report that went out marked sent, and the
    one that raised pending (a resumed run re-sends it)."""

    class Failing(Uploader):
        calls = 0

        def upload(self, *args: Any, **kwargs: Any) -> list[UploadResult]:
            Failing.calls += 1
            if Failing.calls == 5:
                raise RuntimeError("the fifth upload")
            return super().upload(*args, **kwargs)

    world = World(tmp_path)
    world.publish()
    simulator = world_simulator(
        world,
        DonationSchedule(1, 0),
        4,
        directory=tmp_path / "store",
        progress=None,
        uploader=Failing(world.http),
    )
    with pytest.raises(RuntimeError, match="fifth"):
        simulator.run("emoji.daily", 10, "emoji")
    with sqlite3.connect(tmp_path / "store" / "shard-0-of-1.state.sqlite3") as conn:
        states = dict(
            conn.execute("SELECT state, COUNT(*) FROM pending_upload GROUP BY state").fetchall()
        )
        sent = conn.execute("SELECT COUNT(*) FROM audit WHERE kind = 'sent'").fetchone()[0]
    assert states == {"sent": 9, "pending": 1} and sent == 9 == len(world.leader.uploads)
