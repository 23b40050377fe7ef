"""Publishing against real in-process leader, helper and collector apps (no fakes)."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from services.aggregator.app import create_app as aggregator_app
from services.aggregator.service import Aggregator, Task
from services.aggregator.settings import AggregatorSettings
from services.collector.app import create_app as collector_app
from services.collector.settings import CollectorSettings
from services.common.provisioning import TaskParams, create_task
from services.recipe_server.app import create_app
from shared.b64url import b64url_decode, b64url_encode
from shared.dap.extensions import recipe_digest
from shared.dap.ids import TaskId
from shared.dap.messages import HpkeConfigList
from shared.dap.task import AggregatorNoise, RateValidation, TaskDefinition, TokenPolicy
from shared.recipe.log import LogVerifier, SignedTreeHead
from shared.recipe.model import Recipe
from shared.recipe.signing import recipe_bytes
from shared.vdaf.prio3 import VERIFY_KEY_SIZE
from tests.recipe.helpers import draft_json, hpke_list
from tests.recipe_server.conftest import (
    ISSUER,
    ISSUER_KEY_ID,
    PROVISIONER_TOKENS,
    Router,
    auth,
    make_settings,
)

ADMIN = "admin-token-0123456789abcdef"
#: A second issuer the operator allows, with its own name, window and pinned key.
OTHER_ISSUER = "https://tokens.example:8443"
OTHER_KEY_ID = b64url_encode(bytes(range(32)))


@pytest.fixture
def parties(tmp_path: Path) -> Iterator[dict[str, TestClient]]:
    with ExitStack() as stack:
        apps: dict[str, TestClient] = {}
        for name in ("leader", "helper"):
            settings = AggregatorSettings(
                database_url=f"sqlite:///{tmp_path / name}.sqlite3",
                admin_token=ADMIN,  # type: ignore[arg-type]
                provisioner_token=PROVISIONER_TOKENS[name],  # type: ignore[arg-type]
                run_drivers=False,
                token_issuers=[ISSUER, OTHER_ISSUER],
            )
            apps[f"{name}.test"] = stack.enter_context(TestClient(aggregator_app(settings)))
        collector = CollectorSettings(
            database_url=f"sqlite:///{tmp_path / 'collector'}.sqlite3",
            admin_token=ADMIN,  # type: ignore[arg-type]
            provisioner_token=PROVISIONER_TOKENS["collector"],  # type: ignore[arg-type]
        )
        apps["collector.test"] = stack.enter_context(
            TestClient(collector_app(collector, run_poller=False))
        )
        yield apps


def _server(tmp_path: Path, parties: dict[str, TestClient], **overrides: Any) -> TestClient:
    http = httpx.Client(transport=Router(parties), timeout=10)
    settings = make_settings(tmp_path, **overrides)
    return TestClient(create_app(settings, http=http))


def test_publish_provisions_the_task_everywhere(
    tmp_path: Path, parties: dict[str, TestClient]
) -> None:
    with _server(tmp_path, parties) as server:
        r = server.post("/recipes", json=draft_json(), headers=auth())
        assert r.status_code == 201, r.text
        body = r.json()
        key = b64url_decode(server.get("/keys").json()["keys"][0]["public_key"], "k")
    recipe = body["signed_recipe"]["recipe"]
    task_id = recipe["task"]["task_id"]
    admin = {"Authorization": f"Bearer {ADMIN}"}
    for host, role in (("leader.test", "leader"), ("helper.test", "helper")):
        task = parties[host].get(f"/internal/tasks/{task_id}", headers=admin).json()
        assert task["role"] == role
        assert task["min_batch_size"] == recipe["min_batch_size"]
        assert task["vdaf"]["type"] == recipe["task"]["vdaf"]["type"] == "Prio3MultiHotHistogram"
        assert task["vdaf"]["length"] == recipe["task"]["vdaf"]["length"]
        # The recipe carries the aggregator's HPKE configs as the aggregator serves them.
        served = parties[host].get("/hpke_config", params={"task_id": task_id}).content
        assert b64url_decode(recipe["task"][f"{role}_hpke_configs"], "c") == served
        HpkeConfigList.decode(served)
    verifier = LogVerifier(key)
    verifier.verify_recipe(
        body["signed_recipe"],
        key,
        body["leaf_index"],
        [b64url_decode(p, "p") for p in body["inclusion_proof"]],
        SignedTreeHead.model_validate(body["tree_head"]),
    )


def test_a_task_bound_to_another_recipe_is_refused(
    tmp_path: Path, parties: dict[str, TestClient]
) -> None:
    with _server(tmp_path, parties) as server:
        first = server.post("/recipes", json=draft_json(), headers=auth()).json()
        bound = first["signed_recipe"]["recipe"]
        # A recipe's task is bound to that recipe's digest: another recipe cannot use it
        # (both aggregators would refuse its reports).
        doc = draft_json(version=2)
        doc["task"] = {"task_id": bound["task"]["task_id"]}
        r = server.post("/recipes", json=doc, headers=auth())
        assert r.status_code == 422, r.text
        assert "bound to another recipe" in r.json()["errors"][0]["message"]
        # Another B than the task's is refused by the check.
        doc = draft_json(version=3, min_batch_size=bound["min_batch_size"] + 1)
        doc["task"] = {"task_id": bound["task"]["task_id"]}
        r = server.post("/recipes", json=doc, headers=auth())
        assert r.status_code == 422 and "min_batch_size" in r.json()["errors"][0]["message"]
        assert len(server.get("/recipes").json()["recipes"]) == 1


def _put_task(parties: dict[str, TestClient], recipe: Recipe, **changes: Any) -> str:
    """A task made directly through both aggregators' admin APIs (as an operator with the
    admin token, or `sagg task create`, could): the recipe's parameters with `changes`."""
    task_id = TaskId.random().to_b64url()
    common: dict[str, Any] = {
        "task_id": task_id,
        "leader_endpoint": "https://leader.test",
        "helper_endpoint": "https://helper.test",
        "query_type": recipe.task.query_type,
        "vdaf": recipe.task.vdaf,
        "vdaf_verify_key": b64url_encode(bytes(VERIFY_KEY_SIZE)),
        "min_batch_size": recipe.min_batch_size,
        "time_precision": recipe.task.time_precision,
        "collector_hpke_config": b64url_encode(
            HpkeConfigList.decode(b64url_decode(hpke_list(3), "c")).configs[0].encode()
        ),
        "aggregator_auth_token": "aggregator-token-0123456789",
        "recipe_digest": b64url_encode(bytes(32)),
        "tokens": recipe.token_issuer.token_policy(),
        **changes,
    }
    admin = {"Authorization": f"Bearer {ADMIN}"}
    for host, extra in (
        ("leader.test", {"role": "leader", "collector_auth_token": "collector-token-012345"}),
        ("helper.test", {"role": "helper"}),
    ):
        body = TaskDefinition.model_validate({**common, **extra}).model_dump_json()
        r = parties[host].put(f"/internal/tasks/{task_id}", content=body, headers=admin)
        assert r.status_code == 201, r.text
    return task_id


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        # Reports without tokens: a Sybil fills the batch (001 §4.6).
        ({"tokens": None}, "does not require tokens"),
        # Reports of any recipe, or any B, count in the batch (001 §4.8).
        ({"recipe_digest": None}, "does not bind reports to a recipe"),
        # The recipe's accounting assumes its batches, released once.
        ({"query_type": "fixed_size"}, "differs from the recipe in query_type"),
        ({"max_batch_query_count": 2}, "differs from the recipe in max_batch_query_count"),
        # The leader would send the helper's shares to an aggregator the recipe does not name.
        ({"helper_endpoint": "https://evil-helper.test"}, "helper_endpoint"),
    ],
)
def test_an_analyst_cannot_bind_a_recipe_to_a_weaker_task(
    tmp_path: Path, parties: dict[str, TestClient], changes: dict[str, Any], reason: str
) -> None:
    """Issue 12 item 4: a recipe promises devices token enforcement, the recipe binding and
    its query; an existing task lacking any of them is refused (422, with the reason), and
    nothing is logged."""
    with _server(tmp_path, parties) as server:
        published = server.post("/recipes", json=draft_json(), headers=auth())
        recipe = Recipe.model_validate(published.json()["signed_recipe"]["recipe"])
        task_id = _put_task(parties, recipe, **changes)
        doc = draft_json(version=2)
        doc["task"] = {"task_id": task_id}
        r = server.post("/recipes", json=doc, headers=auth())
        assert r.status_code == 422, r.text
        [error] = r.json()["errors"]
        assert error["field"] == "task.task_id" and reason in error["message"], error
        assert [e["version"] for e in server.get("/recipes").json()["recipes"]] == [1]


