"""`sagg up --demo`: one Prio3Histogram task, a few hundred reports, one collection; then the
same question published as a recipe (signed, logged, its task provisioned by the recipe server).

The recipe is what devices would fetch to answer the question privately (one-hot randomizer,
its batch size derived from the privacy claim); the histogram flow above it uploads plain
measurements through `deploy.upload`, since the device SDK is not part of the demo yet.
"""

from __future__ import annotations

import random
import time
from collections import Counter

import httpx

from deploy.collect import format_result, request_collection, wait_for_collection
from deploy.config import Deployment
from deploy.recipes import RecipeError, publish_recipe
from deploy.tasks import TaskParams, create_task
from deploy.upload import ClientTask, UploadError, upload_reports
from shared.recipe.accounting import required_batch_size
from shared.recipe.model import RecipeDraft
from shared.vdaf.spec import VdafSpec

__all__ = ["demo_recipe", "run_demo"]

BUCKETS = 8
PRECISION = 60


def demo_recipe() -> RecipeDraft:
    """The demo's question as a recipe: which of the buckets each device is in."""
    draft = RecipeDraft.model_validate(
        {
            "recipe_id": "demo.buckets",
            "version": 1,
            "analysis_id": "demo",
            "description": f"which of {BUCKETS} buckets a device is in (sagg up --demo)",
            "query": {"stream": "demo", "fields": ["bucket"], "selection": {"kind": "latest"}},
            "encoding": {
                "features": [
                    {
                        "kind": "categories",
                        "field": "bucket",
                        "values": [f"b{i}" for i in range(BUCKETS)],
                    }
                ]
            },
            "randomizer": {"name": "one_hot", "eps0": 2.0, "symmetric": True},
            "sampling_rate": 1.0,
            "min_batch_size": 1,
            "privacy": {"epsilon": 1.0, "delta": 1e-6, "analysis": "stronger_clones"},
        }
    )
    # B follows from the claim (the recipe server refuses a B that does not deliver it).
    needed = required_batch_size(draft.randomizer, draft.sampling_rate, draft.privacy)
    assert needed is not None  # eps0 = 2 reaches eps = 1 at a few thousand reports
    return RecipeDraft.model_validate({**draft.model_dump(), "min_batch_size": needed})


def _publish_demo_recipe(deployment: Deployment) -> str:
    if deployment.recipe_server is None or deployment.analyst_token is None:
        return "demo: no recipe server in this deployment; recipe not published"
    summary = publish_recipe(
        deployment.recipe_server,
        deployment.analyst_token,
        demo_recipe(),
        public_key=deployment.recipe_server_public_key,
    )
    state = "published" if summary["created"] else "already published"
    return (
        f"demo: recipe {summary['recipe_id']} v{summary['version']} {state} "
        f"(log leaf {summary['leaf_index']}, signature and inclusion verified): "
        f"task {summary['task_id']}, B = {summary['min_batch_size']}"
    )


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
    try:
        recipe_line = _publish_demo_recipe(deployment)
    except RecipeError as exc:
        raise UploadError(f"demo recipe: {exc}") from None
    return (
        f"demo: task {info['task_id']}: uploaded {result.uploaded} reports\n"
        f"{format_result(body, 'table')}\n"
        f"demo: the collected histogram {verdict} the uploaded measurements\n"
        f"{recipe_line}"
    )
