"""`services.common.metrics`, `health` and `logs` on their own: the exposition format, the
bearer check of `/metrics`, `/healthz` answers, and the JSON log lines."""

from __future__ import annotations

import json
import logging
import sys

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from services.common.auth import hash_token
from services.common.health import install_healthz
from services.common.logs import JsonFormatter
from services.common.metrics import Counter, Registry, Scrape, install_metrics
from services.common.problems import install_problem_handlers
from tests.exposition import parse, value

TOKEN = "metrics-token-0123456789abcdef"


def _registry(stored: dict[str, int]) -> tuple[Registry, Counter]:
    registry = Registry()
    registry.family("sagg_jobs", "gauge", "Jobs by state.", ("task", "state"))
    registry.family("sagg_ratio", "gauge", "A ratio.")
    counter = registry.counter("sagg_events_total", "Events by kind.", ("kind",))

    def read(scrape: Scrape) -> None:
        for state, n in stored.items():
            scrape.add("sagg_jobs", n, task='a"b\\c\nd', state=state)
        scrape.add("sagg_ratio", 2 / 3)

    registry.on_scrape(read)
    return registry, counter


def test_exposition_text() -> None:
    stored = {"finished": 2}
    registry, counter = _registry(stored)
    counter.inc(kind="x")
    counter.inc(3, kind="x")
    counter.inc(kind="y")
    text = registry.render()
    lines = text.splitlines()
    assert lines[:2] == ["# HELP sagg_jobs Jobs by state.", "# TYPE sagg_jobs gauge"]
    # Label values escape backslash, quote and newline (format 0.0.4).
    assert 'sagg_jobs{task="a\\"b\\\\c\\nd",state="finished"} 2' in lines
    assert "sagg_ratio 0.6666666666666666" in lines
    assert "# TYPE sagg_events_total counter" in lines
    samples = parse(text)
    assert value(samples, "sagg_events_total", kind="x") == 4
    assert value(samples, "sagg_events_total", kind="y") == 1
    # Stored values are read at each scrape.
    stored["finished"] = 5
    assert 'sagg_jobs{task="a\\"b\\\\c\\nd",state="finished"} 5' in registry.render()


def test_registry_refuses_mistakes() -> None:
    registry = Registry()
    counter = registry.counter("sagg_a_total", "A.", ("kind",))
    with pytest.raises(ValueError, match="only goes up"):
        counter.inc(-1, kind="x")
    with pytest.raises(ValueError, match="takes labels"):
        counter.inc(other="x")
    with pytest.raises(ValueError, match="duplicate"):
        registry.family("sagg_a_total", "gauge", "again")
    with pytest.raises(ValueError, match="bad"):
        registry.family("sagg-dash", "gauge", "bad name")
    with pytest.raises(ValueError, match="bad label"):
        registry.family("sagg_b", "gauge", "bad label", ("not-ok",))

    def undeclared(scrape: Scrape) -> None:
        scrape.add("sagg_a_total", 1, kind="x")  # an in-process counter, not a stored family

    registry.on_scrape(undeclared)
    with pytest.raises(KeyError):
        registry.render()


def test_metrics_endpoint_auth() -> None:
    app, off = FastAPI(), FastAPI()
    for each in (app, off):
        install_problem_handlers(each)  # what every service's app installs
    install_metrics(app, _registry({"new": 1})[0], hash_token(TOKEN))
    install_metrics(off, _registry({})[0], None)
    with TestClient(app) as client, TestClient(off) as disabled:
        assert client.get("/metrics").status_code == 401
        wrong = client.get("/metrics", headers={"Authorization": "Bearer " + "x" * 30})
        assert wrong.status_code == 403
        assert wrong.headers["content-type"] == "application/problem+json"
        ok = client.get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
        assert ok.status_code == 200
        assert ok.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
        assert "sagg_jobs" in ok.text
        denied = disabled.get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
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
