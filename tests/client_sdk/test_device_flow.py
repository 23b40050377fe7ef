"""Recipe verification, refusals and the report path of one device, against a fake leader."""

from __future__ import annotations

import dataclasses
import sqlite3
import stat
from pathlib import Path

import httpx
import pytest

from client_sdk.device import Device, DeviceConfig
from client_sdk.manufacturer import SimulatedDevice
from client_sdk.policy import TrustedParties, load_policy
from client_sdk.recipes import VerifiedRecipe
from client_sdk.reports import AnyReport
from client_sdk.tokens import TokenError
from shared import hpke
from shared.b64url import b64url_encode
from shared.dap.extensions import (
    EXTENSION_PRIVACY_PASS_TOKEN,
    EXTENSION_RECIPE_BINDING,
    decode_extensions,
    recipe_digest,
    token_challenge,
    token_policy_for_issuer,
)
from shared.dap.hpke_context import input_share_aad, input_share_info
from shared.dap.ids import TaskId
from shared.dap.messages import PlaintextInputShare, Report, Role
from shared.recipe.model import Recipe
from shared.recipe.signing import recipe_bytes
from tests.client_sdk.harness import ISSUER, NOW, TRUSTED, World, policy, verified
from tests.recipe.helpers import example_recipe


@pytest.fixture
def world(tmp_path: Path) -> World:
    return World(tmp_path)


def open_share(world: World, report: AnyReport, role: Role) -> PlaintextInputShare:
    assert isinstance(report, Report)  # the world's recipes name DAP-09 tasks
    agg = world.leader if role == Role.LEADER else world.helper
    ct = (
        report.leader_encrypted_input_share
        if role == Role.LEADER
        else (report.helper_encrypted_input_share)
    )
    aad = input_share_aad(world.task_id, report.report_metadata, report.public_share)
    plain = hpke.open(agg.key(ct.config_id), ct.enc, input_share_info(role), aad, ct.payload)
    return PlaintextInputShare.decode(plain)


def test_report_carries_binding_in_both_shares_and_each_its_own_token(
    world: World, tmp_path: Path
) -> None:
    world.publish()
    device = world.device(tmp_path / "d")
    device.events.add("emoji", {"emoji": "fire"}, NOW - 60)
    outcome = device.answer(verified(world, device))
    assert outcome.status == "queued"
    results = device.run_due()
    assert [r.status for r in results] == ["sent"]
    (report,) = world.leader.uploads
    recipe = device.recipe("emoji.daily", 1)
    tokens = []
    for role in (Role.LEADER, Role.HELPER):
        share = open_share(world, report, role)
        kinds = [e.extension_type for e in share.extensions]
        assert sorted(kinds) == [EXTENSION_PRIVACY_PASS_TOKEN, EXTENSION_RECIPE_BINDING]
        parsed = decode_extensions(share.extensions)
        assert parsed.ok and parsed.binding is not None and parsed.token is not None
        assert parsed.binding.recipe_digest == recipe_digest(recipe_bytes(recipe))
        assert parsed.binding.min_batch_size == 206
        expected = token_challenge(
            world.task_id, report.report_metadata.time, token_policy_for_issuer(ISSUER), role
        )
        assert parsed.token.challenge_digest == expected.digest()
        tokens.append(parsed.token)
    assert tokens[0].nonce != tokens[1].nonce  # two issuances, nothing in common
    sent = device.audit.entries("sent")
    assert len(sent) == 1 and sent[0].report_id == report.report_metadata.report_id.to_b64url()
    assert sent[0].detail["measurement"] in ([0, 0, 0, 0, 0], sent[0].detail["measurement"])
    assert "fire" not in str(device.audit.entries())  # never the raw data


def test_tampered_recipe_is_refused_and_audited(world: World, tmp_path: Path) -> None:
    world.publish()
    honest = world.recipe_server

    def tamper(request: httpx.Request) -> httpx.Response:
        response = honest.get(request.url.raw_path.decode())
        body = response.json()
        if request.url.path.startswith("/recipes/"):
            body["signed_recipe"]["recipe"]["sampling_rate"] = 0.9
        return httpx.Response(response.status_code, json=body)

    world.router.apps["recipes.test"] = tamper
    device = world.device(tmp_path / "d")
    assert device.fetch_recipe("emoji.daily") is None
    (entry,) = device.audit.entries("refused")
    assert "signature" in entry.detail["reason"]


