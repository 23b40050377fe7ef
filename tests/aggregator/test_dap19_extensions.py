"""sagg's report extensions on DAP-19 tasks: the Privacy Pass token and the recipe binding
travel as private extensions of each aggregator's own PlaintextInputShare (in codepoint order,
as DAP-19's strictly increasing lists require), and both aggregators enforce them as for
DAP-09 (001 §4.1, §4.8); rate validation refuses a surging bucket. Errors are the digest's
ReportError codepoints (dap-19.md §1.2)."""

from __future__ import annotations

import hashlib

from services.common.clock import TestClock
from shared.dap.extensions import RecipeBinding, encode_extensions
from shared.dap.messages import Role
from shared.dap.messages19 import CollectionJobResp, Report, UploadErrors
from tests.aggregator import dap19_client as c19
from tests.aggregator.conftest import DbFactory
from tests.aggregator.env import make_env
from tests.aggregator.issuer import Issuer

INVALID_MESSAGE = 7
DIGEST = hashlib.sha256(b"a canonical recipe").digest()


def test_tokens_and_binding_on_dap19(
    db_factory: DbFactory, clock: TestClock, issuer: Issuer
) -> None:
    task = c19.make_task(
        {"type": "Prio3Count"},
        min_batch_size=2,
        tokens=issuer.policy(),
        recipe_digest=DIGEST,
    )
    env = make_env(db_factory, clock, task.params, issuer_http=issuer.client)
    lc, hc = c19.hpke_config(env.leader), c19.hpke_config(env.helper)
    now = clock.now()
    tid = task.params.task_id
    binding = RecipeBinding(DIGEST, 2)

    def report(leader_token: bool = True, bound: RecipeBinding | None = binding) -> Report:
        leader = issuer.token(tid, now, Role.LEADER) if leader_token else None
        helper = issuer.token(tid, now, Role.HELPER)
        return c19.make_report(
            task,
            lc,
            hc,
            1,
            now,
            extensions=encode_extensions(bound, leader),
            helper_extensions=encode_extensions(bound, helper),
        )

    good = [report(), report()]
    no_token = report(leader_token=False)
    wrong_binding = report(bound=RecipeBinding(DIGEST, 3))
    response = c19.upload(env.leader, task, [*good, no_token, wrong_binding])
    assert response.status_code == 200, response.text
    errors = [(s.report_id, int(s.error)) for s in UploadErrors.decode(response.content).status]
    assert errors == [
        (no_token.report_metadata.report_id, INVALID_MESSAGE),
        (wrong_binding.report_metadata.report_id, INVALID_MESSAGE),
    ]

    request, location = c19.create_collection(env, task, now)
    resp = CollectionJobResp.decode(c19.poll_collection(env, location).content)
    # Both aggregators verified and spent their own tokens: the two good reports.
    assert resp.report_count == 2
    assert c19.unshard(task, request, resp) == 2


def test_rate_validation_on_dap19(db_factory: DbFactory, clock: TestClock) -> None:
    """001 §4.8: a bucket above M x R reports is refused with invalidBatchSize."""
    task = c19.make_task(
        {"type": "Prio3Count"},
        definition={"rate_validation": {"expected_reports_per_bucket": 2}},
    )
    env = make_env(db_factory, clock, task.params)
    lc, hc = c19.hpke_config(env.leader), c19.hpke_config(env.helper)
    now = clock.now()
    reports = [c19.make_report(task, lc, hc, 1, now) for _ in range(5)]
    assert c19.upload(env.leader, task, reports).content == b""
    _, location = c19.create_collection(env, task, now)
    polled = c19.poll_collection(env, location)
    assert polled.status_code != 200, "the surging batch was not refused"
    assert polled.json()["type"] == "urn:ietf:params:ppm:dap:error:invalidBatchSize"
