"""`sagg up --demo`: one Prio3Histogram task, a few hundred reports, one collection."""

from __future__ import annotations

import random
import time
from collections import Counter

import httpx

from deploy.collect import format_result, request_collection, wait_for_collection
from deploy.config import Deployment
from deploy.tasks import TaskParams, create_task
from deploy.upload import ClientTask, UploadError, upload_reports
from shared.vdaf.spec import VdafSpec

__all__ = ["run_demo"]

BUCKETS = 8
PRECISION = 60


def run_demo(deployment: Deployment, reports: int, wait: float = 120.0) -> str:
    """Run the demo end to end; returns the printed report. Raises on any mismatch."""
    vdaf = VdafSpec(type="Prio3Histogram", length=BUCKETS, chunk_length=3)
    params = TaskParams(
        vdaf=vdaf,
        query_type="time_interval",
        min_batch_size=reports,
        time_precision=PRECISION,
        leader=deployment.leader,
        helper=deployment.helper,
        collector=deployment.collector,
    )
    info = create_task(params, deployment.admin_token)
    # A skewed distribution, so the histogram has a recognisable shape.
    rng = random.Random()
    measurements = [min(int(rng.expovariate(0.45)), BUCKETS - 1) for _ in range(reports)]
    now = int(time.time())
    start = now - now % PRECISION
    result = upload_reports(ClientTask.model_validate(info), measurements, report_time=now)
    if result.rejected:
        raise UploadError(f"{len(result.rejected)} reports rejected: {result.rejected[0]}")

    with httpx.Client(timeout=30.0) as http:
        query = {"type": "time_interval", "start": start, "duration": PRECISION}
        job_id = request_collection(
            http, deployment.collector, deployment.admin_token, info["task_id"], query
        )
        body = wait_for_collection(http, deployment.collector, deployment.admin_token, job_id, wait)
    counts = Counter(measurements)
    expected = [counts.get(i, 0) for i in range(BUCKETS)]
    verdict = "matches" if body.get("result") == expected else f"DIFFERS from {expected}"
    return (
        f"demo: task {info['task_id']}: uploaded {result.uploaded} reports\n"
        f"{format_result(body, 'table')}\n"
        f"demo: the collected histogram {verdict} the uploaded measurements"
    )
