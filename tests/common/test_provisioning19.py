"""Provisioning a DAP-19 task from one blob: the taskprov task id (digest §11 known answer),
the same TaskConfiguration bytes at every party, and the parameters the bytes fix."""

from __future__ import annotations

import base64
import json
from typing import Any

import httpx
import pytest

from services.common.admin_client import PartyTokens
from services.common.provisioning import TaskParams, create_task, new_configuration
from shared.b64url import b64url_decode
from shared.dap.messages19 import TaskConfiguration
from shared.dap.task import CollectorTask, TaskDefinition
from shared.dap.taskprov import task_id_of
from shared.vdaf.spec import VdafSpec

LEADER, HELPER, COLLECTOR = "http://leader.test/", "http://helper.test", "http://collector.test"
NOW = 1_000_000


def _ascii(text: str) -> str:
    return text.encode().hex()


#: The taskprov draft's example configuration (digest §11): task_info "test", the two
#: example URLs, time_precision 60, min 10, time_interval, Prio3Count, task_interval {60, 100}.
TASKPROV_EXAMPLE = bytes.fromhex(
    "04"
    + _ascii("test")
    + "001b"
    + _ascii("https://leader.example.com/")
    + "001b"
    + _ascii("https://helper.example.com/")
    + "000000000000003c"
    "000000000000000a"
    "01"
    "0000"
    "00000001"
    "0000" + "0014"
    "0001"
    "0010"
    "000000000000003c"
    "0000000000000064"
)


def test_taskprov_task_id_known_answer() -> None:
    assert task_id_of(TASKPROV_EXAMPLE).value.hex() == (
        "35848a898adb146b559385247c7e49db1cbd28af52e3c11cfb01d4fc4b490479"
    )
    assert task_id_of(TASKPROV_EXAMPLE).to_b64url() == "NYSKiYrbFGtVk4UkfH5J2xy9KK9S48Ec-wHU_EtJBHk"