def test_task_is_bound_to_the_recipe_and_its_token_policy(
    tmp_path: Path, parties: dict[str, TestClient]
) -> None:
    other = {
        "url": OTHER_ISSUER,
        "issuer_name": "tokens.example",
        "window_seconds": 3600,
        "key_ids": [OTHER_KEY_ID],
    }
    with _server(tmp_path, parties, token_issuers=[other]) as server:
        # The server's default issuer (settings: https://issuer.test) with defaults filled in.
        default = server.post("/recipes", json=draft_json(), headers=auth()).json()
        # A draft naming another allowed issuer by its URL gets the operator's settings.
        doc = draft_json(recipe_id="named.issuer")
        doc["token_issuer"] = {"url": OTHER_ISSUER}
        named = server.post("/recipes", json=doc, headers=auth())
        assert named.status_code == 201, named.text
    admin = {"Authorization": f"Bearer {ADMIN}"}
    for body, policy in (
        (
            default,
            {
                "issuer_url": ISSUER,
                "issuer_name": "issuer.test",
                "window_seconds": 86_400,
                "key_ids": [ISSUER_KEY_ID],
            },
        ),
        (
            named.json(),
            {
                "issuer_url": OTHER_ISSUER,
                "issuer_name": "tokens.example",
                "window_seconds": 3600,
                "key_ids": [OTHER_KEY_ID],
            },
        ),
    ):
        signed = body["signed_recipe"]
        recipe = Recipe.model_validate(signed["recipe"])
        # The published recipe spells the policy out, pinned keys included, so devices need
        # not guess it.
        assert recipe.token_issuer.issuer_name == policy["issuer_name"]
        assert recipe.token_issuer.window_seconds == policy["window_seconds"]
        assert list(recipe.token_issuer.key_ids) == policy["key_ids"]
        digest = b64url_encode(recipe_digest(recipe_bytes(recipe)))
        task_id = recipe.task.task_id
        for host, role in (("leader.test", "leader"), ("helper.test", "helper")):
            # What the aggregator enforces, through its admin API ...
            task = parties[host].get(f"/internal/tasks/{task_id}", headers=admin).json()
            assert task["role"] == role
            assert task["recipe_digest"] == digest
            assert task["tokens"] == policy
            # ... and the task its request paths check reports against.
            held = _task(parties[host], task_id)
            assert held.recipe_digest == recipe_digest(recipe_bytes(recipe))
            assert held.tokens == TokenPolicy.model_validate(policy)
            assert held.min_batch_size == recipe.min_batch_size


