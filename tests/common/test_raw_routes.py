"""`services.common.raw_routes`: a route answered before FastAPI's stack keeps what the stack
gave it (caps, problem documents, request metrics, its OpenAPI operation)."""

from __future__ import annotations

import json

from fastapi.responses import JSONResponse, Response
from fastapi.testclient import TestClient
from prometheus_client import CollectorRegistry, generate_latest
from pydantic import BaseModel

from services.common.limits import install_body_limit
from services.common.metrics import install_metrics
from services.common.problems import ServiceError, install_problem_handlers
from services.common.raw_routes import (
    RawRequest,
    RawRoute,
    RawRoutesApp,
    json_operation,
    run_blocking,
)
from shared.dap.problems import MEDIA_PROBLEM


class Ask(BaseModel):
    word: str


class Said(BaseModel):
    word: str
    length: int


def _app() -> tuple[RawRoutesApp, CollectorRegistry]:
    app = RawRoutesApp(title="t", openapi_url=None)
    registry = CollectorRegistry()
    install_body_limit(app, 100)
    install_problem_handlers(app)
    app.raw_metrics = install_metrics(app, registry, None)
    app.raw_body_cap = 100

    async def echo(request: RawRequest) -> Response:
        ask = Ask.model_validate_json(request.body)
        if ask.word == "boom":
            raise RuntimeError("secret request text")
        if ask.word == "refuse":
            raise ServiceError("refused", status=409)
        length = await run_blocking(len, ask.word)
        return JSONResponse({"word": ask.word, "length": length, "ua": request.header("x-t")})

    def too_long() -> Response:
        return ServiceError("too long for this route", status=422).response()

    operation = json_operation("t", "Echo", Ask, {200: (Said, "said")})
    app.add_raw_route(RawRoute("/echo", echo, 20, too_long, operation, models=(Ask, Said)))
    return app, registry


def test_answers_and_refusals() -> None:
    app, registry = _app()
    client = TestClient(app)
    ok = client.post("/echo", json={"word": "hi"}, headers={"X-T": "1"})
    assert (ok.status_code, ok.json()) == (200, {"word": "hi", "length": 2, "ua": "1"})
    refused = client.post("/echo", json={"word": "refuse"})
    assert refused.status_code == 409
    assert refused.headers["content-type"].startswith(MEDIA_PROBLEM)
    crashed = client.post("/echo", json={"word": "boom"})
    assert crashed.status_code == 500
    assert "secret" not in crashed.text
    wrong = client.get("/echo")
    assert (wrong.status_code, wrong.headers["allow"]) == (405, "POST")
    assert wrong.headers["content-type"].startswith(MEDIA_PROBLEM)
    # Past the route's own cap, its own answer; past the app's, 413.
    long = client.post("/echo", content=json.dumps({"word": "x" * 30}))
    assert long.status_code == 422
    huge = client.post("/echo", content=b"x" * 101)
    assert huge.status_code == 413
    # Other paths still go through FastAPI.
    assert client.get("/elsewhere").status_code == 404
    text = generate_latest(registry).decode()
    for status in ("2xx", "4xx", "5xx"):
        line = (
            f'sagg_http_request_duration_seconds_count{{method="POST",route="/echo",'
            f'status="{status}"}}'
        )
        assert line in text, text


def test_the_route_is_in_the_openapi_description() -> None:
    app, _ = _app()
    document = app.openapi()
    operation = document["paths"]["/echo"]["post"]
    body = operation["requestBody"]["content"]["application/json"]["schema"]
    assert body == {"$ref": "#/components/schemas/Ask"}
    said = operation["responses"]["200"]["content"]["application/json"]["schema"]
    assert said == {"$ref": "#/components/schemas/Said"}
    assert MEDIA_PROBLEM in operation["responses"]["default"]["content"]
    assert set(document["components"]["schemas"]) >= {"Ask", "Said"}
