"""Reports the SDK produces, through the real leader and helper (in process, SQLite each),
collected and unsharded: the aggregate is the sum of the randomized measurements the devices
audited as sent."""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient

from client_sdk.device import Device
from services.aggregator.app import create_app
from services.aggregator.drivers.runner import DriverRunner
from services.collector.analysis import Collection, analyze
from services.common.clock import TestClock
from shared.b64url import b64url_encode
from shared.dap.extensions import recipe_digest
from shared.dap.messages import BatchSelector, HpkeConfigList, Interval, Query
from shared.dp.vdaf_mapping import sfp_sketches_from_aggregate
from shared.recipe.accounting import expected_vdaf
from shared.recipe.model import RecipeDraft, SfpRandomizer
from shared.recipe.signing import recipe_bytes
from tests.aggregator import helpers
from tests.aggregator.env import Env, make_env
from tests.aggregator.helpers import TaskParams
from tests.aggregator.test_end_to_end import unshard
from tests.client_sdk.harness import EMOJI, ISSUER, NOW, World, draft, verified
from tests.recipe.helpers import sfp_randomizer

TP = 3600


def build(tmp_path: Path, tokens: bool, **overrides: Any) -> tuple[World, Env]:
    spec = RecipeDraft.model_validate(draft(**overrides))
    vdaf = expected_vdaf(spec.randomizer, spec.encoding)
    clock = TestClock(NOW)
    params = TaskParams(vdaf=vdaf.model_dump(exclude_none=True), min_batch_size=1)
    env = make_env(lambda: f"sqlite:///{tmp_path / (secrets.token_hex(4) + '.db')}", clock, params)
    world = World(
        tmp_path,
        task_id=params.task_id,
        leader_configs=HpkeConfigList((env.leader_config,)),
        helper_configs=HpkeConfigList((env.helper_config,)),
        clock=clock,
        tokens=tokens,
    )
    world.router.apps["leader.test"] = env.leader
    world.router.apps["helper.test"] = env.helper
    world.publish(**overrides)
    return world, env


def run_devices(world: World, n: int, tokens: bool) -> list[Device]:
    devices = []
    recipe = None
    for i in range(n):
        device = world.device(None, tokens=tokens, bind_recipe=tokens)
        device.events.add("emoji", {"emoji": EMOJI[i % 4]}, NOW - 100)
        recipe = recipe or verified(world, device)  # verified once, as the simulator does
        assert device.answer(recipe).status == "queued"
        assert [r.status for r in device.run_due()] == ["sent"]
        devices.append(device)
    return devices


def collect_and_check(env: Env, devices: list[Device]) -> list[int]:
    query = Query.time_interval(Interval(NOW, TP))
    collection = env.collect(query)
    assert collection.report_count == len(devices)
    aggregate = unshard(env, collection, BatchSelector.time_interval(Interval(NOW, TP)))
    sent = [d.audit.entries("sent")[0].detail["measurement"] for d in devices]
    assert aggregate == [sum(col) for col in zip(*sent, strict=True)]
    return list(aggregate)


def test_plain_reports_aggregate_to_the_randomized_measurements(tmp_path: Path) -> None:
    world, env = build(tmp_path, tokens=False)
    devices = run_devices(world, 12, tokens=False)
    # No extensions at all: today's aggregators refuse unknown ones at aggregation.
    collect_and_check(env, devices)


class StrictParams(TaskParams):
    """The task as the recipe server will provision it: bound to the recipe, tokens required."""

    digest: str = ""
    #: The issuer keys the recipe pins.
    key_ids: tuple[str, ...] = ()

    def definition(self, role: str) -> dict[str, Any]:
        d = super().definition(role)
        d["recipe_digest"] = self.digest
        d["tokens"] = {
            "issuer_url": ISSUER,
            "issuer_name": "issuer.test",
            "window_seconds": 86400,
            "key_ids": self.key_ids,
        }
        return d


def test_bound_and_tokened_reports_aggregate(tmp_path: Path) -> None:
    """The aggregators check the binding and the token in each share (both enforced)."""
    clock = TestClock(NOW)
    world = World(tmp_path, clock=clock)
    apps = []
    for _ in range(2):
        settings = helpers.settings(f"sqlite:///{tmp_path / (secrets.token_hex(4) + '.db')}")
        apps.append(TestClient(create_app(settings, clock=clock, issuer_http=world.http)))
    leader, helper = apps
    world.router.apps["leader.test"] = leader
    world.router.apps["helper.test"] = helper
    configs = [HpkeConfigList.decode(c.get("/hpke_config").content) for c in apps]
    world.recipe_server = world.make_recipe_server("strict.sqlite3", configs[0], configs[1])
    world.router.apps["recipes.test"] = world.recipe_server
    world.publish()
    recipe = verified(world, world.device(None, tokens=False)).recipe
    params = StrictParams(
        vdaf=recipe.task.vdaf.model_dump(exclude_none=True),
        min_batch_size=recipe.min_batch_size,
        task_id=world.task_id,
    )
    params.digest = b64url_encode(recipe_digest(recipe_bytes(recipe)))
    params.key_ids = recipe.token_issuer.key_ids
    helpers.provision(leader, params, "leader")
    helpers.provision(helper, params, "helper")
    runner = DriverRunner(leader.app.state.aggregator, http=helper)  # type: ignore[attr-defined]
    env = Env(params, clock, leader, helper, runner, configs[0].configs[0], configs[1].configs[0])
    devices = run_devices(world, recipe.min_batch_size, tokens=True)
    # Without the binding the aggregators refuse the report (it is never aggregated).
    unbound = world.device(None, tokens=True, bind_recipe=False)
    unbound.events.add("emoji", {"emoji": "fire"}, NOW - 100)
    unbound.answer(verified(world, unbound))
    unbound.run_due()
    collect_and_check(env, devices)


SFP = sfp_randomizer((0.5, 4, 16), (0.5, 4, 8))


def test_sfp_reports_pass_the_validity_proof_and_decode_per_position(tmp_path: Path) -> None:
    """SFP measurements (word CMS + positioned fragment CMS in one MultiHotHistogram) are
    accepted by both aggregators' validity checks and their sum splits back into sketches."""
    overrides: dict[str, Any] = {
        "encoding": {"features": [{"kind": "string", "field": "emoji"}]},
        "randomizer": SFP,
    }
    world, env = build(tmp_path, tokens=False, **overrides)
    devices = run_devices(world, 12, tokens=False)
    recipe = verified(world, devices[0]).recipe
    assert isinstance(recipe.randomizer, SfpRandomizer)
    aggregate = collect_and_check(env, devices)
    sketches = sfp_sketches_from_aggregate(recipe.randomizer.puzzle(), aggregate)
    assert sketches.n == 12 and sum(n for _, n in sketches.fragments) == 12
    analysis = analyze(recipe, Collection(12, tuple(aggregate)))
    assert analysis.randomizer == "sfp" and analysis.privacy is not None
    assert analysis.privacy.local_epsilon == 1.0