def _task(client: TestClient, task_id: str) -> Task:
    """The leader's or helper's task as its upload and aggregation paths see it."""
    aggregator: Aggregator = client.app.state.aggregator  # type: ignore[attr-defined]
    return aggregator.task(task_id)


def test_wrong_provisioning_token_is_a_provisioning_failure(
    tmp_path: Path, parties: dict[str, TestClient]
) -> None:
    wrong = "wrong-provisioner-token-0123456789"
    with _server(tmp_path, parties, collector_provisioner_token=wrong) as server:
        r = server.post("/recipes", json=draft_json(), headers=auth())
        assert r.status_code == 502
        assert "collector refused" in r.json()["title"]
        assert server.get("/recipes").json()["recipes"] == []


def test_rate_validation_is_computed_published_and_provisioned(
    tmp_path: Path, parties: dict[str, TestClient]
) -> None:
    """001 §4.8: R = ceil(q N tp / W) from the draft's population estimate goes into the signed
    recipe and into both aggregators' tasks; an existing task must enforce the same."""
    estimate = {"expected_population": 100_000, "collection_window": 7 * 86_400}
    doc = draft_json(task={"time_precision": 3600, "rate_validation": estimate})
    with _server(tmp_path, parties) as server:
        r = server.post("/recipes", json=doc, headers=auth())
        assert r.status_code == 201, r.text
        recipe = Recipe.model_validate(r.json()["signed_recipe"]["recipe"])
        published = recipe.task.rate_validation
        # q = 0.5: 50000 reports over 168 hours, 297.6 per hour.
        assert published is not None and published.expected_reports_per_bucket == 298
        assert (published.expected_population, published.max_multiple) == (100_000, 2.0)
        admin = {"Authorization": f"Bearer {ADMIN}"}
        for host in ("leader.test", "helper.test"):
            task = parties[host].get(f"/internal/tasks/{recipe.task.task_id}", headers=admin)
            assert task.json()["rate_validation"] == {
                "expected_reports_per_bucket": 298,
                "max_multiple": 2.0,
            }
            held = _task(parties[host], recipe.task.task_id)
            assert held.rate_limit is not None
            assert held.rate_limit.max_reports_per_bucket == 596
            assert held.rate_limit.time_precision == 3600

        # An operator's task without rate validation does not serve a draft that asks for it,
        # nor one whose estimate gives another R; one with the same R still lacks tokens.
        params = TaskParams(
            vdaf=recipe.task.vdaf,
            min_batch_size=recipe.min_batch_size,
            time_precision=3600,
            leader="https://leader.test",
            helper="https://helper.test",
            collector="https://collector.test",
        )
        with httpx.Client(transport=Router(parties)) as http:
            plain = create_task(params, ADMIN, http=http)["task_id"]
            rate = RateValidation(expected_reports_per_bucket=298)
            limited = create_task(
                params.model_copy(update={"rate_validation": rate}), ADMIN, http=http
            )
        assert limited["rate_validation"] == {"expected_reports_per_bucket": 298, "max_multiple": 2}
        for version, task_id, population, reason in (
            (2, plain, 100_000, "rate_validation"),
            (3, limited["task_id"], 200_000, "rate_validation"),
            (4, limited["task_id"], 100_000, "does not require tokens"),
        ):
            bind = draft_json(
                version=version,
                task={
                    "task_id": task_id,
                    "rate_validation": {**estimate, "expected_population": population},
                },
            )
            r = server.post("/recipes", json=bind, headers=auth())
            assert r.status_code == 422, r.text
            assert reason in r.json()["errors"][0]["message"]


