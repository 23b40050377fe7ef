"""Schemathesis against the JSON APIs' OpenAPI descriptions, in process (issue #8, item 2).

The descriptions are FastAPI's `app.openapi()`, unchanged: the routes take typed bodies and
query parameters, declare their success models, an RFC 9457 problem document
(`application/problem+json`) as every error (`services.common.routing`) and the bearer scheme
of their credentials. A route whose description is wrong fails here.

Both generation modes run: positive (schema-valid requests, authorized) and negative
(schema-violating ones). Checks: no 5xx, responses conform to the declared schema and
content type. Examples are bounded and derandomized.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
import schemathesis
from fastapi import FastAPI
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from schemathesis import GenerationMode
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_schema_conformance,
)
from schemathesis.core.result import Ok

from shared.dap.messages import MEDIA_AGGREGATION_JOB_INIT_REQ, MEDIA_REPORT
from shared.dap.problems import MEDIA_PROBLEM
from shared.privacypass.directory import ISSUER_DIRECTORY_PATH
from shared.privacypass.messages import MEDIA_TOKEN_REQUEST
from tests.fuzz.apps import (
    Services,
    admin_auth,
    analyst_auth,
    collector_admin_auth,
)

EXAMPLES = 12
CHECKS = [not_a_server_error, response_schema_conformance, content_type_conformance]


@dataclass
class Op:
    method: str
    path: str
    auth: bool = True


@dataclass
class Api:
    name: str
    client: Callable[[Services], Any]
    auth: Callable[[Services], dict[str, str]]
    ops: list[Op]


def _none(_: Services) -> dict[str, str]:
    return {}


APIS = [
    Api(
        "aggregator admin",
        lambda s: s.leader,
        admin_auth,
        [
            Op("put", "/internal/tasks/{task_id}"),
            Op("get", "/internal/tasks/{task_id}"),
            Op("delete", "/internal/tasks/{task_id}"),
            Op("get", "/internal/tasks/{task_id}/stats"),
            Op("post", "/internal/hpke_keys/rotate"),
            Op("get", "/healthz", auth=False),
        ],
    ),
    Api(
        "collector",
        lambda s: s.collector,
        collector_admin_auth,
        [
            Op("put", "/internal/tasks/{task_id}"),
            Op("get", "/internal/tasks/{task_id}"),
            Op("post", "/collections"),
            Op("get", "/collections/{job_id}"),
            Op("get", "/healthz", auth=False),
        ],
    ),
    Api(
        "recipe server",
        lambda s: s.recipe_server,
        analyst_auth,
        [
            Op("post", "/recipes"),
            Op("get", "/recipes", auth=False),
            Op("get", "/recipes/{recipe_id}", auth=False),
            Op("get", "/log/sth", auth=False),
            Op("get", "/log/sth/{tree_size}", auth=False),
            Op("get", "/log/consistency", auth=False),
            Op("get", "/log/inclusion", auth=False),
            Op("get", "/keys", auth=False),
        ],
    ),
    Api(
        "token issuer (JSON endpoints)",
        lambda s: s.issuer,
        _none,
        [
            Op("post", "/attester/enroll", auth=False),
            Op("post", "/attester/challenge", auth=False),
            Op("get", "/healthz", auth=False),
        ],
    ),
]


def _app(client: TestClient) -> FastAPI:
    app = client.app
    assert isinstance(app, FastAPI)
    return app


def _negatable(operation: dict[str, Any]) -> bool:
    """Whether a request can violate the description: a free-text path parameter cannot."""
    parameters = operation.get("parameters", [])
    return "requestBody" in operation or any(p["in"] == "query" for p in parameters)


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
        kwargs.pop("cookies", None)  # none generated (no cookie parameters are declared)
        response = client.request(**kwargs)
        case.validate_response(response, checks=CHECKS)

    run()


@pytest.mark.parametrize("mode", list(GenerationMode), ids=lambda m: m.value)
@pytest.mark.parametrize("api", APIS, ids=lambda a: a.name)
def test_json_api_conforms(svc: Services, api: Api, mode: GenerationMode) -> None:
    client = api.client(svc)
    document = _app(client).openapi()
    schema = schemathesis.openapi.from_dict(document)
    ops = {(op.method.upper(), op.path): op for op in api.ops}
    tested = 0
    for result in schema.get_all_operations():
        assert isinstance(result, Ok), result
        operation = result.ok()
        spec = ops.get((operation.method.upper(), operation.path))
        if spec is None:
            continue  # a binary DAP route or /metrics: not JSON
        if mode == GenerationMode.NEGATIVE and not _negatable(
            document["paths"][spec.path][spec.method]
        ):
            continue
        _fuzz(operation, mode, client, api.auth(svc) if spec.auth else {})
        tested += 1
    negatable = [op for op in api.ops if _negatable(document["paths"][op.path][op.method])]
    assert tested == len(api.ops if mode == GenerationMode.POSITIVE else negatable)


def test_the_descriptions_declare_bodies_errors_and_credentials(svc: Services) -> None:
    """What the handlers read and answer is in the generated descriptions: typed JSON bodies,
    binary DAP bodies by media type, problem documents, and which routes take a bearer token."""
    leader = _app(svc.leader).openapi()
    put_task = leader["paths"]["/internal/tasks/{task_id}"]["put"]
    body = put_task["requestBody"]["content"]["application/json"]["schema"]
    assert body == {"$ref": "#/components/schemas/TaskDefinition"}
    assert put_task["security"] == [{"bearer": []}]
    assert set(put_task["responses"]) == {"200", "201", "default"}
    assert MEDIA_PROBLEM in put_task["responses"]["default"]["content"]
    init = leader["paths"]["/tasks/{task_id}/aggregation_jobs/{job_id}"]["put"]
    assert MEDIA_AGGREGATION_JOB_INIT_REQ in init["requestBody"]["content"]
    # The task's own tokens, in either header, checked by the aggregator.
    assert init["security"] == [{"dap-auth": []}, {"bearer": []}]
    assert "security" not in leader["paths"]["/hpke_config"]["get"]
    assert leader["paths"]["/metrics"]["get"]["security"] == [{"bearer": []}]
    assert "security" not in leader["paths"]["/healthz"]["get"]
    assert leader["components"]["securitySchemes"]["bearer"]["scheme"] == "bearer"
    # Uploads are answered before FastAPI (`upload_route`): no route, no description.
    assert not any(MEDIA_REPORT in str(op) for op in leader["paths"].values())

    recipe = _app(svc.recipe_server).openapi()["paths"]
    assert recipe["/recipes"]["post"]["security"] == [{"bearer": []}]
    assert "security" not in recipe["/recipes"]["get"]
    issuer = _app(svc.issuer).openapi()["paths"]
    assert ISSUER_DIRECTORY_PATH in issuer
    token_request = issuer["/attester/token-request"]["post"]
    assert MEDIA_TOKEN_REQUEST in token_request["requestBody"]["content"]