class _Parties:
    """The three admin APIs in one mock transport: records each PUT, answers like a party."""

    def __init__(self) -> None:
        self.puts: dict[str, dict[str, Any]] = {}

    def __call__(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        self.puts[request.url.host] = {"path": request.url.path, **body}
        if request.url.host == "collector.test":
            config = "AQAgAAEAAQAg" + "A" * 43  # id 1, X25519, HKDF-SHA256, AES-128-GCM
            return httpx.Response(201, json={**body, "collector_hpke_config": config})
        return httpx.Response(201, json=body)


def _create(params: TaskParams, blob: bytes | None = None) -> tuple[dict[str, Any], _Parties]:
    parties = _Parties()
    with httpx.Client(transport=httpx.MockTransport(parties)) as client:
        tokens = PartyTokens.shared("t" * 32)
        info = create_task(params, tokens, http=client, now=NOW, task_configuration=blob)
    return info, parties


def _sent(parties: _Parties, host: str) -> dict[str, Any]:
    """The definition a party was sent (without the recorded path)."""
    return {k: v for k, v in parties.puts[host].items() if k != "path"}


def _params(**kw: Any) -> TaskParams:
    base: dict[str, Any] = {
        "dap": "dap-19",
        "vdaf": {"version": "VDAF-20", "type": "Prio3Histogram", "length": 4, "chunk_length": 2},
        "leader": LEADER,
        "helper": HELPER,
        "collector": COLLECTOR,
        "min_batch_size": 7,
        "time_precision": 600,
    }
    return TaskParams.model_validate({**base, **kw})


def test_every_party_gets_the_same_bytes_and_the_derived_id() -> None:
    info, parties = _create(_params(expires_in=6000), None)
    raw = b64url_decode(info["task_configuration"], "config")
    assert info["task_id"] == task_id_of(raw).to_b64url() and info["dap"] == "dap-19"
    for host in ("leader.test", "helper.test", "collector.test"):
        put = parties.puts[host]
        assert put["path"] == f"/internal/tasks/{info['task_id']}"
        assert put["task_configuration"] == info["task_configuration"] and put["dap"] == "dap-19"
    TaskDefinition.model_validate(_sent(parties, "leader.test"))
    # The bytes by hand (DAP-19 §4.2, digest §3): 16 random task_info bytes, then the rest.
    expected_tail = b"".join(
        [
            bytes.fromhex("0013") + LEADER.encode(),
            bytes.fromhex("0012") + HELPER.encode(),
            (600).to_bytes(8, "big"),  # time_precision
            (7).to_bytes(8, "big"),  # min_batch_size
            bytes.fromhex("010000"),  # time_interval, empty batch_config
            bytes.fromhex("0000000400080000000400000002"),  # Histogram(4, 2)
            # task_interval [0, (NOW + 6000) // 600 + 1) units: reports up to the expiration.
            bytes.fromhex("001400010010") + (0).to_bytes(8, "big"),
            ((NOW + 6000) // 600 + 1).to_bytes(8, "big"),
        ]
    )
    assert raw[0] == 16 and raw[17:] == expected_tail


def test_a_blob_fixes_the_parameters_and_the_id() -> None:
    params = TaskParams.from_configuration(TASKPROV_EXAMPLE, COLLECTOR)
    assert params.vdaf == VdafSpec(version="VDAF-20", type="Prio3Count")
    assert (params.leader, params.helper) == (
        "https://leader.example.com/",
        "https://helper.example.com/",
    )
    assert (params.min_batch_size, params.time_precision, params.query_type) == (
        10,
        60,
        "time_interval",
    )
    info, parties = _create(params, TASKPROV_EXAMPLE)
    assert info["task_id"] == "NYSKiYrbFGtVk4UkfH5J2xy9KK9S48Ec-wHU_EtJBHk"
    sent = parties.puts["leader.example.com"]["task_configuration"]
    assert base64.urlsafe_b64decode(sent + "=" * (-len(sent) % 4)) == TASKPROV_EXAMPLE
    collector = CollectorTask.model_validate(_sent(parties, "collector.test"))
    assert collector.configuration_bytes == TASKPROV_EXAMPLE


def test_refusals() -> None:
    with pytest.raises(ValueError, match="VDAF-20"):
        _params(vdaf={"type": "Prio3Count"})
    with pytest.raises(ValueError, match="max_batch_size"):
        _params(query_type="fixed_size", max_batch_size=9)
    # The example with its extension's type 0x0001 replaced by an unknown 0x0002.
    unknown_ext = bytes.fromhex(TASKPROV_EXAMPLE.hex()[:-40] + "00020010" + "00" * 16)
    with pytest.raises(ValueError, match="unsupported task extension 0x0002"):
        TaskParams.from_configuration(unknown_ext, COLLECTOR)
    poplar = TaskConfiguration.decode(TASKPROV_EXAMPLE)
    poplar = TaskConfiguration(
        poplar.task_info,
        poplar.leader_aggregator_endpoint,
        poplar.helper_aggregator_endpoint,
        60,
        10,
        1,
        b"",
        6,
        b"\x00\x10",
    )
    with pytest.raises(ValueError, match="0x00000006"):
        TaskParams.from_configuration(poplar.encode(), COLLECTOR)


def test_definitions_refuse_bytes_that_say_otherwise() -> None:
    params = _params()
    raw = new_configuration(params.vdaf, params.query_type, 7, 600, (LEADER, HELPER), None)
    _, parties = _create(params, raw)
    leader = _sent(parties, "leader.test")
    TaskDefinition.model_validate(leader)
    for field, value in (
        ("min_batch_size", 8),
        ("helper_endpoint", HELPER + "/"),
        ("time_precision", 60),
    ):
        with pytest.raises(ValueError, match=field):
            TaskDefinition.model_validate({**leader, field: value})
    with pytest.raises(ValueError, match="a dap-09 task runs VDAF-08"):
        TaskDefinition.model_validate({**leader, "dap": "dap-09"})