def test_aggregator_noise_is_provisioned_and_accounted(
    tmp_path: Path, parties: dict[str, TestClient]
) -> None:
    """004 §5 per task: a draft whose B alone is far too small for its claim publishes when its
    aggregator noise meets the claim; both aggregators and the collector get that noise; weak
    noise is refused with the accounting's numbers; an existing task must have the same noise."""
    admin = {"Authorization": f"Bearer {ADMIN}"}
    strong = {"mechanism": "discrete_gaussian", "sigma": "400"}
    with _server(tmp_path, parties) as server:
        plain = server.post("/recipes", json=draft_json(min_batch_size=100), headers=auth())
        assert plain.status_code == 422 and "min_batch_size" in plain.text
        weak = draft_json(min_batch_size=100, aggregator_noise={**strong, "sigma": "2"})
        refused = server.post("/recipes", json=weak, headers=auth())
        assert refused.status_code == 422, refused.text
        assert "aggregator noise (discrete Gaussian sigma=2" in refused.text
        doc = draft_json(min_batch_size=100, aggregator_noise=strong)
        r = server.post("/recipes", json=doc, headers=auth())
        assert r.status_code == 201, r.text
        recipe = Recipe.model_validate(r.json()["signed_recipe"]["recipe"])
        assert recipe.aggregator_noise == AggregatorNoise.model_validate(strong)
        task_id = recipe.task.task_id
        for host in ("leader.test", "helper.test", "collector.test"):
            task = parties[host].get(f"/internal/tasks/{task_id}", headers=admin).json()
            assert AggregatorNoise.model_validate(task["aggregator_noise"]) == (
                recipe.aggregator_noise
            ), host
        # An existing task without that noise cannot serve a recipe that promises it.
        params = TaskParams(
            vdaf=recipe.task.vdaf,
            min_batch_size=100,
            time_precision=recipe.task.time_precision,
            leader="https://leader.test",
            helper="https://helper.test",
            collector="https://collector.test",
        )
        with httpx.Client(transport=Router(parties)) as http:
            quiet = create_task(params, ADMIN, http=http)["task_id"]
        other = draft_json(version=2, min_batch_size=100, aggregator_noise=strong)
        other["task"] = {"task_id": quiet}
        r = server.post("/recipes", json=other, headers=auth())
        assert r.status_code == 422 and "aggregator_noise" in r.json()["errors"][0]["message"]


def test_a_dap_19_recipe_publishes_the_configuration_every_party_holds(
    tmp_path: Path, parties: dict[str, TestClient]
) -> None:
    doc = draft_json()
    doc["task"] = {**doc.get("task", {}), "dap": "dap-19"}
    with _server(tmp_path, parties) as server:
        r = server.post("/recipes", json=doc, headers=auth())
        assert r.status_code == 201, r.text
        task = r.json()["signed_recipe"]["recipe"]["task"]
        # A DAP-19 task cannot be bound by a draft of the DAP-09 kind, nor the other way.
        other = draft_json(version=2)
        other["task"] = {"task_id": task["task_id"]}
        refused = server.post("/recipes", json=other, headers=auth())
        assert refused.status_code == 422, refused.text
    raw = b64url_decode(task["task_configuration"], "c")
    assert task["dap"] == "dap-19" and task["vdaf"]["type"] == "Prio3MultihotCountVec"
    label = hashlib.sha256(b"dap-taskprov task id").digest()
    assert task["task_id"] == b64url_encode(hashlib.sha256(label + raw).digest())
    admin = {"Authorization": f"Bearer {ADMIN}"}
    for host in ("leader.test", "helper.test", "collector.test"):
        held = parties[host].get(f"/internal/tasks/{task['task_id']}", headers=admin).json()
        assert held["dap"] == "dap-19" and held["task_configuration"] == task["task_configuration"]