def test_unlogged_recipe_is_refused(world: World, tmp_path: Path) -> None:
    world.publish()
    signed_elsewhere = world.signer.sign_recipe(
        device_recipe(world, tmp_path).model_copy(update={"version": 7})
    )
    honest = world.recipe_server

    def serve_unlogged(request: httpx.Request) -> httpx.Response:
        response = honest.get(request.url.raw_path.decode())
        body = response.json()
        if request.url.path.startswith("/recipes/"):
            body["signed_recipe"] = signed_elsewhere.to_json_value()
        return httpx.Response(response.status_code, json=body)

    world.router.apps["recipes.test"] = serve_unlogged
    device = world.device(tmp_path / "d2")
    assert device.fetch_recipe("emoji.daily") is None
    (entry,) = device.audit.entries("refused")
    assert "inclusion" in entry.detail["reason"] or "root" in entry.detail["reason"]


def device_recipe(world: World, tmp_path: Path) -> Recipe:
    device = world.device(tmp_path / "probe", tokens=False)
    found = verified(world, device)
    device.close()
    return found.recipe


def test_forked_log_is_refused_across_restarts(world: World, tmp_path: Path) -> None:
    world.publish()
    device = world.device(tmp_path / "d")
    assert device.fetch_recipe("emoji.daily") is not None
    device.close()
    # Another log under the same key: same size, different content (a split view).
    fork = world.make_recipe_server(
        "fork.sqlite3", world.leader.config_list(), world.helper.config_list()
    )
    world.publish(fork, description="the other view")
    world.router.apps["recipes.test"] = fork
    restarted = world.device(tmp_path / "d", enroll=False)
    assert restarted.fetch_recipe("emoji.daily") is None
    (entry,) = restarted.audit.entries("refused")
    assert "two different roots" in entry.detail["reason"]
    # A fresh device with no history accepts the fork: the persisted head is what caught it.
    assert world.device(tmp_path / "fresh", tokens=False).fetch_recipe("emoji.daily") is not None


def test_query_outside_the_class_is_refused_and_nothing_consumed(
    world: World, tmp_path: Path
) -> None:
    world.publish(
        query={
            "stream": "emoji",
            "fields": ["emoji", "age"],
            "selection": {"kind": "random_event", "window_seconds": 86400},
        }
    )
    device = world.device(tmp_path / "d")
    outcome = device.answer(verified(world, device))
    assert outcome.status == "refused" and "field 'age' is not in the class" in outcome.reason
    assert device.audit.entries("refused")[0].detail["reason"] == outcome.reason
    assert device.budget.analysis_usage("emoji.popular").reports_used == 0
    assert device.pending() == []


def _rotate_leader(world: World) -> hpke.HpkeKeyPair:
    """The leader rotates its key: config 1 (the recipe's) is outdated; its bare
    ``/hpke_config`` now serves config 9."""
    world.leader.outdated.add(1)
    world.leader.keys.append(hpke.generate_keypair(9))
    return world.leader.key(9)


def test_outdated_config_follows_the_republished_recipe(world: World, tmp_path: Path) -> None:
    world.publish()
    device = world.device(tmp_path / "d")
    device.answer(verified(world, device))
    _rotate_leader(world)
    # The recipe server publishes the rotation: a new version listing the leader's new key.
    provisioner = world.provisioners["recipes.sqlite3"]
    provisioner.task = dataclasses.replace(
        provisioner.task, leader_hpke_configs=b64url_encode(world.leader.config_list().encode())
    )
    world.publish(version=2)
    (result,) = device.run_due()
    assert result.status == "sent"
    (report,) = world.leader.uploads
    assert report.leader_encrypted_input_share.config_id == 9
    share = open_share(world, report, Role.LEADER)
    assert share.payload
    # Still the answer to version 1, the recipe the device checked and spent budget on.
    binding = decode_extensions(share.extensions).binding
    assert binding is not None
    assert binding.recipe_digest == recipe_digest(recipe_bytes(device.recipe("emoji.daily", 1)))


