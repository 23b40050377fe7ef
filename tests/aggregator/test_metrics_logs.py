"""What an operator sees of an upload with Privacy Pass tokens, its aggregation and its
collection: the aggregators' `/metrics` per task, and log lines (JSON) that carry no token,
share, key or credential."""

from __future__ import annotations

import json
import logging
import time

import pytest

from services.common.clock import TestClock
from services.common.logs import JsonFormatter
from shared.b64url import b64url_encode
from shared.dap.extensions import encode_extensions
from shared.dap.messages import Interval, Query, Role
from tests.aggregator import helpers
from tests.aggregator.conftest import DbFactory
from tests.aggregator.env import make_env
from tests.aggregator.issuer import Issuer
from tests.exposition import parse, value


def test_upload_metrics_and_logs_hold_no_secrets(
    db_factory: DbFactory, clock: TestClock, issuer: Issuer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    params = helpers.TaskParams(tokens=issuer.policy(), min_batch_size=2)
    env = make_env(db_factory, clock, params, issuer_http=issuer.client)
    now = clock.now()
    secrets: list[bytes] = [params.verify_key]
    reports = []
    for _ in range(3):
        token = issuer.token(params.task_id, now, Role.LEADER)
        helper_token = issuer.token(params.task_id, now, Role.HELPER)
        secrets += [token.encode(), helper_token.encode()]
        report = env.report(
            1,
            extensions=encode_extensions(token=token),
            helper_extensions=encode_extensions(token=helper_token),
        )
        reports.append(report)
        assert env.upload(report).status_code == 201
    # The last token once more, in a new report: refused as spent.
    replay = env.report(1, extensions=encode_extensions(token=token))
    assert env.upload(replay).status_code == 400
    for report in [*reports, replay]:
        for sealed in (report.leader_encrypted_input_share, report.helper_encrypted_input_share):
            secrets += [sealed.payload, sealed.enc]
    precision = params.time_precision
    start = now - now % precision
    collection = env.collect(Query.time_interval(Interval(start, precision)))
    assert collection.report_count == 3
    for client in (env.leader, env.helper):
        for record in client.app.state.aggregator.ds.hpke_keys():  # type: ignore[attr-defined]
            secrets.append(record.keypair.private_key_bytes())

    tid = env.tid
    leader = parse(env.leader.get("/metrics", headers=helpers.admin_headers()).text)
    assert value(leader, "sagg_reports_received_total", task=tid, role="leader") == 3
    rejected = "sagg_reports_rejected_total"
    spent = {"task": tid, "role": "leader", "stage": "upload", "reason": "token_spent"}
    assert value(leader, rejected, **spent) == 1
    # Uploads one after the other: each its own group-commit transaction (the spent one too).
    assert value(leader, "sagg_upload_commits_total", role="leader") == 4
    assert value(leader, "sagg_upload_commit_reports_total", role="leader") == 4
    # Named transactions are counted process-wide (every test of this process adds to them):
    # this test's four upload group commits at least.
    put = {"tx": "put_reports", "outcome": "committed"}
    assert value(leader, "sagg_db_transactions_total", **put) >= 4
    assert value(leader, "sagg_db_transaction_duration_seconds_count", tx="put_reports") >= 4
    assert value(leader, "sagg_aggregation_jobs", task=tid, role="leader", state="finished") == 1
    assert value(leader, "sagg_collection_jobs", task=tid, role="leader", state="finished") == 1
    assert value(leader, "sagg_batches_collected", task=tid, role="leader") == 1
    helper = parse(env.helper.get("/metrics", headers=helpers.admin_headers()).text)
    assert value(helper, "sagg_reports_received_total", task=tid, role="helper") == 3
    # The CPU of opening and preparing each aggregator's own shares, counted by the one that
    # did it (both run in this test's process: its CPU so far bounds theirs).
    for metrics, role in ((leader, "leader"), (helper, "helper")):
        for name in ("sagg_hpke_open_cpu_seconds_total", "sagg_vdaf_prep_cpu_seconds_total"):
            assert 0 < value(metrics, name, role=role) < time.process_time(), (name, role)

    texts = [
        env.leader.get("/metrics", headers=helpers.admin_headers()).text,
        env.helper.get("/metrics", headers=helpers.admin_headers()).text,
    ]
    formatter = JsonFormatter()
    lines = [formatter.format(r) for r in caplog.records]
    assert lines, "nothing was logged: the check below would be empty"
    for line in lines:
        assert isinstance(json.loads(line)["msg"], str)
    texts += lines
    words = [helpers.ADMIN_TOKEN, helpers.AGGREGATOR_TOKEN, helpers.COLLECTOR_TOKEN]
    words += [w for s in secrets for w in (s.hex(), b64url_encode(s))]
    for text in texts:
        for word in words:
            assert word not in text
