"""Schemathesis against the JSON APIs' OpenAPI descriptions, in process (issue #8, item 2).

The descriptions start from FastAPI's `app.openapi()`. The handlers read the raw request (so
they can answer problem documents in their own words), which leaves FastAPI with no request
body schema and a default 422 response that the services never send. So each description is
completed here from the models the handlers validate with (TaskDefinition, CollectorTask,
the collection query, RecipeDraft, the attester's bodies), its query parameters, and the
responses the services document: the success body where it has a fixed shape, and an RFC 9457
problem document (`application/problem+json`) for every error.

Both generation modes run: positive (schema-valid requests, authorized) and negative
(schema-violating ones). Checks: no 5xx, responses conform to the declared schema and
content type. Examples are bounded and derandomized.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
import schemathesis
from fastapi import FastAPI
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from pydantic import BaseModel, TypeAdapter
from schemathesis import GenerationMode
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_schema_conformance,
)
from schemathesis.core.result import Ok

from services.collector.collect import CollectQuery
from shared.dap.problems import MEDIA_PROBLEM
from shared.dap.task import CollectorTask, TaskDefinition
from shared.privacypass.directory import ISSUER_DIRECTORY_PATH
from shared.recipe.model import RecipeDraft
from tests.fuzz.apps import (
    Services,
    admin_auth,
    analyst_auth,
    collector_admin_auth,
)

EXAMPLES = 12
CHECKS = [not_a_server_error, response_schema_conformance, content_type_conformance]

PROBLEM = {
    "type": "object",
    "required": ["type", "title", "status"],
    "properties": {
        "type": {"type": "string"},
        "title": {"type": "string"},
        "status": {"type": "integer", "minimum": 400, "maximum": 599},
        "detail": {"type": "string"},
        "taskid": {"type": "string"},
    },
}
OBJECT = {"type": "object"}


def _schema(target: Any, components: dict[str, Any]) -> dict[str, Any]:
    """A pydantic model's JSON schema, its $defs hoisted into the OpenAPI components."""
    adapter = target if isinstance(target, TypeAdapter) else TypeAdapter(target)
    doc: dict[str, Any] = adapter.json_schema(ref_template="#/components/schemas/{model}")
    components.update(doc.pop("$defs", {}))
    return doc


@dataclass
class Op:
    method: str
    path: str
    body: Any = None  # a pydantic model / TypeAdapter, or a JSON schema dict
    success: dict[int, dict[str, Any] | None] = field(default_factory=lambda: {200: OBJECT})
    query: dict[str, dict[str, Any]] = field(default_factory=dict)
    auth: bool = True
    #: Overrides of FastAPI's path parameter schemas.
    path_params: dict[str, dict[str, Any]] = field(default_factory=dict)


@dataclass
class Api:
    name: str
    client: Callable[[Services], Any]
    auth: Callable[[Services], dict[str, str]]
    ops: list[Op]


class _EnrollBody(BaseModel):
    certificate: str


class _ChallengeBody(BaseModel):
    device_id: str


class _CollectRequest(BaseModel):
    task_id: str
    query: CollectQuery


def _none(_: Services) -> dict[str, str]:
    return {}


TASK_ID = {"type": "object", "required": ["task_id"], "properties": {"task_id": {"type": "string"}}}
INT = {"type": "integer", "minimum": 0}
TEXT = {"type": "string"}

APIS = [
    Api(
        "aggregator admin",
        lambda s: s.leader,
        admin_auth,
        [
            Op("put", "/internal/tasks/{task_id}", TaskDefinition, {200: TASK_ID, 201: TASK_ID}),
            Op("get", "/internal/tasks/{task_id}"),
            Op("delete", "/internal/tasks/{task_id}", success={204: None}),
            Op("get", "/internal/tasks/{task_id}/stats"),
            Op(
                "post",
                "/internal/hpke_keys/rotate",
                success={200: {"type": "object", "required": ["config_id"]}},
            ),
            Op("get", "/healthz", auth=False),
        ],
    ),
    Api(
        "collector",
        lambda s: s.collector,
        collector_admin_auth,
        [
            Op("put", "/internal/tasks/{task_id}", CollectorTask, {200: OBJECT, 201: OBJECT}),
            Op("get", "/internal/tasks/{task_id}"),
            Op(
                "post",
                "/collections",
                _CollectRequest,
                {201: {"type": "object", "required": ["collection_job_id"]}},
            ),
            Op("get", "/collections/{job_id}"),
            Op("get", "/healthz", auth=False),
        ],
    ),
    Api(
        "recipe server",
        lambda s: s.recipe_server,
        analyst_auth,
        [
            Op("post", "/recipes", RecipeDraft, {200: OBJECT, 201: OBJECT}),
            Op("get", "/recipes", auth=False),
            Op(
                "get",
                "/recipes/{recipe_id}",
                query={"version": INT, "tree_size": INT},
                auth=False,
            ),
            Op("get", "/log/sth", auth=False),
            Op("get", "/log/sth/{tree_size}", auth=False, path_params={"tree_size": INT}),
            Op("get", "/log/consistency", query={"first": INT, "second": INT}, auth=False),
            Op(
                "get",
                "/log/inclusion",
                query={"leaf_index": INT, "tree_size": INT, "leaf_hash": TEXT},
                auth=False,
            ),
            Op("get", "/keys", auth=False),
        ],
    ),
    Api(
        "token issuer (JSON endpoints)",
        lambda s: s.issuer,
        _none,
        [
            Op(
                "post",
                "/attester/enroll",
                _EnrollBody,
                {200: {"type": "object", "required": ["device_id"]}, 201: OBJECT},
                auth=False,
            ),
            Op(
                "post",
                "/attester/challenge",
                _ChallengeBody,
                {200: {"type": "object", "required": ["nonce", "expires"]}},
                auth=False,
            ),
            Op("get", "/healthz", auth=False),
        ],
    ),
]


