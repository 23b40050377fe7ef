"""Garbage collection (`services.aggregator.drivers.garbage`): storage stays bounded, replay
protection does not weaken, and nothing a running job or a future collection needs goes."""

from __future__ import annotations

from typing import Any

from services.aggregator.drivers.aggregation import create_jobs
from services.aggregator.drivers.garbage import collect_garbage
from services.aggregator.service import Aggregator
from services.common.clock import TestClock
from shared.dap.extensions import encode_extensions
from shared.dap.messages import Interval, Query, Role
from tests.aggregator import helpers
from tests.aggregator.conftest import DbFactory
from tests.aggregator.env import Env, make_env
from tests.aggregator.helpers import problem_type, task_stats
from tests.aggregator.issuer import Issuer

HOUR = 3600
EXPIRY = 2 * HOUR


def _env(db_factory: DbFactory, clock: TestClock, **kw: Any) -> Env:
    expiry = {"report_expiry_age": EXPIRY}
    params = helpers.TaskParams(overrides={"leader": expiry, "helper": expiry}, **kw)
    return make_env(db_factory, clock, params)


def _rows(agg: Aggregator, table: str) -> int:
    row = agg.ds.db.run("count", lambda tx: tx.query_one(f"SELECT COUNT(*) AS n FROM {table}"))
    assert row is not None
    return int(row["n"])


def test_expired_reports_are_refused_and_collected(db_factory: DbFactory, clock: TestClock) -> None:
    env = _env(db_factory, clock)
    old = [env.report(1) for _ in range(5)]
    for report in old[:3]:
        assert env.upload(report).status_code == 201
    env.drive()  # three aggregated (the leader scrubbed their payload)
    for report in old[3:]:
        assert env.upload(report).status_code == 201  # two never aggregated
    assert _rows(env.leader_agg, "client_reports") == 5
    assert _rows(env.helper_agg, "client_reports") == 3

    # Nothing is old yet: a pass deletes nothing.
    assert collect_garbage(env.leader_agg).total == 0

    env.advance(EXPIRY + HOUR)
    fresh = env.report(1)
    assert env.upload(fresh).status_code == 201
    # A report older than the expiry age is refused at upload: its id may be forgotten.
    late = env.report(1, env.clock.now() - EXPIRY - 1)
    assert problem_type(env.upload(late)) == "reportRejected"

    leader, helper = collect_garbage(env.leader_agg), collect_garbage(env.helper_agg)
    assert (leader.reports, leader.aggregation_jobs) == (5, 1)
    assert (helper.reports, helper.aggregation_jobs) == (3, 1)
    assert _rows(env.leader_agg, "client_reports") == 1  # the fresh report
    assert _rows(env.leader_agg, "aggregation_jobs") == 0
    assert _rows(env.helper_agg, "aggregation_jobs") == 0

    # A collected report's id is gone, and its replay is still refused: it is too old.
    assert problem_type(env.upload(old[0])) == "reportRejected"
    assert task_stats(env.leader, env.tid)["rejections"]["upload"]["report_expired"] == 2

    # The fresh report is aggregated and collected as usual.
    start = env.clock.now() - env.clock.now() % HOUR
    collection = env.collect(Query.time_interval(Interval(start, HOUR)))
    assert collection.report_count == 1


def test_a_running_job_keeps_its_reports_and_the_helper_drops_expired_ones(
    db_factory: DbFactory, clock: TestClock
) -> None:
    env = _env(db_factory, clock)
    for _ in range(4):
        assert env.upload(env.report(1)).status_code == 201
    assert create_jobs(env.leader_agg) > 0  # a job is made but not yet stepped
    env.advance(EXPIRY + HOUR)
    kept = collect_garbage(env.leader_agg)
    assert (kept.reports, kept.aggregation_jobs) == (0, 0)
    assert _rows(env.leader_agg, "client_reports") == 4

    # The job runs late: the helper drops every report (it may have forgotten their ids).
    env.drive()
    rejections = task_stats(env.leader, env.tid)["rejections"]["aggregation"]
    assert rejections == {"report_dropped": 4}
    done = collect_garbage(env.leader_agg)
    assert (done.reports, done.aggregation_jobs) == (4, 1)


def test_a_task_without_expiry_keeps_every_report(db_factory: DbFactory, clock: TestClock) -> None:
    env = make_env(db_factory, clock, helpers.TaskParams())
    for _ in range(3):
        assert env.upload(env.report(1)).status_code == 201
    env.drive()
    env.advance(365 * 86_400)
    assert collect_garbage(env.leader_agg).total == 0
    assert _rows(env.leader_agg, "client_reports") == 3
    # Without an expiry age an old report is not refused for its age; its id still guards.
    old = env.report(1, env.clock.now() - 300 * 86_400)
    assert env.upload(old).status_code == 201


def test_spent_tokens_go_once_no_aggregator_would_accept_them(
    db_factory: DbFactory, clock: TestClock, issuer: Issuer
) -> None:
    params = helpers.TaskParams(tokens=issuer.policy())
    env = make_env(db_factory, clock, params, issuer_http=issuer.client)
    now = clock.now()
    token = issuer.token(params.task_id, now, Role.LEADER)
    assert env.upload(env.report(1, extensions=encode_extensions(token=token))).status_code == 201
    assert _rows(env.leader_agg, "spent_tokens") == 1

    settings = env.leader_agg.settings
    window = params.tokens["window_seconds"] if params.tokens else 0
    keep_for = (
        settings.clock_skew_s
        + window
        + max(settings.token_upload_grace_s, settings.token_aggregation_grace_s)
    )
    env.advance(keep_for)
    assert collect_garbage(env.leader_agg).spent_tokens == 0
    env.advance(1)
    assert collect_garbage(env.leader_agg).spent_tokens == 1
    # The forgotten token is still refused: its window ended long before the grace.
    replay = env.report(1, now, extensions=encode_extensions(token=token))
    assert problem_type(env.upload(replay)) == "reportRejected"
    assert task_stats(env.leader, env.tid)["rejections"]["upload"]["token_expired"] == 1
