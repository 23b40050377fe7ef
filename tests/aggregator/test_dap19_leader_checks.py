"""The leader's own checks of a DAP-19 helper's answer (DAP-19 §4.5.3.1; digest §6.2 steps
5-6): a response listing other report ids, or a report `finish`ed at initialization, makes the
leader abandon the job (its reports are not aggregated) and DELETE it at its Location; a
`reject` drops only that report. A wrapper over the real helper rewrites its answers."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest

from services.aggregator.datastore import JobState
from services.common.clock import TestClock
from shared.dap.ids import ReportId
from shared.dap.messages19 import AggregationJobResp, ReportError, VerifyResp
from tests.aggregator import dap19_client as c19
from tests.aggregator.conftest import DbFactory
from tests.aggregator.env import make_env, only_job

Tamper = Callable[[AggregationJobResp], AggregationJobResp]


class TamperingHelper:
    """Forwards to the helper and rewrites its AggregationJobResps; records DELETEs."""

    def __init__(self, inner: Any, tamper: Tamper) -> None:
        self.inner, self.tamper = inner, tamper
        self.deleted: list[str] = []

    def post(self, url: str, **kw: Any) -> httpx.Response:
        response: httpx.Response = self.inner.post(url, **kw)
        if not url.endswith("/aggregation_jobs") or response.status_code != 200:
            return response
        body = self.tamper(AggregationJobResp.decode(response.content)).encode()
        headers = {k: v for k, v in response.headers.items() if k.lower() != "content-length"}
        return httpx.Response(200, headers=headers, content=body, request=response.request)

    def put(self, url: str, **kw: Any) -> httpx.Response:
        response: httpx.Response = self.inner.put(url, **kw)
        return response

    def get(self, url: str, **kw: Any) -> httpx.Response:
        response: httpx.Response = self.inner.get(url, **kw)
        return response

    def delete(self, url: str, **kw: Any) -> httpx.Response:
        self.deleted.append(url)
        response: httpx.Response = self.inner.delete(url, **kw)
        return response


def _finish_first(resp: AggregationJobResp) -> AggregationJobResp:
    first, *rest = resp.verify_resps
    return AggregationJobResp((VerifyResp.finished(first.report_id), *rest))


def _other_ids(resp: AggregationJobResp) -> AggregationJobResp:
    first, *rest = resp.verify_resps
    assert first.payload is not None
    return AggregationJobResp((VerifyResp.continued(ReportId.random(), first.payload), *rest))


@pytest.mark.parametrize("tamper", [_finish_first, _other_ids], ids=["finish", "other-ids"])
def test_leader_abandons_the_job(db_factory: DbFactory, clock: TestClock, tamper: Tamper) -> None:
    task = c19.make_task({"type": "Prio3Count"})
    env = make_env(db_factory, clock, task.params)
    helper = TamperingHelper(env.helper, tamper)
    env.runner.aggregation.http = helper  # type: ignore[assignment]
    lc, hc = c19.hpke_config(env.leader), c19.hpke_config(env.helper)
    reports = [c19.make_report(task, lc, hc, 1, clock.now()) for _ in range(3)]
    assert c19.upload(env.leader, task, reports).content == b""
    env.drive()
    job = only_job(env, "aggregation_jobs")
    row = env.leader_agg.ds.aggregation_job(task.params.task_id.value, job)
    assert row is not None and row["state"] == JobState.ABANDONED
    # DELETE at the helper's Location (its id, not the leader's).
    assert len(helper.deleted) == 1
    assert helper.deleted[0].startswith(f"http://helper.test/tasks/{env.tid}/aggregation_jobs/")
    assert "?" not in helper.deleted[0]


def test_leader_drops_only_rejected_reports(db_factory: DbFactory, clock: TestClock) -> None:
    def reject_first(resp: AggregationJobResp) -> AggregationJobResp:
        first, *rest = resp.verify_resps
        dropped = VerifyResp.rejected(first.report_id, ReportError.UNKNOWN_VERIFICATION_KEY_ID)
        return AggregationJobResp((dropped, *rest))

    task = c19.make_task({"type": "Prio3Count"}, min_batch_size=2)
    env = make_env(db_factory, clock, task.params)
    env.runner.aggregation.http = TamperingHelper(env.helper, reject_first)  # type: ignore[assignment]
    lc, hc = c19.hpke_config(env.leader), c19.hpke_config(env.helper)
    reports = [c19.make_report(task, lc, hc, 1, clock.now()) for _ in range(3)]
    assert c19.upload(env.leader, task, reports).content == b""
    env.drive()
    only_job(env, "aggregation_jobs")
    stats = env.leader.get(
        f"/internal/tasks/{env.tid}/stats",
        headers={"Authorization": "Bearer admin-token-0123456789"},
    ).json()
    assert stats["report_aggregations"] == {"failed": 1, "finished": 2}
    assert "unknown_verification_key_id" in str(stats)