def test_outdated_config_never_seals_to_a_bare_hpke_config_answer(
    world: World, tmp_path: Path
) -> None:
    """A leader (or a network attacker in front of it) answers outdatedConfig and serves a
    key of its choosing at ``/hpke_config``: the device re-seals only to configs the signed,
    logged recipe lists, and these did not change, so nothing is re-sent."""
    world.publish()
    device = world.device(tmp_path / "d")
    device.answer(verified(world, device))
    _rotate_leader(world)
    received: list[int] = []
    leader = world.leader

    def recording(request: httpx.Request) -> httpx.Response:
        if request.method == "PUT":
            report = Report.decode(request.read())
            received.append(report.leader_encrypted_input_share.config_id)
        return leader(request)

    world.router.apps["leader.test"] = recording
    (result,) = device.run_due()
    assert result.status == "rejected"
    assert received == [1]  # the one report, to the recipe's key, and no other
    (entry,) = device.audit.entries("failed")
    assert entry.detail["reason"] == (
        "the leader answered outdatedConfig but the signed recipe still lists leader config 1"
    )
    assert device.pending() == []
    assert device.run_due() == [] and received == [1]


def test_outdated_config_with_a_recipe_that_no_longer_verifies(
    world: World, tmp_path: Path
) -> None:
    world.publish()
    device = world.device(tmp_path / "d", max_upload_rounds=2)
    device.answer(verified(world, device))
    _rotate_leader(world)
    honest = world.recipe_server

    def tamper(request: httpx.Request) -> httpx.Response:
        response = honest.get(request.url.raw_path.decode())
        body = response.json()
        if request.url.path.startswith("/recipes/"):
            configs = b64url_encode(world.leader.config_list().encode())
            body["signed_recipe"]["recipe"]["task"]["leader_hpke_configs"] = configs
        return httpx.Response(response.status_code, json=body)

    world.router.apps["recipes.test"] = tamper
    # Not final at once (the recipe server may only be down), final after the last round.
    assert [r.status for r in device.run_due()] == ["failed"]
    assert device.audit.entries("failed") == []
    assert [r.status for r in device.run_due()] == ["failed"]
    (entry,) = device.audit.entries("failed")
    assert entry.detail["reason"].startswith(
        "the leader answered outdatedConfig and the recipe could not be verified again"
    )
    assert "signature" in entry.detail["reason"]
    assert world.leader.uploads == []


def test_server_errors_are_retried_with_backoff(world: World, tmp_path: Path) -> None:
    world.publish()
    device = world.device(tmp_path / "d")
    device.answer(verified(world, device))
    world.leader.fail_next = 2
    (result,) = device.run_due()
    assert result.status == "sent" and result.attempts == 3
    world.leader.fail_next = 100
    device2 = world.device(tmp_path / "d2", max_upload_rounds=2)
    device2.answer(verified(world, device2))
    assert [r.status for r in device2.run_due()] == ["failed"]
    assert device2.audit.entries("failed") == []  # one round: still pending
    assert [r.status for r in device2.run_due()] == ["failed"]
    assert len(device2.audit.entries("failed")) == 1 and device2.pending() == []


def test_no_token_means_no_upload(world: World, tmp_path: Path) -> None:
    world.publish()
    device = world.device(tmp_path / "d", enroll=False)  # the attester does not know it
    device.answer(verified(world, device))
    assert [r.status for r in device.run_due()] == ["failed"]
    assert world.leader.uploads == [] and len(device.pending()) == 1


def test_policy_file_round_trip(tmp_path: Path) -> None:
    p = policy()
    (tmp_path / "p.json").write_text(p.model_dump_json())
    assert load_policy(tmp_path / "p.json") == p
    (tmp_path / "p.toml").write_text(
        '[trusted]\nleaders = ["https://l.example"]\nhelpers = ["https://h.example"]\n'
        'token_issuers = ["https://i.example"]\n'
        '[[query_classes]]\nname = "k"\nstreams = ["keyboard"]\nfields = ["ngram"]\n'
        "max_local_epsilon = 8\nmax_epsilon = 1\nmax_delta = 1e-6\n"
        "[default_analysis]\nepsilon = 0.5\nreports = 1\n"
        "[fields.ngram]\nlocal_epsilon = 5\nepsilon = 1\nreports = 1\n"
    )
    loaded = load_policy(tmp_path / "p.toml")
    assert loaded.trusted.helpers == ("https://h.example",)
    assert loaded.fields["ngram"].local_epsilon == 5
    assert loaded.analysis_allowance("x").epsilon == 0.5


