"""``sagg collect``: collect a batch through the collector and print the aggregate, or with
``--recipe`` its analysis (debiased estimates, intervals, the privacy statement; 002 §3)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any, Literal

import httpx
import typer

from deploy.cli.common import (
    SECONDS,
    CliError,
    admin_token,
    deployment,
    epoch,
    finite,
    http,
    url,
)
from deploy.collect import fetch_task, format_result, request_collection, wait_for_collection
from deploy.config import Deployment
from deploy.recipes import fetch_recipe
from services.collector.analysis import (
    AnalysisError,
    analyze,
    collection_from_body,
    to_csv,
    to_json,
    to_table,
)
from services.collector.charts import write_chart
from shared.recipe.model import Recipe

__all__ = ["collect"]

Format = Literal["table", "json", "csv"]
_CONFIDENCE = finite(0.5, 1.0, low_open=True, high_open=True, what="confidence")


def _query(
    batch_id: str | None,
    current_batch: bool,
    interval_start: int | None,
    interval_duration: int | None,
) -> dict[str, Any]:
    interval = interval_start is not None or interval_duration is not None
    if (batch_id is not None) + current_batch + interval > 1:
        raise typer.BadParameter(
            "give one of --interval-start/--interval-duration, --batch-id, --current-batch"
        )
    if batch_id is not None:
        return {"type": "fixed_size", "batch_id": batch_id}
    if current_batch:
        return {"type": "current_batch"}
    if interval_start is None or interval_duration is None:
        raise CliError(
            "give --interval-start and --interval-duration, --batch-id, or --current-batch"
        )
    return {"type": "time_interval", "start": interval_start, "duration": interval_duration}


def collect(
    task: Annotated[str, typer.Option(help="task id (base64url)")],
    batch_id: Annotated[str | None, typer.Option(help="a fixed_size batch")] = None,
    current_batch: Annotated[
        bool, typer.Option("--current-batch", help="the fixed_size task's next batch")
    ] = False,
    interval_start: Annotated[
        int | None, typer.Option(parser=epoch, help="epoch seconds or ISO 8601")
    ] = None,
    interval_duration: Annotated[int | None, typer.Option(min=1, help="seconds")] = None,
    collector: Annotated[str | None, typer.Option(metavar="URL")] = None,
    format: Annotated[Format, typer.Option()] = "table",
    wait: Annotated[float, typer.Option(parser=SECONDS, help="seconds to wait for it")] = 60.0,
    recipe: Annotated[
        str | None,
        typer.Option(help="analyse with this recipe: debiased estimates, CIs, privacy statement"),
    ] = None,
    recipe_version: Annotated[int | None, typer.Option(min=1)] = None,
    recipe_server: Annotated[str | None, typer.Option(metavar="URL")] = None,
    confidence: Annotated[float, typer.Option(parser=_CONFIDENCE)] = 0.95,
    chart: Annotated[
        Path | None, typer.Option(metavar="PNG", help="with --recipe: write a chart here")
    ] = None,
) -> None:
    """Collect a batch and print the aggregate."""
    query = _query(batch_id, current_batch, interval_start, interval_duration)
    found = deployment()
    collector_url = url(collector, "SAGG_COLLECTOR_URL", found, "collector")
    if collector_url is None:
        raise CliError("no collector URL: pass --collector or run `sagg up` first")
    token = admin_token(found, "collector")
    with http(found, 30.0) as client:
        verified = _recipe(task, recipe, recipe_version, recipe_server, chart, found, client)
        info = fetch_task(client, collector_url, token, task)
        job_id = request_collection(client, collector_url, token, task, query)
        body = wait_for_collection(client, collector_url, token, job_id, wait)
    if verified is None and info.aggregator_noise is None:
        print(format_result(body, format))
        return
    # With aggregator noise the field elements are signed and noisy: always analysed.
    try:
        analysis = analyze(verified, collection_from_body(body), confidence=confidence, task=info)
    except AnalysisError as exc:
        raise CliError(f"cannot analyse the collection: {exc}") from None
    writers = {"table": to_table, "json": to_json, "csv": to_csv}
    print(writers[format](analysis))
    if chart is not None:
        write_chart(analysis, chart)
        print(f"chart written to {chart}", file=sys.stderr)


def _recipe(
    task: str,
    recipe: str | None,
    version: int | None,
    server: str | None,
    chart: Path | None,
    found: Deployment | None,
    client: httpx.Client,
) -> Recipe | None:
    """The verified recipe whose analysis `--recipe` applies, if one was named."""
    if recipe is None:
        if chart is not None:
            raise CliError("--chart needs --recipe: the chart shows the recipe's estimates")
        return None
    server = url(server, "SAGG_RECIPE_SERVER_URL", found, "recipe_server")
    key = found.recipe_server_public_key if found is not None else None
    if server is None or key is None:
        raise CliError("--recipe needs the recipe server URL and key: run `sagg up` first")
    verified = fetch_recipe(server, recipe, key, version=version, http=client)
    if verified.task.task_id != task:
        raise CliError(f"recipe {recipe!r} is for task {verified.task.task_id}, not {task}")
    return verified
