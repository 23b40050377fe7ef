"""``sagg task create`` (provision a DAP task on collector, leader and helper) and ``sagg upload``
(a plain DAP client: shard, seal and upload reports for such a task; DAP-09 §4.3, DAP-19 §4.4).

``--dap 19`` creates a DAP-19 task: from the flags (a VDAF-20 ``--vdaf``), or from one encoded
TaskConfiguration (DAP-19 §4.2), ``--task-configuration B64URL`` or
``--task-configuration-file F`` (the raw bytes, or their base64url text), which fixes the VDAF,
batch mode, batch size, time precision and both aggregators' URLs; the task id is then the
taskprov derivation from those bytes (`shared.dap.taskprov`). The settings file is ``--config``.

``--taskprov`` (with ``--dap 19``, against a ``sagg up --taskprov`` deployment) makes a taskprov
task (dap-19.md §11): only the collector is given it, with the deployment's taskprov collector
token; the aggregators opt in when the first upload announces it (the printed task has
``"taskprov": true``, which makes ``sagg upload`` announce it).
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Annotated, Any, Literal

import typer
from pydantic import ValidationError

from client_sdk.upload import DEFAULT_REPORTS_PER_REQUEST, ClientTask, upload_reports
from deploy.cli.common import (
    POSITIVE,
    CliError,
    admin_token,
    deployment,
    epoch,
    http,
    url,
    validation_message,
)
from deploy.config import Deployment, read_document
from deploy.measurements import expected_aggregate, random_measurements
from services.common.admin_client import PartyTokens
from services.common.provisioning import TaskParams, create_task
from shared.b64url import b64url_decode
from shared.codec import DecodeError
from shared.dap.messages19 import TaskConfiguration

__all__ = ["app", "upload"]

app = typer.Typer(help="manage tasks")

Positive = Annotated[int | None, typer.Option(min=1)]


def _load_config_file(path: str) -> dict[str, Any]:
    data = read_document(path)
    if not isinstance(data, dict):
        raise CliError(f"{path} must hold an object of task settings")
    return data


def _json(text: str, flag: str, example: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        raise CliError(f"{flag} must be JSON, e.g. '{example}'") from None


#: The help of `sagg task create`'s options that need more than their name.
_HELP = {
    "config": "TOML or JSON file with the same settings as the flags",
    "vdaf": 'e.g. \'{"type":"Prio3Histogram","length":4}\'',
    "expiry": "seconds after which reports are refused and their data deleted",
    "rate": "rate validation (001 §4.8): reports expected per time_precision bucket",
    "multiple": "refuse batches with a bucket above M x R reports (default 2)",
    "noise": "noise each aggregator adds (004 §5), e.g. "
    '\'{"mechanism":"discrete_gaussian","sigma":"8.5402"}\'',
    "dap": "DAP draft of the task: 09 (VDAF-08) or 19 (VDAF-20)",
    "blob": "DAP-19: the encoded TaskConfiguration (unpadded base64url)",
    "blob_file": "DAP-19: a file holding the encoded TaskConfiguration (bytes or base64url)",
    "taskprov": "DAP-19: provision only the collector; the aggregators opt in when uploads "
    "announce the task (needs `sagg up --taskprov`)",
}

#: What a TaskConfiguration fixes: the flags (and settings) a blob leaves no room for.
_FIXED_BY_CONFIGURATION = (
    "vdaf",
    "query_type",
    "min_batch_size",
    "max_batch_size",
    "time_precision",
    "max_batch_query_count",
    "expires_in",
    "leader",
    "helper",
)


def _configuration_bytes(blob: str | None, blob_file: str | None) -> bytes | None:
    """The TaskConfiguration bytes of ``--task-configuration`` or its file, checked to decode."""
    if blob is not None and blob_file is not None:
        raise CliError("give one of --task-configuration and --task-configuration-file")
    if blob_file is not None:
        try:
            raw = Path(blob_file).read_bytes()
        except OSError as exc:
            raise CliError(f"cannot read {blob_file}: {exc.strerror}") from None
        try:
            TaskConfiguration.decode(raw)
        except DecodeError:
            blob = raw.decode("ascii", "replace").strip()  # the base64url text of the bytes
        else:
            return raw
    if blob is None:
        return None
    try:
        raw = b64url_decode(blob.strip(), "task configuration")
        TaskConfiguration.decode(raw)
    except (DecodeError, ValueError) as exc:
        raise CliError(f"not an encoded TaskConfiguration: {exc}") from None
    return raw


Url = Annotated[str | None, typer.Option(metavar="URL")]


@app.command()
def create(
    config: Annotated[str | None, typer.Option(help=_HELP["config"])] = None,
    vdaf: Annotated[str | None, typer.Option(help=_HELP["vdaf"])] = None,
    query_type: Annotated[Literal["time_interval", "fixed_size"] | None, typer.Option()] = None,
    min_batch_size: Positive = None,
    max_batch_size: Positive = None,
    time_precision: Positive = None,
    max_batch_query_count: Positive = None,
    expires_in: Annotated[int | None, typer.Option(min=1, help="seconds from now")] = None,
    report_expiry_age: Annotated[int | None, typer.Option(min=1, help=_HELP["expiry"])] = None,
    expected_reports_per_bucket: Annotated[
        int | None, typer.Option(min=1, metavar="R", help=_HELP["rate"])
    ] = None,
    max_multiple: Annotated[
        float | None, typer.Option(parser=POSITIVE, metavar="M", help=_HELP["multiple"])
    ] = None,
    aggregator_noise: Annotated[
        str | None, typer.Option(metavar="JSON", help=_HELP["noise"])
    ] = None,
    leader: Url = None,
    helper: Url = None,
    collector: Url = None,
    dap: Annotated[Literal["09", "19"], typer.Option(help=_HELP["dap"])] = "09",
    task_configuration: Annotated[
        str | None, typer.Option(metavar="B64URL", help=_HELP["blob"])
    ] = None,
    task_configuration_file: Annotated[
        str | None, typer.Option(metavar="FILE", help=_HELP["blob_file"])
    ] = None,
    taskprov: Annotated[bool, typer.Option("--taskprov", help=_HELP["taskprov"])] = False,
) -> None:
    """Create a task on collector, leader and helper; prints its parameters (JSON)."""
    found = deployment()
    values: dict[str, Any] = _load_config_file(config) if config else {}
    blob = _configuration_bytes(task_configuration, task_configuration_file)
    if blob is not None and dap != "19":
        raise CliError("a TaskConfiguration makes a DAP-19 task: pass --dap 19")
    taskprov_token = None
    if taskprov:
        if dap != "19":
            raise CliError("taskprov announces DAP-19 tasks: pass --dap 19")
        taskprov_token = found.taskprov_collector_token if found else None
        if taskprov_token is None:
            raise CliError("the deployment runs no taskprov: start it with `sagg up --taskprov`")
    values["dap"] = f"dap-{dap}"
    if vdaf is not None:
        values["vdaf"] = _json(vdaf, "--vdaf", '{"type":"Prio3Count"}')
    if aggregator_noise is not None:
        values["aggregator_noise"] = _json(
            aggregator_noise,
            "--aggregator-noise",
            '{"mechanism":"discrete_gaussian","sigma":"8.5402"}',
        )
    flags = {
        "query_type": query_type,
        "min_batch_size": min_batch_size,
        "max_batch_size": max_batch_size,
        "time_precision": time_precision,
        "max_batch_query_count": max_batch_query_count,
        "expires_in": expires_in,
        "report_expiry_age": report_expiry_age,
    }
    values.update({name: value for name, value in flags.items() if value is not None})
    if expected_reports_per_bucket is not None:
        rate: dict[str, Any] = {"expected_reports_per_bucket": expected_reports_per_bucket}
        if max_multiple is not None:
            rate["max_multiple"] = max_multiple
        values["rate_validation"] = rate
    elif max_multiple is not None:
        raise CliError("--max-multiple needs --expected-reports-per-bucket")
    if blob is not None:
        values.update(leader=leader, helper=helper)
        fixed = [name for name in _FIXED_BY_CONFIGURATION if values.get(name) is not None]
        if fixed:
            raise CliError(f"the TaskConfiguration fixes {', '.join(fixed)}: leave them out")
        collector_url = collector or values.get("collector")
        collector_url = collector_url or url(None, "SAGG_COLLECTOR_URL", found, "collector")
        if collector_url is None:
            raise CliError("no collector URL: pass --collector or run `sagg up` first")
        choices = {
            k: v for k, v in values.items() if k not in ("dap", "collector", "leader", "helper")
        }
        try:
            params = TaskParams.from_configuration(blob, collector_url, **choices)
        except ValueError as exc:  # ValidationError included
            message = validation_message(exc) if isinstance(exc, ValidationError) else str(exc)
            raise CliError(f"invalid task: {message}") from None
        _provision(found, params, blob, taskprov_token)
        return
    for role, flag, env in (
        ("leader", leader, "SAGG_LEADER_URL"),
        ("helper", helper, "SAGG_HELPER_URL"),
        ("collector", collector, "SAGG_COLLECTOR_URL"),
    ):
        # A flag wins, then the config file, then the environment and the deployment file.
        values[role] = flag or values.get(role) or url(None, env, found, role)
        if values[role] is None:
            raise CliError(f"no {role} URL: pass --{role} or run `sagg up` first")
    if "vdaf" not in values:
        raise CliError("--vdaf is required (or a config file with a vdaf entry)")
    try:
        params = TaskParams.model_validate(values)
    except ValidationError as exc:
        raise CliError(f"invalid task: {validation_message(exc)}") from None
    _provision(found, params, None, taskprov_token)


def _provision(
    found: Deployment | None, params: TaskParams, blob: bytes | None, taskprov_token: str | None
) -> None:
    tokens = PartyTokens(*(admin_token(found, p) for p in ("leader", "helper", "collector")))
    with http(found, 30.0) as client:
        info = create_task(
            params,
            tokens,
            http=client,
            task_configuration=blob,
            taskprov_collector_token=taskprov_token,
        )
    print(json.dumps(info, indent=2))


def upload(
    task_file: Annotated[Path, typer.Option(help="JSON printed by `sagg task create`")],
    measurements: Annotated[
        str | None, typer.Option(metavar="JSON", help="JSON array, e.g. [0,3,1]")
    ] = None,
    random_count: Annotated[
        int | None,
        typer.Option("--random", min=1, metavar="N", help="N random measurements"),
    ] = None,
    seed: Annotated[int | None, typer.Option(help="seed for --random")] = None,
    time: Annotated[
        int | None, typer.Option(parser=epoch, help="report time (default now)")
    ] = None,
    per_request: Annotated[
        int, typer.Option(min=1, metavar="N", help="DAP-19: reports per UploadRequest")
    ] = DEFAULT_REPORTS_PER_REQUEST,
) -> None:
    """Shard, encrypt and upload reports (a DAP client) for a task `sagg task create` made."""
    if (measurements is None) == (random_count is None):
        raise typer.BadParameter("give one of --measurements and --random")
    try:
        raw = task_file.read_text()
    except OSError as exc:
        raise CliError(f"cannot read {task_file}: {exc.strerror}") from None
    try:
        task = ClientTask.model_validate_json(raw)
    except ValidationError as exc:
        raise CliError(f"{task_file}: {validation_message(exc)}") from None
    if random_count is not None:
        values = random_measurements(task.vdaf, random_count, random.Random(seed))
    else:
        assert measurements is not None
        try:
            values = json.loads(measurements)
        except ValueError:
            raise CliError("--measurements must be a JSON array, e.g. [0,3,1]") from None
        if not isinstance(values, list) or not values:
            raise CliError("--measurements must be a non-empty JSON array")
    with http(deployment(), 30.0) as client:
        result = upload_reports(
            task, values, report_time=time, http=client, per_request=per_request
        )
    summary: dict[str, Any] = {
        "task_id": task.task_id,
        "uploaded": result.uploaded,
        "rejected": len(result.rejected),
    }
    if not result.rejected:
        summary["expected_aggregate"] = expected_aggregate(task.vdaf, values)
    print(json.dumps(summary))
    if result.rejected:
        raise CliError(f"{len(result.rejected)} reports rejected, e.g. {result.rejected[0]}")