def describe(api: Api, generated: dict[str, Any]) -> dict[str, Any]:
    """FastAPI's description of `api`'s JSON routes, completed with bodies and responses."""
    doc: dict[str, Any] = {
        "openapi": generated["openapi"],
        "info": generated["info"],
        "paths": {},
        "components": {"schemas": {"Problem": PROBLEM}},
    }
    components = doc["components"]["schemas"]
    for op in api.ops:
        base = generated["paths"][op.path][op.method]  # FastAPI knows every route
        operation = copy.deepcopy(base)
        params = [p for p in operation.get("parameters", []) if p["in"] == "path"]
        for p in params:
            p["schema"] = op.path_params.get(p["name"], p["schema"])
        params += [
            {"name": name, "in": "query", "required": False, "schema": schema}
            for name, schema in op.query.items()
        ]
        operation["parameters"] = params
        if op.body is not None:
            schema = op.body if isinstance(op.body, dict) else _schema(op.body, components)
            operation["requestBody"] = {
                "required": True,
                "content": {"application/json": {"schema": schema}},
            }
        responses: dict[str, Any] = {
            "default": {
                "description": "an error",
                "content": {MEDIA_PROBLEM: {"schema": {"$ref": "#/components/schemas/Problem"}}},
            }
        }
        for status, success in op.success.items():
            entry: dict[str, Any] = {"description": "success"}
            if success is not None:
                entry["content"] = {"application/json": {"schema": success}}
            responses[str(status)] = entry
        operation["responses"] = responses
        doc["paths"].setdefault(op.path, {})[op.method] = operation
    return doc


def _app(client: TestClient) -> FastAPI:
    app = client.app
    assert isinstance(app, FastAPI)
    return app


def _fuzz(operation: Any, mode: GenerationMode, client: Any, auth: dict[str, str]) -> None:
    @settings(
        max_examples=EXAMPLES,
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(case=operation.as_strategy(generation_mode=mode))
    def run(case: Any) -> None:
        kwargs = case.as_transport_kwargs(base_url="http://testserver")
        kwargs["headers"] = {**kwargs.get("headers", {}), **auth}
        if not kwargs.pop("cookies", None):
            pass  # none generated (no cookie parameters are declared)
        response = client.request(**kwargs)
        case.validate_response(response, checks=CHECKS)

    run()


@pytest.mark.parametrize("mode", list(GenerationMode), ids=lambda m: m.value)
@pytest.mark.parametrize("api", APIS, ids=lambda a: a.name)
def test_json_api_conforms(svc: Services, api: Api, mode: GenerationMode) -> None:
    client = api.client(svc)
    schema = schemathesis.openapi.from_dict(describe(api, _app(client).openapi()))
    ops = {(op.method.upper(), op.path): op for op in api.ops}
    tested = 0
    for result in schema.get_all_operations():
        assert isinstance(result, Ok), result
        operation = result.ok()
        spec = ops[(operation.method.upper(), operation.path)]
        if mode == GenerationMode.NEGATIVE and spec.body is None and not spec.query:
            continue  # a free-text path parameter has no schema-violating value
        auth = api.auth(svc) if spec.auth else {}

        _fuzz(operation, mode, client, auth)
        tested += 1
    negatable = [op for op in api.ops if op.body is not None or op.query]
    assert tested == len(api.ops if mode == GenerationMode.POSITIVE else negatable)


def test_the_descriptions_cover_every_json_route(svc: Services) -> None:
    """Each API's description names routes FastAPI serves (no made-up paths), and the
    routes left out are the binary DAP ones and the well-known directory."""
    for api in APIS:
        generated = _app(api.client(svc)).openapi()
        for op in api.ops:
            assert op.method in generated["paths"][op.path]
    assert ISSUER_DIRECTORY_PATH in _app(svc.issuer).openapi()["paths"]
