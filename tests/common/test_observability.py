"""`services.common.metrics`, `health` and `logs` on their own: the exposition format, the
request latency histogram, the bearer check of `/metrics`, `/healthz` answers, and the JSON
log lines."""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Iterator

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from prometheus_client import CollectorRegistry, Counter
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from services.common.auth import hash_token
from services.common.db import TransientDbError
from services.common.health import install_healthz
from services.common.logs import JsonFormatter
from services.common.metrics import install_metrics
from services.common.problems import install_problem_handlers
from tests.exposition import parse, value

TOKEN = "metrics-token-0123456789abcdef"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


class _Stored(Collector):
    """A store read at scrape time."""

    def __init__(self, stored: dict[str, int]) -> None:
        self.stored = stored

    def collect(self) -> Iterator[Metric]:
        jobs = GaugeMetricFamily("sagg_jobs", "Jobs by state.", labels=["task", "state"])
        for state, n in self.stored.items():
            jobs.add_metric(['a"b\\c\nd', state], n)
        yield jobs
        yield GaugeMetricFamily("sagg_ratio", "A ratio.", 2 / 3)


def _app(stored: dict[str, int], token: str | None = TOKEN) -> tuple[FastAPI, Counter]:
    registry = CollectorRegistry()
    registry.register(_Stored(stored))
    counter = Counter("sagg_events_total", "Events by kind.", ("kind",), registry=registry)
    app = FastAPI()
    install_problem_handlers(app)  # what every service's app installs
    install_metrics(app, registry, hash_token(token) if token else None)

    @app.get("/items/{item_id}")
    async def item(item_id: str) -> dict[str, str]:
        return {"item": item_id}

    return app, counter


def test_exposition_text() -> None:
    stored = {"finished": 2}
    app, counter = _app(stored)
    counter.labels(kind="x").inc()
    counter.labels(kind="x").inc(3)
    counter.labels(kind="y").inc()
    with TestClient(app) as client:
        text = client.get("/metrics", headers=AUTH).text
        lines = text.splitlines()
        assert "# HELP sagg_jobs Jobs by state." in lines and "# TYPE sagg_jobs gauge" in lines
        # Label values escape backslash, quote and newline (format 0.0.4).
        assert 'sagg_jobs{state="finished",task="a\\"b\\\\c\\nd"} 2.0' in lines
        assert "sagg_ratio 0.6666666666666666" in lines
        assert "# TYPE sagg_events_total counter" in lines
        samples = parse(text)
        assert value(samples, "sagg_events_total", kind="x") == 4
        assert value(samples, "sagg_events_total", kind="y") == 1
        # Process-wide families come from the default registry, in the same answer.
        assert value(samples, "process_cpu_seconds_total") > 0
        # Stored values are read at each scrape.
        stored["finished"] = 5
        again = client.get("/metrics", headers=AUTH).text.splitlines()
        assert 'sagg_jobs{state="finished",task="a\\"b\\\\c\\nd"} 5.0' in again


def test_request_latency_by_route_template() -> None:
    app, _ = _app({})
    with TestClient(app) as client:
        for item in ("a", "b", "c"):
            assert client.get(f"/items/{item}").status_code == 200
        assert client.get("/nowhere/1").status_code == 404
        assert client.get("/metrics").status_code == 401
        samples = parse(client.get("/metrics", headers=AUTH).text)
    name = "sagg_http_request_duration_seconds_count"
    # The route's template, never the raw path: ids would make the label set unbounded.
    assert value(samples, name, method="GET", route="/items/{item_id}", status="2xx") == 3
    assert value(samples, name, method="GET", route="unmatched", status="4xx") == 1
    assert value(samples, name, method="GET", route="/metrics", status="4xx") == 1
    buckets = {
        dict(labels)["le"]: n
        for (sample, labels), n in samples.items()
        if sample == "sagg_http_request_duration_seconds_bucket"
        and dict(labels)["route"] == "/items/{item_id}"
    }
    assert buckets["+Inf"] == 3 and all(n <= 3 for n in buckets.values())
    assert not any("/items/a" in dict(labels).get("route", "") for _, labels in samples)


def test_metrics_endpoint_auth() -> None:
    app, _ = _app({"new": 1})
    off, _ = _app({}, token=None)
    with TestClient(app) as client, TestClient(off) as disabled:
        assert client.get("/metrics").status_code == 401
        wrong = client.get("/metrics", headers={"Authorization": "Bearer " + "x" * 30})
        assert wrong.status_code == 403
        assert wrong.headers["content-type"] == "application/problem+json"
        ok = client.get("/metrics", headers=AUTH)
        assert ok.status_code == 200
        assert ok.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
        assert "sagg_jobs" in ok.text
        denied = disabled.get("/metrics", headers=AUTH)
        assert denied.status_code == 403


def test_healthz_answers() -> None:
    state = {"ready": True, "fail": False}

    def probe() -> bool:
        if state["fail"]:
            raise OSError("connection refused to postgresql://user:password@db/x")
        return state["ready"]

    app = FastAPI()
    install_healthz(app, probe, {"role": "joint"})
    with TestClient(app) as client:
        assert client.get("/healthz").json() == {"status": "ok", "role": "joint"}
        state["ready"] = False
        starting = client.get("/healthz")
        assert (starting.status_code, starting.json()["status"]) == (503, "unavailable")
        state["fail"] = True
        broken = client.get("/healthz")
        assert broken.status_code == 503 and "password" not in broken.text


def test_json_log_lines() -> None:
    formatter = JsonFormatter()
    record = logging.LogRecord("sagg.x", logging.INFO, __file__, 1, "job %s: %d", ("j1", 3), None)
    record.task = "t1"  # as `extra={"task": ...}` sets it
    record.color_message = "\x1b[1mjob\x1b[0m"
    doc = json.loads(formatter.format(record))
    assert doc["msg"] == "job j1: 3" and doc["level"] == "info" and doc["logger"] == "sagg.x"
    assert doc["task"] == "t1" and "color_message" not in doc
    assert doc["ts"].endswith("+00:00")
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        failed = logging.LogRecord(
            "sagg.x", logging.ERROR, __file__, 1, "failed", (), sys.exc_info()
        )
    line = formatter.format(failed)
    assert "\n" not in line  # one line per record, the traceback escaped inside it
    exc = json.loads(line)["exc"]
    # The type and the frames, not the message: it may quote request data or a secret.
    assert "RuntimeError: (message withheld)" in exc and "boom" not in exc
    assert f'File "{__file__}", line' in exc and "test_json_log_lines" in exc


def test_an_escaped_internal_error_is_a_bare_500(caplog: pytest.LogCaptureFixture) -> None:
    """An internal signal that nothing caught answers the generic 500 problem, and neither the
    response nor the log carries its message (it may quote request or database data)."""
    app = FastAPI()
    install_problem_handlers(app)
    secret = "row 17 of reports: 5f3c-secret-share"

    @app.get("/tasks/{task_id}/boom")
    async def boom(task_id: str) -> None:
        raise TransientDbError(secret)

    with caplog.at_level(logging.INFO), TestClient(app) as client:
        response = client.get("/tasks/AAAA/boom")
    assert response.status_code == 500
    assert response.headers["content-type"] == "application/problem+json"
    assert response.json() == {
        "type": "about:blank",
        "title": "Internal Server Error",
        "status": 500,
        "taskid": "AAAA",
    }
    assert "TransientDbError" in caplog.text
    assert secret not in caplog.text and secret not in response.text
