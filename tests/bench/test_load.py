"""The load generator against a spawned leader/helper/collector: it stops by itself, its
numbers are sane, and every upload it counted as accepted is in the leader's store (checked by
collecting the batch: the collected report count must equal the accepted count)."""

from __future__ import annotations

import time
from pathlib import Path

import httpx

from bench.deployment import PRECISION, request_collection, spawn_deployment, wait_collection
from bench.load import LoadConfig, generate_load
from client_sdk.upload import ClientTask
from services.common.provisioning import TaskParams, create_task
from shared.vdaf.spec import VdafSpec

DURATION = 5.0


def test_load_stops_by_itself_and_every_accepted_upload_is_stored(tmp_path: Path) -> None:
    with spawn_deployment("sqlite", tmp_path) as spawned:
        params = TaskParams(
            vdaf=VdafSpec(type="Prio3Count"),
            min_batch_size=1,
            time_precision=PRECISION,
            leader=spawned.leader,
            helper=spawned.helper,
            collector=spawned.collector,
        )
        task = ClientTask.model_validate(create_task(params, spawned.admin_token))
        pids = {"leader": spawned.pid("leader"), "helper": spawned.pid("helper")}
        config = LoadConfig(task=task, duration=DURATION, concurrency=8, interval=1.0, pids=pids)

        began = int(time.time())
        start = time.monotonic()
        summary = generate_load(config, quiet=True)
        wall = time.monotonic() - start

        # Stopped by the duration (plus the generator's start-up), not by running out.
        assert summary.elapsed < DURATION + 2.0 and wall < DURATION + 15.0
        assert summary.elapsed >= DURATION - 0.5
        assert summary.failed == 0, summary.errors
        assert summary.accepted > 50
        assert 0 < summary.p50_ms <= summary.p99_ms < 5000
        assert 3 <= len(summary.intervals) <= 7
        assert sum(row.accepted for row in summary.intervals) == summary.accepted
        for row in summary.intervals:
            assert set(row.rss_kib) == {"leader", "helper"}
            assert all(kib > 10_000 for kib in row.rss_kib.values())

        # Two buckets from the start: the run may cross a bucket boundary.
        first_bucket = began - began % PRECISION
        with httpx.Client(timeout=10.0) as http:
            job = request_collection(
                http, spawned, task.task_id, first_bucket, duration=2 * PRECISION
            )
            body = wait_collection(http, spawned, job, timeout=20.0)
        assert body["state"] == "complete", body
        assert body["report_count"] == summary.accepted
        # Count: every measurement is 0 or 1.
        assert 0 <= body["result"] <= summary.accepted

    # The deployment is gone: every process was stopped.
    assert all(p.poll() is not None for p in spawned.processes.values())
