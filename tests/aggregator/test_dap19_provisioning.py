"""Provisioning DAP-19 tasks on the aggregators (dap-19.md digest §3): the TaskConfiguration
blob is kept byte for byte and must agree with the definition; without one, the aggregators
derive it (empty task_info, `task_interval` from task_expiration), and reports sealed under the
client's own encoding of that configuration decrypt."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from services.aggregator.app import create_app
from services.common.clock import TestClock
from shared.b64url import b64url_encode
from shared.dap.messages import Interval, Url
from shared.dap.messages19 import TaskConfiguration, TaskExtension, UploadErrors
from tests.aggregator import dap19_client as c19
from tests.aggregator import helpers
from tests.aggregator.conftest import DbFactory
from tests.aggregator.env import make_env

COUNT = {"type": "Prio3Count"}
REPORT_DROPPED = 3


def _put(client: TestClient, definition: dict[str, Any]) -> Any:
    return client.put(
        f"/internal/tasks/{definition['task_id']}", json=definition, headers=helpers.admin_headers()
    )


@pytest.fixture
def leader(db_url: str, clock: TestClock) -> TestClient:
    return TestClient(create_app(helpers.settings(db_url), clock=clock))


def test_blob_is_kept_and_must_agree(leader: TestClient) -> None:
    task = c19.make_task(COUNT)
    definition = task.params.definition("leader")
    assert _put(leader, definition).status_code == 201
    shown = leader.get(
        f"/internal/tasks/{definition['task_id']}", headers=helpers.admin_headers()
    ).json()
    assert shown["dap"] == "dap-19"
    assert shown["task_configuration"] == b64url_encode(task.config_bytes)

    def with_config(**changes: Any) -> dict[str, Any]:
        fields = {f: getattr(task.config, f) for f in TaskConfiguration.__dataclass_fields__}
        fields.update(changes)
        blob = b64url_encode(TaskConfiguration(**fields).encode())
        other = c19.make_task(COUNT).params.definition("leader")
        return {**other, "task_configuration": blob, "vdaf": definition["vdaf"]}

    # One byte of a URL differs (digest §3: every decryption would fail).
    slashless = Url(helpers.HELPER_URL.rstrip("/").encode())
    response = _put(leader, with_config(helper_aggregator_endpoint=slashless))
    assert response.status_code == 400 and "helper_endpoint" in response.text
    response = _put(leader, with_config(min_batch_size=7))
    assert response.status_code == 400 and "min_batch_size" in response.text
    unknown = (TaskExtension(0x7777, b""),)
    response = _put(leader, with_config(extensions=unknown))
    assert response.status_code == 400 and "unsupported task extension" in response.text


def test_dap19_definitions_refused(leader: TestClient) -> None:
    definition = c19.make_task(COUNT).params.definition("leader")
    # Each batch is collected once in DAP-19.
    assert _put(leader, {**definition, "max_batch_query_count": 2}).status_code == 400
    # A DAP-19 task runs VDAF-20 with a 32-byte verify key.
    assert _put(leader, {**definition, "vdaf": COUNT}).status_code == 400
    short_key = b64url_encode(bytes(16))
    assert _put(leader, {**definition, "vdaf_verify_key": short_key}).status_code == 400
    # The blob is DAP-19's only.
    old = helpers.TaskParams().definition("leader")
    blob = definition["task_configuration"]
    assert _put(leader, {**old, "task_configuration": blob}).status_code == 400


def test_derived_task_interval_from_expiration(db_factory: DbFactory, clock: TestClock) -> None:
    """task_expiration E (seconds) becomes task_interval [0, E // tp + 1) in units."""
    now = clock.now()
    expiration = now - 3600 - 1  # the hour before last is the interval's last unit
    task = c19.make_task(
        COUNT,
        task_info=b"",
        provision_blob=False,
        task_interval=Interval(0, expiration // 3600 + 1),
        task_expiration=expiration,
    )
    env = make_env(db_factory, clock, task.params)
    lc, hc = c19.hpke_config(env.leader), c19.hpke_config(env.helper)
    inside = c19.make_report(task, lc, hc, 1, now - 2 * 3600)
    after = c19.make_report(task, lc, hc, 1, now - 3600)
    response = c19.upload(env.leader, task, [inside, after])
    assert response.status_code == 200
    errors = [(s.report_id, int(s.error)) for s in UploadErrors.decode(response.content).status]
    assert errors == [(after.report_metadata.report_id, REPORT_DROPPED)]
