"""The interop API's value codecs and the command line, without processes (interop draft §4)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from deploy.cli import main
from deploy.interop import cli as interop_cli
from deploy.interop.aggregator import AddTask
from deploy.interop.client import build_client_app
from deploy.interop.collector import InteropQuery
from deploy.interop.common import (
    InteropError,
    InteropVdaf,
    configure_logging,
    format_result,
    parse_measurement,
)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ({"type": "Prio3Count"}, {"type": "Prio3Count"}),
        ({"type": "Prio3Sum", "bits": "8"}, {"type": "Prio3Sum", "bits": 8}),
        (
            {"type": "Prio3SumVec", "bits": "8", "length": "4", "chunk_length": "2"},
            {"type": "Prio3SumVec", "bits": 8, "length": 4, "chunk_length": 2},
        ),
        (
            {"type": "Prio3Histogram", "length": "4", "chunk_length": "2"},
            {"type": "Prio3Histogram", "length": 4, "chunk_length": 2},
        ),
    ],
)
def test_vdaf_objects_map_to_specs(raw: dict[str, str], expected: dict[str, object]) -> None:
    spec = InteropVdaf.model_validate(raw).spec()
    assert spec.model_dump(exclude_none=True) == expected


@pytest.mark.parametrize(
    "raw",
    [
        {"type": "Poplar1", "bits": "8"},
        {"type": "Prio3Sum"},
        {"type": "Prio3Sum", "bits": "-1"},
        {"type": "Prio3Sum", "bits": "0x8"},
        {"type": "Prio3Histogram", "length": "4", "chunk_length": "0"},
    ],
)
def test_bad_vdaf_objects_are_refused(raw: dict[str, str]) -> None:
    with pytest.raises(InteropError):
        InteropVdaf.model_validate(raw).spec()


def test_measurements_and_results_are_decimal_strings() -> None:
    count = InteropVdaf(type="Prio3Count").spec()
    sumvec = InteropVdaf(type="Prio3SumVec", bits="8", length="2", chunk_length="1").spec()
    assert parse_measurement(count, "1") == 1
    assert parse_measurement(sumvec, ["3", "255"]) == [3, 255]
    for bad in ("1.0", "", " 1", True):
        with pytest.raises(InteropError):
            parse_measurement(count, bad)
    with pytest.raises(InteropError):
        parse_measurement(sumvec, "3")
    assert format_result(12) == "12"
    assert format_result([1, 0, 2**70]) == ["1", "0", str(2**70)]


def test_queries_map_to_collector_api() -> None:
    ti = InteropQuery(type=1, batch_interval_start=3600, batch_interval_duration=7200)
    assert ti.api_query() == {"type": "time_interval", "start": 3600, "duration": 7200}
    assert InteropQuery(type=2, subtype=1).api_query() == {"type": "current_batch"}
    assert InteropQuery(type=2, subtype=0, batch_id="AAAA").api_query() == {
        "type": "fixed_size",
        "batch_id": "AAAA",
    }
    for bad in (InteropQuery(type=1), InteropQuery(type=2), InteropQuery(type=2, subtype=0)):
        with pytest.raises(InteropError):
            bad.api_query()


def test_helper_ignores_collector_token_and_time_interval_drops_max_batch_size() -> None:
    body = {
        "task_id": "A" * 43,
        "leader": "http://l/dap/",
        "helper": "http://h/dap/",
        "vdaf": {"type": "Prio3Count"},
        "leader_authentication_token": "t" * 22,
        "collector_authentication_token": "c" * 22,
        "role": "helper",
        "vdaf_verify_key": "A" * 22,
        "max_batch_query_count": 1,
        "query_type": 1,
        "min_batch_size": 10,
        "max_batch_size": 20,
        "time_precision": 3600,
        # X25519 / HKDF-SHA256 / AES-128-GCM, config id 1, a 32-byte key.
        "collector_hpke_config": "AQAgAAEAAQAg" + "A" * 43,
    }
    definition = AddTask.model_validate(body).definition()
    assert definition.collector_auth_token is None
    assert definition.max_batch_size is None
    assert definition.aggregator_auth_token == "t" * 22
    leader = AddTask.model_validate({**body, "role": "leader"}).definition()
    assert leader.collector_auth_token == "c" * 22


def test_cli_wires_the_role(monkeypatch: pytest.MonkeyPatch) -> None:
    """`sagg interop ROLE --port P` reaches `serve_role` with its options; bad roles and ports
    are usage errors (exit 2)."""
    served: list[tuple[object, ...]] = []
    monkeypatch.setattr(interop_cli, "serve_role", lambda *args: served.append(args))
    assert main(["interop", "collector", "--port", "8080"]) == 0
    assert served == [("collector", "127.0.0.1", 8080, None)]
    for argv in (
        ["interop", "leader", "--port", "1"],
        ["interop", "client"],
        ["interop", "client", "--port", "0"],
    ):
        assert main(argv) == 2


def test_client_app_envelope() -> None:
    with TestClient(build_client_app()) as http:
        assert http.post("/internal/test/ready", json={}).json() == {"status": "success"}
        assert http.post("/internal/test/collection_poll", json={}).status_code == 404
        answer = http.post("/internal/test/upload", json={"task_id": "x"}).json()
        assert answer["status"] == "error" and "leader" in answer["error"]
        answer = http.post("/internal/test/upload", content=b"null").json()
        assert answer["status"] == "error"
        # An empty body is an empty object; one that is not JSON is an "error" answer too.
        assert http.post("/internal/test/ready").json() == {"status": "success"}
        json_type = {"Content-Type": "application/json"}
        answer = http.post("/internal/test/upload", content=b"{bad", headers=json_type).json()
        assert answer == {"status": "error", "error": "request body is not JSON"}
        # The description names each command's body.
        paths = http.app.openapi()["paths"]  # type: ignore[attr-defined]
        assert "Upload" in str(paths["/internal/test/upload"]["post"]["requestBody"])


def test_logs_go_to_the_logs_dir_when_writable(tmp_path: Path) -> None:
    root = logging.getLogger()
    before = list(root.handlers)
    try:
        configure_logging("client", 4242, logs=tmp_path)
        logging.getLogger("deploy.interop.test").info("hello interop")
        for handler in root.handlers:
            handler.flush()
        line = (tmp_path / "sagg-interop-client-4242.log").read_text().splitlines()[-1]
        record = json.loads(line)  # one JSON object per line, tagged with the role
        assert (record["msg"], record["role"], record["level"]) == (
            "hello interop",
            "client",
            "info",
        )
        configure_logging("client", 4243, logs=tmp_path / "missing")  # no dir: stderr only
    finally:
        for handler in root.handlers[len(before) :]:
            handler.close()
        root.handlers[:] = before