def test_event_store_retention(tmp_path: Path) -> None:
    device = Device(policy(), DeviceConfig(), directory=tmp_path / "e")
    device.events.register_stream("emoji", 100)
    device.events.add("emoji", {"emoji": "fire"}, 1000)
    device.events.add("emoji", {"emoji": "cry"}, 1090)
    assert device.events.purge(1150) == 1
    assert device.events.records("emoji", 0, 2000) == [{"emoji": "cry"}]
    with pytest.raises(KeyError):
        device.events.add("nope", {}, 1)
    device.close()


def test_device_refuses_recipes_naming_parties_its_policy_does_not_pin(tmp_path: Path) -> None:
    """Issue 12 item 2: whoever writes or signs the recipe, the device reports only through
    the leader, helper and token issuer its OS-shipped policy pins. A recipe server (the
    pinned key: signature and log verify) whose operator allows another issuer publishes a
    recipe naming it: the device refuses it before sampling, consuming nothing."""
    world = World(tmp_path, tokens=False)
    evil = "http://evil-issuer.test"
    world.recipe_server = world.make_recipe_server(
        "other.sqlite3", world.leader.config_list(), world.helper.config_list(), issuer=evil
    )
    world.router.apps["recipes.test"] = world.recipe_server
    world.publish()
    device = world.device(None, tokens=False)
    device.events.add("emoji", {"emoji": "fire"}, NOW - 100)
    outcome = device.answer(verified(world, device))
    assert outcome.status == "refused"
    assert outcome.reason == f"trust: token issuer {evil} is not pinned by the device policy"
    assert device.pending() == []
    assert device.budget.analysis_usage("emoji.popular").reports_used == 0
    # Nor does it enroll there (enrolling shows the device's certificate).
    with pytest.raises(TokenError, match="is not pinned"):
        device.attester_url(verified(world, device).recipe)
    # Likewise an aggregator the policy does not pin.
    narrow = policy().model_copy(
        update={"trusted": TRUSTED.model_copy(update={"helpers": ("http://other-helper.test",)})}
    )
    world.recipe_server = world.make_recipe_server(
        "good.sqlite3", world.leader.config_list(), world.helper.config_list()
    )
    world.router.apps["recipes.test"] = world.recipe_server
    world.publish()
    strict = world.device(None, tokens=False, policy_=narrow)
    refused = strict.answer(verified(world, strict))
    assert refused.status == "refused"
    assert "helper http://helper.test is not pinned" in refused.reason


def test_device_with_tokens_refuses_a_recipe_pinning_no_issuer_key(tmp_path: Path) -> None:
    """Without pinned keys, the issuer could sign each device's tokens under its own key and
    recognise its reports: a device that uses tokens refuses such a recipe."""
    recipe = example_recipe()
    unpinned = recipe.model_copy(
        update={"token_issuer": recipe.token_issuer.model_copy(update={"key_ids": ()})}
    )
    trusted = TrustedParties(
        leaders=(recipe.task.leader,),
        helpers=(recipe.task.helper,),
        token_issuers=(recipe.token_issuer.url,),
    )
    device = World(tmp_path, tokens=False).device(
        None, tokens=True, enroll=False, policy_=policy().model_copy(update={"trusted": trusted})
    )
    plan = device.plan(VerifiedRecipe(unpinned, recipe_bytes(unpinned), 0))
    assert (plan.status, plan.reason) == ("refused", "trust: the recipe pins no token issuer key")


def test_state_from_before_per_role_tokens_is_upgraded(world: World, tmp_path: Path) -> None:
    """A device's state written before tokens were per aggregator: its cached tokens (of a
    challenge no aggregator accepts now) go, a pending report takes a fresh pair."""
    world.publish()
    identity = SimulatedDevice.manufacture(world.ca)
    device = world.device(tmp_path / "d", identity=identity)
    device.answer(verified(world, device))
    device.close()
    path = tmp_path / "d" / "state.sqlite3"
    with sqlite3.connect(path) as conn:  # back to the old layout, with an old token cached
        conn.executescript(
            "DROP TABLE token; ALTER TABLE pending_upload DROP COLUMN helper_token;"
            "CREATE TABLE token (id INTEGER PRIMARY KEY AUTOINCREMENT, task_id TEXT NOT NULL,"
            " window_start INTEGER NOT NULL, token BLOB NOT NULL, used INTEGER NOT NULL DEFAULT 0);"
            "CREATE INDEX token_free ON token (task_id, window_start, used);"
        )
        conn.execute(
            "INSERT INTO token (task_id, window_start, token) VALUES (?, 0, x'00')",
            (world.task_id.to_b64url(),),
        )
    restarted = world.device(tmp_path / "d", enroll=False, identity=identity)
    with restarted.db.lock:
        assert restarted.db.conn.execute("SELECT COUNT(*) FROM token").fetchone() == (0,)
    (item,) = restarted.pending()
    assert item.token is None and item.helper_token is None
    assert [r.status for r in restarted.run_due()] == ["sent"]
    (report,) = world.leader.uploads
    assert decode_extensions(open_share(world, report, Role.HELPER).extensions).token is not None


