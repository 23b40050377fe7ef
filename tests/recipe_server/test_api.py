"""Recipe server API with a fake provisioner: auth, validation, publication, proofs, idempotency."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from fastapi.testclient import TestClient

from services.common.clock import TestClock
from shared.b64url import b64url_decode, b64url_encode
from shared.recipe.accounting import expected_vdaf, required_batch_size
from shared.recipe.log import (
    ForkError,
    LogVerificationError,
    LogVerifier,
    SignedTreeHead,
    leaf_hash,
    sign_tree_head,
)
from shared.recipe.model import RecipeDraft, RecipeTask, TokenIssuerRef
from shared.recipe.signing import RecipeSigner, recipe_bytes
from tests.recipe.helpers import draft_json
from tests.recipe_server.conftest import KEYBOARD_TOKEN, SEED, FakeProvisioner, auth

SIGNER = RecipeSigner.from_seed(b64url_decode(SEED, "seed"))


def _publish(client: TestClient, doc: dict[str, Any], token: str | None = None) -> Any:
    headers = auth(token) if token else auth()
    return client.post("/recipes", json=doc, headers=headers)


def _proof(items: list[str]) -> list[bytes]:
    return [b64url_decode(p, "proof") for p in items]


def test_keys_and_healthz(client: TestClient) -> None:
    assert client.get("/healthz").json() == {"status": "ok"}
    keys = client.get("/keys").json()["keys"]
    assert keys == [
        {
            "key_id": SIGNER.key_id,
            "algorithm": "Ed25519",
            "public_key": b64url_encode(SIGNER.public_key),
        }
    ]
    sth = SignedTreeHead.model_validate(client.get("/log/sth").json())
    assert sth.tree_size == 0
    LogVerifier(SIGNER.public_key).update(sth)


def test_auth(client: TestClient, provisioner: FakeProvisioner) -> None:
    doc = draft_json()
    assert client.post("/recipes", json=doc).status_code == 401
    r = client.post("/recipes", json=doc, headers=auth("not-a-valid-token-at-all"))
    assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
    # The keyboard team owns "keyboard." analyses only.
    r = _publish(client, draft_json(analysis_id="ads.clicks"), KEYBOARD_TOKEN)
    assert r.status_code == 403 and "ads.clicks" in r.json()["title"]
    assert provisioner.created == []
    assert _publish(client, doc, KEYBOARD_TOKEN).status_code == 201


@pytest.mark.parametrize(
    ("override", "field"),
    [
        ({"sampling_rate": 0}, "sampling_rate"),
        ({"sampling_rate": 2}, "sampling_rate"),
        ({"min_batch_size": 0}, "min_batch_size"),
        ({"randomizer": {"name": "one_hot", "eps0": -1}}, "randomizer.one_hot.eps0"),
        ({"privacy": {"epsilon": 1, "delta": 0.5}}, "privacy.delta"),
        ({"colour": "blue"}, "colour"),
        (
            {"task": {"rate_validation": {"expected_population": 0, "collection_window": 7200}}},
            "task.rate_validation.expected_population",
        ),
        ({"task": {"rate_validation": {"expected_population": 10}}}, "task"),
    ],
)
def test_model_validation_names_the_field(
    client: TestClient, override: dict[str, Any], field: str
) -> None:
    r = _publish(client, draft_json(**override))
    assert r.status_code == 422
    assert field in [e["field"] for e in r.json()["errors"]]


def test_batch_too_small_says_what_is_needed(
    client: TestClient, provisioner: FakeProvisioner
) -> None:
    draft = RecipeDraft.model_validate(draft_json())
    needed = required_batch_size(draft.randomizer, draft.sampling_rate, draft.privacy)
    assert needed is not None and needed > 100
    r = _publish(client, draft_json(min_batch_size=needed - 1))
    assert r.status_code == 422
    (error,) = r.json()["errors"]
    assert error["field"] == "min_batch_size"
    assert f"min_batch_size >= {needed} is needed" in error["message"]
    assert provisioner.created == []
    r = _publish(client, draft_json(min_batch_size=needed))
    assert r.status_code == 201
    assert provisioner.created[0].min_batch_size == needed


def test_vdaf_must_match_the_randomizer(client: TestClient) -> None:
    doc = draft_json()
    doc["task"] = {"vdaf": {"type": "Prio3Histogram", "length": 10, "chunk_length": 3}}
    r = _publish(client, doc)
    assert r.status_code == 422
    assert r.json()["errors"][0]["field"] == "task.vdaf"
    draft = RecipeDraft.model_validate(draft_json())
    doc["task"] = {
        "vdaf": expected_vdaf(draft.randomizer, draft.encoding).model_dump(exclude_none=True)
    }
    assert _publish(client, doc).status_code == 201


def test_publish_provisions_signs_and_logs(
    client: TestClient, provisioner: FakeProvisioner
) -> None:
    r = _publish(client, draft_json())
    assert r.status_code == 201
    body = r.json()
    (request,) = provisioner.created
    draft = RecipeDraft.model_validate(draft_json())
    assert request.vdaf == expected_vdaf(draft.randomizer, draft.encoding)
    assert request.min_batch_size == draft.min_batch_size
    recipe = body["signed_recipe"]["recipe"]
    assert recipe["task"]["leader"] == "https://leader.test"
    assert recipe["token_issuer"]["url"] == "https://issuer.test"
    # The device: keys, then the recipe with its proof against the head it came with.
    key = b64url_decode(client.get("/keys").json()["keys"][0]["public_key"], "key")
    verifier = LogVerifier(key)
    got = verifier.verify_recipe(
        body["signed_recipe"],
        key,
        body["leaf_index"],
        _proof(body["inclusion_proof"]),
        SignedTreeHead.model_validate(body["tree_head"]),
    )
    assert got.recipe_id == "keyboard.ngram3-age" and got.task.task_id == recipe["task"]["task_id"]
    assert body["tree_head"]["tree_size"] == 1


def test_existing_task_is_checked_not_created(
    client: TestClient, provisioner: FakeProvisioner
) -> None:
    """An analyst-named task is checked, never created; one without tokens and recipe binding
    (as `sagg task create` makes) cannot serve a recipe: 422 with the reason, nothing logged."""
    doc = draft_json()
    task_id = b64url_encode(b"\x05" * 32)
    doc["task"] = {"task_id": task_id}
    r = _publish(client, doc)
    assert r.status_code == 422, r.text
    assert r.json()["errors"] == [
        {
            "field": "task.task_id",
            "message": f"task {task_id} does not require tokens: it would count reports of "
            "any client",
        }
    ]
    assert provisioner.created == [] and provisioner.checked[0][0] == task_id
    assert client.get("/recipes").json()["recipes"] == []


def test_provisioning_failure_is_502(client: TestClient, provisioner: FakeProvisioner) -> None:
    provisioner.fail = "the helper refused the task: HTTP 409"
    r = _publish(client, draft_json())
    assert r.status_code == 502 and "helper refused" in r.json()["title"]
    assert client.get("/recipes").json()["recipes"] == []
    provisioner.fail = None
    assert _publish(client, draft_json()).status_code == 201


def test_idempotent_publish_and_conflict(client: TestClient, provisioner: FakeProvisioner) -> None:
    first = _publish(client, draft_json())
    assert first.status_code == 201
    again = _publish(client, draft_json())
    assert again.status_code == 200 and again.json() == first.json()
    # Member order and number spelling do not make another draft.
    reordered = dict(reversed(list(draft_json(sampling_rate=0.50).items())))
    assert _publish(client, reordered).status_code == 200
    assert len(provisioner.created) == 1
    r = _publish(client, draft_json(description="something else"))
    assert r.status_code == 409
    assert _publish(client, draft_json(version=2, description="something else")).status_code == 201
    assert len(provisioner.created) == 2


def test_device_follows_the_log(client: TestClient, clock: TestClock) -> None:
    key = SIGNER.public_key
    verifier = LogVerifier(key)
    verifier.update(SignedTreeHead.model_validate(client.get("/log/sth").json()))
    for version in range(1, 8):
        clock.advance(60)
        assert _publish(client, draft_json(version=version)).status_code == 201
        if version % 3:
            continue
        sth = SignedTreeHead.model_validate(client.get("/log/sth").json())
        assert verifier.latest is not None
        proof = client.get(
            "/log/consistency", params={"first": verifier.latest.tree_size, "second": sth.tree_size}
        ).json()["proof"]
        verifier.update(sth, _proof(proof))
    listing = client.get("/recipes").json()
    assert [r["version"] for r in listing["recipes"]] == list(range(1, 8))
    latest = SignedTreeHead.model_validate(listing["tree_head"])
    assert latest.tree_size == 7
    proof = client.get("/log/consistency", params={"first": 6, "second": 7}).json()["proof"]
    verifier.update(latest, _proof(proof))
    # Each recipe, fetched against the device's accepted head, verifies.
    for version in range(1, 8):
        body = client.get(
            "/recipes/keyboard.ngram3-age", params={"version": version, "tree_size": 7}
        ).json()
        recipe = verifier.verify_recipe(
            body["signed_recipe"], key, body["leaf_index"], _proof(body["inclusion_proof"])
        )
        assert recipe.version == version
        # The same proof by leaf hash.
        by_hash = client.get(
            "/log/inclusion",
            params={"leaf_hash": b64url_encode(leaf_hash(recipe_bytes(recipe))), "tree_size": 7},
        ).json()
        assert by_hash["leaf_index"] == body["leaf_index"]
        assert by_hash["proof"] == body["inclusion_proof"]
    # Latest version by default; an older tree head on request.
    assert client.get("/recipes/keyboard.ngram3-age").json()["leaf_index"] == 6
    assert (
        client.get("/recipes/keyboard.ngram3-age", params={"version": 2, "tree_size": 2}).json()[
            "tree_head"
        ]["tree_size"]
        == 2
    )
    assert (
        client.get(
            "/recipes/keyboard.ngram3-age", params={"version": 5, "tree_size": 3}
        ).status_code
        == 404
    )
    assert client.get("/recipes/unknown").status_code == 404
    assert client.get("/log/consistency", params={"first": 3, "second": 99}).status_code == 404
    assert client.get("/log/inclusion", params={"leaf_index": 7, "tree_size": 7}).status_code == 404
    assert client.get("/log/sth/4").json()["tree_size"] == 4


def test_device_refuses_a_tampered_or_forked_answer(client: TestClient) -> None:
    for version in (1, 2, 3):
        _publish(client, draft_json(version=version))
    key = SIGNER.public_key
    body = client.get("/recipes/keyboard.ngram3-age", params={"version": 2}).json()
    sth = SignedTreeHead.model_validate(body["tree_head"])
    # A recipe edited in transit.
    tampered = copy.deepcopy(body["signed_recipe"])
    tampered["recipe"]["min_batch_size"] = 10
    with pytest.raises(LogVerificationError):
        LogVerifier(key).verify_recipe(
            tampered, key, body["leaf_index"], _proof(body["inclusion_proof"]), sth
        )
    # A server that signs a second, different history of the same size (split view).
    verifier = LogVerifier(key, sth)
    forked_root = b"\x42" * 32
    fork = sign_tree_head(SIGNER, sth.tree_size, sth.timestamp, forked_root)
    with pytest.raises(ForkError):
        verifier.update(fork, [])
    # A signed but unlogged recipe (same key, never appended) has no valid inclusion proof.
    unlogged = SIGNER.sign_recipe(
        RecipeDraft.model_validate(draft_json(version=99)).complete(
            RecipeTask.model_validate(body["signed_recipe"]["recipe"]["task"]),
            TokenIssuerRef(url="https://issuer.test"),
        )
    ).to_json_value()
    for index in range(3):
        proof = client.get("/log/inclusion", params={"leaf_index": index}).json()["proof"]
        with pytest.raises(LogVerificationError):
            verifier.verify_recipe(unlogged, key, index, _proof(proof))


def test_malformed_parameters_are_400(client: TestClient) -> None:
    assert client.get("/recipes/x", params={"version": "one"}).status_code == 400
    assert client.get("/log/consistency").status_code == 400
    assert client.get("/log/consistency", params={"first": 2, "second": 1}).status_code == 400
    assert client.get("/log/inclusion").status_code == 400
    assert client.get("/log/inclusion", params={"leaf_hash": "+/="}).status_code == 400
    assert client.get("/log/inclusion", params={"leaf_index": 0}).status_code == 404