def test_a_devices_stores_are_owner_only_and_never_a_planted_link(tmp_path: Path) -> None:
    """The raw events and the budget ledger: 0600 in a 0700 directory; a link planted where
    the events store goes (to read them, or to reset the ledger) is refused."""
    config = DeviceConfig()
    Device(policy(), config, directory=tmp_path / "d").close()
    assert stat.S_IMODE((tmp_path / "d").stat().st_mode) == 0o700
    for store in (tmp_path / "d").iterdir():
        assert stat.S_IMODE(store.lstat().st_mode) == 0o600, store.name
    (tmp_path / "p").mkdir(mode=0o700)
    (tmp_path / "p" / "events.sqlite3").symlink_to(tmp_path / "elsewhere.sqlite3")
    with pytest.raises(OSError, match="symbolic link"):
        Device(policy(), config, directory=tmp_path / "p")
    assert not (tmp_path / "elsewhere.sqlite3").exists()


def test_a_token_cached_for_one_share_is_used_with_one_fetched_for_the_other(
    world: World, tmp_path: Path
) -> None:
    """Sealing takes the cached tokens first; with only the leader's share's token cached,
    nothing is taken until the helper's is fetched, then each share carries its own and the
    cache holds no unused token."""
    world.publish()
    device = world.device(tmp_path / "d")
    assert device.answer(verified(world, device)).status == "queued"
    (item,) = device.pending()
    recipe = device.recipe(item.recipe_id, item.version)
    task_id = TaskId.from_b64url(item.task_id)
    token_policy = device.token_policy(recipe)
    args = (device.attester_url(recipe), NOW, recipe.token_issuer.key_ids)
    device.tokens.fetch(task_id, item.donation_time, token_policy, Role.LEADER, *args)
    with device.db.lock:
        ((cached,),) = device.db.conn.execute("SELECT token FROM token WHERE used = 0").fetchall()
    # Sealing without the prefetch (step 6): the helper's token is fetched at sealing.
    sealed = device.seal(item, item.donation_time)
    assert device.send(sealed, item.donation_time).status == "sent"
    (report,) = world.leader.uploads
    leader, helper = (
        decode_extensions(open_share(world, report, role).extensions).token
        for role in (Role.LEADER, Role.HELPER)
    )
    assert leader is not None and helper is not None
    assert leader.encode() == bytes(cached) and helper.nonce != leader.nonce
    for role in (Role.LEADER, Role.HELPER):
        assert device.tokens.available(task_id, item.donation_time, token_policy, role) == 0


def test_prefetched_tokens_are_attached_to_their_report_and_recorded_used(
    world: World, tmp_path: Path
) -> None:
    """Step 6 attaches the pair it fetched for a pending report to that report's row and
    records both tokens used, in one transaction: sealing takes them from the row without
    going to the issuer again, and the device's token table still holds every token it got."""
    world.publish()
    device = world.device(tmp_path / "d")
    assert device.answer(verified(world, device)).status == "queued"
    (item,) = device.pending()
    assert device.prefetch_tokens(item.token_fetch_at) == 1
    (attached,) = device.pending()
    assert attached.token is not None and attached.helper_token is not None
    with device.db.lock:
        cursor = device.db.conn.execute("SELECT role, token, used FROM token ORDER BY role")
        rows = cursor.fetchall()
    assert [(role, bytes(token), used) for role, token, used in rows] == [
        (int(Role.LEADER), attached.token, 1),
        (int(Role.HELPER), attached.helper_token, 1),
    ]
    del world.router.apps["issuer.test"]  # nothing more to fetch
    sealed = device.seal(attached, item.donation_time)
    assert device.send(sealed, item.donation_time).status == "sent"
    (report,) = world.leader.uploads
    for role, token in ((Role.LEADER, attached.token), (Role.HELPER, attached.helper_token)):
        carried = decode_extensions(open_share(world, report, role).extensions).token
        assert carried is not None and carried.encode() == token
