"""`sagg`: the command line (argparse, one subcommand per task).

    sagg [--ca-file PEM] [--allow-insecure-http] COMMAND ...
    sagg up [--data-dir D] [--leader-port P ...] [--store sqlite|postgres --postgres-url U] [--tls]
            [--demo [--demo-scale full|small] [--demo-out DIR] [--demo-seed N] [--demo-only A,B]
             [--exit-after-demo]]
    sagg serve aggregator|collector|token-issuer|recipe-server [--host H --port P
                                                                --database-url U]
    sagg keys init --dir D [--leader U --helper U --collector U --token-issuer U
                            --recipe-server U]
    sagg keys pin-issuer --dir D --token-issuer U   (its key ids, for the recipe server)
    sagg task create --vdaf JSON [--query-type ...] ... [--expected-reports-per-bucket R
                     [--max-multiple M]] [--aggregator-noise JSON]
                     [--leader U --helper U --collector U]
    sagg task create --config FILE
    sagg upload --task-file FILE (--measurements JSON | --random N [--seed S]) [--time T]
    sagg collect --task ID (--interval-start S --interval-duration D | --batch-id B |
                            --current-batch) [--format table|json|csv] [--wait SECONDS]
    sagg privacy amplification --eps0 E --n N --delta D [--deletion] [--analysis A] [--json]
    sagg privacy batch-size --eps0 E --eps X --delta D [--deletion] [--analysis A] [--json]
    sagg privacy sampling --eps X --q Q [--delta D] [--json]
    sagg privacy gaussian-sigma --eps X --delta D --sensitivity S [--aggregators K] [--json]
    sagg recipe publish FILE [--recipe-server U]      (a RecipeDraft as JSON or TOML)
    sagg recipe list [--recipe-server U] [--json]
    sagg interop aggregator|collector|client --port P      (deploy/interop)
    sagg devices run --recipe ID [--count N ...]            (client_sdk; defaults from the
                                                             deployment file)

Every failure is one line on stderr (`sagg: ...`) and a non-zero exit status; no tracebacks.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import re
import runpy
import ssl
import sys
import tomllib
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, NoReturn, cast, get_args

import httpx
from pydantic import ValidationError

from client_sdk.cli import add_devices_parser
from client_sdk.http import http_client
from client_sdk.upload import ClientTask, UploadError, upload_reports
from deploy import privacy
from deploy.collect import (
    CollectError,
    fetch_task,
    format_result,
    request_collection,
    wait_for_collection,
)
from deploy.config import (
    DEFAULT_DATA_DIR,
    Deployment,
    DeploymentError,
    load_deployment,
    write_deployment,
)
from deploy.demo import ANALYSES, DemoError, run_demo
from deploy.demo.framework import SCALES
from deploy.interop.cli import add_interop_parser
from deploy.keys import (
    ADMIN_TOKEN_SERVICES,
    DATASTORE_KEY_SERVICES,
    PROVISIONED_PARTIES,
    KeysError,
    admin_token_file,
    datastore_key_file,
    db_password_file,
    ensure_db_password,
    ensure_keys,
    ensure_pinned_keys_placeholder,
    pgpass_file,
    pin_issuer_keys,
    provisioner_token_file,
)
from deploy.launcher import DEFAULT_PORTS, Cluster, LaunchError, UpOptions, wait_for_shutdown
from deploy.recipes import (
    RecipeError,
    fetch_recipe,
    format_listing,
    list_recipes,
    load_draft,
    publish_recipe,
)
from deploy.upload import expected_aggregate, random_measurements
from services.collector.analysis import (
    AnalysisError,
    analyze,
    collection_from_body,
    to_csv,
    to_json,
    to_table,
)
from services.collector.charts import write_chart
from services.common.admin_client import PartyTokens, ProvisionError
from services.common.provisioning import TaskParams, create_task
from shared.dp.amplification import Analysis
from shared.recipe.model import Recipe
from shared.transport import TransportPolicy, http_failure

__all__ = ["main"]

EXIT_ERROR = 1
EXIT_USAGE = 2


class CliError(Exception):
    """A user-facing failure: printed as one line, exit status 1."""


class _Parser(argparse.ArgumentParser):
    """argparse, but usage errors are one line too."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see --help)\n")


def _validation_message(exc: ValidationError) -> str:
    first = exc.errors()[0]
    where = ".".join(str(p) for p in first.get("loc", ()) if p not in ("function-after",))
    msg = str(first.get("msg", "invalid value")).removeprefix("Value error, ")
    return f"{where}: {msg}" if where else msg


# --- shared resolution of URLs and the admin token -------------------------------------------


def _deployment(args: argparse.Namespace) -> Deployment | None:
    try:
        return load_deployment(getattr(args, "deployment", None))
    except DeploymentError as exc:
        raise CliError(str(exc)) from None


def _admin_token(deployment: Deployment | None, service: str) -> str:
    """The operator's token of `service`: SAGG_ADMIN_TOKEN, else the deployment file's."""
    token = os.environ.get("SAGG_ADMIN_TOKEN") or (
        deployment.admin_token(service) if deployment else None
    )
    if not token:
        raise CliError(f"no {service} admin token: set SAGG_ADMIN_TOKEN or run `sagg up` first")
    return token


def _transport(args: argparse.Namespace, deployment: Deployment | None) -> TransportPolicy:
    """The CAs this command trusts (`--ca-file`, `SAGG_CA_FILE`, the deployment file's
    `tls_ca_file`, else the system's) and whether plain http:// off the host is allowed
    (`--allow-insecure-http`, `SAGG_ALLOW_INSECURE_HTTP=1`)."""
    ca_file = (
        getattr(args, "global_ca_file", None)
        or os.environ.get("SAGG_CA_FILE")
        or (deployment.tls_ca_file if deployment else None)
    )
    insecure = getattr(args, "global_allow_insecure_http", False) or os.environ.get(
        "SAGG_ALLOW_INSECURE_HTTP", ""
    ).lower() in ("1", "true", "yes")
    policy = TransportPolicy(ca_file, insecure)
    try:
        policy.ssl_context  # noqa: B018 - load the bundle now, for a one-line error
    except (OSError, ssl.SSLError) as exc:
        raise CliError(f"cannot load the CA bundle {ca_file}: {exc}") from None
    return policy


def _http(args: argparse.Namespace, deployment: Deployment | None, timeout: float) -> httpx.Client:
    return http_client(_transport(args, deployment), timeout=timeout)


def _url(flag: str | None, env: str, deployment: Deployment | None, role: str) -> str | None:
    if flag:
        return flag
    if os.environ.get(env):
        return os.environ[env]
    return getattr(deployment, role) if deployment else None


# --- sagg collect ------------------------------------------------------------------------------


def _epoch(text: str) -> int:
    """Seconds since the epoch, or an ISO 8601 time with a zone (e.g. 2026-11-22T00:00:00Z)."""
    if text.isdigit():
        return int(text)
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a time: {text!r}") from None
    if when.tzinfo is None:
        raise argparse.ArgumentTypeError(f"time needs a zone (e.g. Z): {text!r}")
    return int(when.timestamp())


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1: {text!r}")
    return value


def _confidence(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0.5 < value < 1:
        raise argparse.ArgumentTypeError(f"confidence must be in (0.5, 1): {text!r}")
    return value


def _analysis_list(text: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in ANALYSES]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"analyses are a comma-separated subset of {','.join(ANALYSES)}: {text!r}"
        )
    return names


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must not be negative: {text!r}")
    return value


def cmd_collect(args: argparse.Namespace) -> int:
    deployment = _deployment(args)
    collector = _url(args.collector, "SAGG_COLLECTOR_URL", deployment, "collector")
    if collector is None:
        raise CliError("no collector URL: pass --collector or run `sagg up` first")
    if args.batch_id is not None:
        query: dict[str, Any] = {"type": "fixed_size", "batch_id": args.batch_id}
    elif args.current_batch:
        query = {"type": "current_batch"}
    else:
        if args.interval_start is None or args.interval_duration is None:
            raise CliError(
                "give --interval-start and --interval-duration, --batch-id, or --current-batch"
            )
        query = {
            "type": "time_interval",
            "start": args.interval_start,
            "duration": args.interval_duration,
        }
    token = _admin_token(deployment, "collector")
    with _http(args, deployment, 30.0) as http:
        recipe = _collect_recipe(args, deployment, http)
        task = fetch_task(http, collector, token, args.task)
        job_id = request_collection(http, collector, token, args.task, query)
        body = wait_for_collection(http, collector, token, job_id, args.wait)
    if recipe is None and task.aggregator_noise is None:
        print(format_result(body, args.format))
        return 0
    try:
        # With aggregator noise the field elements are signed and noisy: always analysed.
        analysis = analyze(
            recipe, collection_from_body(body), confidence=args.confidence, task=task
        )
    except AnalysisError as exc:
        raise CliError(f"cannot analyse the collection: {exc}") from None
    writers = {"table": to_table, "json": to_json, "csv": to_csv}
    print(writers[args.format](analysis))
    if args.chart is not None:
        write_chart(analysis, Path(args.chart))
        print(f"chart written to {args.chart}", file=sys.stderr)
    return 0


def _collect_recipe(
    args: argparse.Namespace, deployment: Deployment | None, http: httpx.Client
) -> Recipe | None:
    """The verified recipe whose analysis `sagg collect --recipe` applies, if one was named."""
    if args.recipe is None:
        if args.chart is not None:
            raise CliError("--chart needs --recipe: the chart shows the recipe's estimates")
        return None
    server = _url(args.recipe_server, "SAGG_RECIPE_SERVER_URL", deployment, "recipe_server")
    key = deployment.recipe_server_public_key if deployment is not None else None
    if server is None or key is None:
        raise CliError("--recipe needs the recipe server URL and key: run `sagg up` first")
    try:
        recipe = fetch_recipe(server, args.recipe, key, version=args.recipe_version, http=http)
    except RecipeError as exc:
        raise CliError(str(exc)) from None
    if recipe.task.task_id != args.task:
        raise CliError(f"recipe {args.recipe!r} is for task {recipe.task.task_id}, not {args.task}")
    return recipe


# --- sagg task create -------------------------------------------------------------------------


def _load_config_file(path: str) -> dict[str, Any]:
    file = Path(path)
    try:
        text = file.read_text()
    except OSError as exc:
        raise CliError(f"cannot read {path}: {exc.strerror}") from None
    try:
        data = tomllib.loads(text) if file.suffix == ".toml" else json.loads(text)
    except (tomllib.TOMLDecodeError, ValueError) as exc:
        raise CliError(
            f"{path} is not valid {'TOML' if file.suffix == '.toml' else 'JSON'}: {exc}"
        ) from None
    if not isinstance(data, dict):
        raise CliError(f"{path} must hold an object of task settings")
    return data


def cmd_task_create(args: argparse.Namespace) -> int:
    deployment = _deployment(args)
    values: dict[str, Any] = _load_config_file(args.config) if args.config else {}
    if args.vdaf is not None:
        try:
            values["vdaf"] = json.loads(args.vdaf)
        except ValueError:
            raise CliError('--vdaf must be JSON, e.g. \'{"type":"Prio3Count"}\'') from None
    if args.aggregator_noise is not None:
        try:
            values["aggregator_noise"] = json.loads(args.aggregator_noise)
        except ValueError:
            raise CliError(
                '--aggregator-noise must be JSON, e.g. \'{"mechanism":"discrete_gaussian",'
                '"sigma":"8.5402"}\''
            ) from None
    for name in (
        "query_type",
        "min_batch_size",
        "max_batch_size",
        "time_precision",
        "max_batch_query_count",
        "expires_in",
        "report_expiry_age",
    ):
        value = getattr(args, name)
        if value is not None:
            values[name] = value
    if args.expected_reports_per_bucket is not None:
        rate: dict[str, Any] = {"expected_reports_per_bucket": args.expected_reports_per_bucket}
        if args.max_multiple is not None:
            rate["max_multiple"] = args.max_multiple
        values["rate_validation"] = rate
    elif args.max_multiple is not None:
        raise CliError("--max-multiple needs --expected-reports-per-bucket")
    for role, env in (
        ("leader", "SAGG_LEADER_URL"),
        ("helper", "SAGG_HELPER_URL"),
        ("collector", "SAGG_COLLECTOR_URL"),
    ):
        # A flag wins, then the config file, then the environment and the deployment file.
        url = getattr(args, role) or values.get(role) or _url(None, env, deployment, role)
        if url is None:
            raise CliError(f"no {role} URL: pass --{role} or run `sagg up` first")
        values[role] = url
    if "vdaf" not in values:
        raise CliError("--vdaf is required (or a config file with a vdaf entry)")
    try:
        params = TaskParams.model_validate(values)
    except ValidationError as exc:
        raise CliError(f"invalid task: {_validation_message(exc)}") from None
    tokens = PartyTokens(*(_admin_token(deployment, p) for p in ("leader", "helper", "collector")))
    with _http(args, deployment, 30.0) as http:
        info = create_task(params, tokens, http=http)
    print(json.dumps(info, indent=2))
    return 0


# --- sagg upload ------------------------------------------------------------------------------


def cmd_upload(args: argparse.Namespace) -> int:
    """Upload reports for a task described by `sagg task create`'s output."""
    try:
        raw = Path(args.task_file).read_text()
    except OSError as exc:
        raise CliError(f"cannot read {args.task_file}: {exc.strerror}") from None
    try:
        task = ClientTask.model_validate_json(raw)
    except ValidationError as exc:
        raise CliError(f"{args.task_file}: {_validation_message(exc)}") from None
    if args.random is not None:
        measurements = random_measurements(task.vdaf, args.random, random.Random(args.seed))
    else:
        try:
            measurements = json.loads(args.measurements)
        except ValueError:
            raise CliError("--measurements must be a JSON array, e.g. [0,3,1]") from None
        if not isinstance(measurements, list) or not measurements:
            raise CliError("--measurements must be a non-empty JSON array")
    with _http(args, _deployment(args), 30.0) as http:
        result = upload_reports(task, measurements, report_time=args.time, http=http)
    summary: dict[str, Any] = {
        "task_id": task.task_id,
        "uploaded": result.uploaded,
        "rejected": len(result.rejected),
    }
    if not result.rejected:
        summary["expected_aggregate"] = expected_aggregate(task.vdaf, measurements)
    print(json.dumps(summary))
    if result.rejected:
        raise CliError(f"{len(result.rejected)} reports rejected, e.g. {result.rejected[0]}")
    return 0


# --- sagg serve / sagg up ---------------------------------------------------------------------


#: `sagg serve` name -> (module, settings prefix).
SERVE_MODULES = {
    "aggregator": ("services.aggregator", "SAGG_AGGREGATOR_"),
    "collector": ("services.collector", "SAGG_COLLECTOR_"),
    "token-issuer": ("services.token_issuer", "SAGG_TOKEN_ISSUER_"),
    "recipe-server": ("services.recipe_server", "SAGG_RECIPE_SERVER_"),
}
#: Secrets may come from files (Docker/compose secrets): `<NAME>_FILE` sets `<NAME>` to the
#: file's content. Only names ending so: `SIGNING_KEY_FILE` is a setting of its own.
SECRET_FILE_SUFFIXES = ("_TOKEN_FILE", "_SECRET_FILE", "_KEYS_FILE")


def secrets_from_files(environ: dict[str, str], prefix: str) -> dict[str, str]:
    """The `<prefix>...<SECRET_FILE_SUFFIXES>` variables of `environ`, resolved."""
    resolved: dict[str, str] = {}
    for name, path in environ.items():
        if not (name.startswith(prefix) and name.endswith(SECRET_FILE_SUFFIXES)):
            continue
        target = name.removesuffix("_FILE")
        if target in environ:
            raise CliError(f"set {target} or {name}, not both")
        try:
            value = Path(path).read_text().strip()
        except OSError as exc:
            raise CliError(f"{name}: cannot read {path}: {exc.strerror}") from None
        if not value:
            raise CliError(f"{name}: {path} is empty")
        resolved[target] = value
    return resolved


def cmd_serve(args: argparse.Namespace) -> int:
    """Run one service in the foreground, configured by its SAGG_<SERVICE>_* environment."""
    module, prefix = SERVE_MODULES[args.service]
    os.environ.update(secrets_from_files(dict(os.environ), prefix))
    database_var = (
        # The joint token issuer has two stores; --database-url names the issuer's.
        "ISSUER_DATABASE_URL" if args.service == "token-issuer" else "DATABASE_URL"
    )
    for flag, name in (
        (args.host, "HOST"),
        (args.port, "PORT"),
        (args.database_url, database_var),
    ):
        if flag is not None:
            os.environ[prefix + name] = str(flag)
    sys.argv = [module]
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    except SystemExit as exc:
        return int(exc.code) if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    return 0


def cmd_up(args: argparse.Namespace) -> int:
    if args.store == "postgres" and not args.postgres_url:
        raise CliError("--store postgres needs --postgres-url")
    options = UpOptions(
        data_dir=Path(args.data_dir),
        host=args.host,
        leader_port=args.leader_port,
        helper_port=args.helper_port,
        collector_port=args.collector_port,
        token_issuer_port=args.token_issuer_port,
        recipe_server_port=args.recipe_server_port,
        store=args.store,
        postgres_url=args.postgres_url,
        startup_timeout=args.startup_timeout,
        tls=args.tls,
    )
    cluster = Cluster(options)
    deployment = cluster.start()
    try:
        print(f"leader         {deployment.leader}")
        print(f"helper         {deployment.helper}")
        print(f"collector      {deployment.collector}")
        print(f"token-issuer   {deployment.token_issuer}")
        print(f"recipe-server  {deployment.recipe_server}")
        print(f"recipe key     {deployment.recipe_server_public_key}")
        if deployment.tls_ca_file:
            print(f"TLS CA         {deployment.tls_ca_file}")
        print(f"deployment     {cluster.deployment_path} (tokens inside; mode 0600)")
        print(f"logs           {cluster.data_dir / 'logs'}")
        if args.demo:
            reports = run_demo(
                deployment,
                scale=args.demo_scale,
                out_dir=Path(args.demo_out) if args.demo_out else cluster.data_dir / "demo",
                seed=args.demo_seed,
                only=args.demo_only,
            )
            if args.exit_after_demo:
                return 0 if all(r.passed for r in reports) else EXIT_ERROR
        elif args.exit_after_demo:
            return 0
        print("running; Ctrl-C to stop", flush=True)
        reason = wait_for_shutdown(cluster)
        print(f"stopping ({reason})", file=sys.stderr)
        return 0 if reason in ("SIGINT", "SIGTERM", "interrupted") else EXIT_ERROR
    finally:
        cluster.stop()


# --- sagg keys init ---------------------------------------------------------------------------


def cmd_keys_init(args: argparse.Namespace) -> int:
    """Create a deployment's tokens and keys in a directory (the compose `init` service).

    With the service URLs, also write the operator's `deployment.json` there, and two views
    without the operator's tokens: `analyst.json` (plus the analyst token, for `sagg recipe
    publish`) and `devices.json` (no secret: URLs and the pinned recipe key, for device
    simulators). `--db-password` adds a generated PostgreSQL password per role; `--owner` and
    `--db-owner` (an init container running as root) hand the files to the services' user and
    the database servers' password files to PostgreSQL's.
    """
    directory = Path(args.dir)
    try:
        keys = ensure_keys(directory)
        for role in args.db_password:
            ensure_db_password(directory, role)
        pinned = ensure_pinned_keys_placeholder(directory)
    except (OSError, KeysError) as exc:
        raise CliError(f"keys in {directory}: {exc}") from None
    written = [admin_token_file(directory, s).name for s in ADMIN_TOKEN_SERVICES]
    written += [provisioner_token_file(directory, p).name for p in PROVISIONED_PARTIES]
    written += ["analyst_token", "recipe-server.key", "manufacturer-ca.pem", "manufacturer-ca.key"]
    written += [datastore_key_file(directory, s).name for s in DATASTORE_KEY_SERVICES]
    for role in args.db_password:
        written += [db_password_file(directory, role).name, pgpass_file(directory, role).name]
    written.append(str(pinned.relative_to(directory)))
    urls = {r: getattr(args, r.replace("-", "_")) for r in DEFAULT_PORTS}
    if any(urls.values()):
        missing = [r for r, u in urls.items() if not u]
        if missing:
            raise CliError(f"deployment.json needs every URL; missing --{', --'.join(missing)}")
        deployment = Deployment(
            leader=urls["leader"],
            helper=urls["helper"],
            collector=urls["collector"],
            token_issuer=urls["token-issuer"],
            recipe_server=urls["recipe-server"],
            admin_tokens=keys.admin_tokens,
            analyst_token=keys.analyst_token,
            recipe_server_public_key=keys.recipe_public_key,
            recipe_server_key_id=keys.recipe_key_id,
            manufacturer_ca_cert=str(keys.ca_cert_file),
            manufacturer_ca_key=str(keys.ca_key_file),
            data_dir=str(directory),
        )
        write_deployment(directory / "deployment.json", deployment)
        public = deployment.model_copy(
            update={"admin_tokens": {}, "manufacturer_ca_cert": None, "manufacturer_ca_key": None}
        )
        write_deployment(directory / "analyst.json", public)
        write_deployment(
            directory / "devices.json", public.model_copy(update={"analyst_token": None})
        )
        written += ["deployment.json", "analyst.json", "devices.json"]
    if args.owner is not None:
        _hand_over(directory, args.owner, args.db_owner or args.owner)
    print(f"{directory}: {', '.join(written)} (secrets mode 0600)")
    print(f"recipe server public key {keys.recipe_public_key}")
    return 0


def _owner(text: str) -> tuple[int, int]:
    uid, _, gid = text.partition(":")
    try:
        return int(uid), int(gid or uid)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not UID[:GID]: {text!r}") from None


def _hand_over(directory: Path, owner: tuple[int, int], db_owner: tuple[int, int]) -> None:
    """chown the directory and its files: a database's password to the database server's user,
    everything else to the services' (the files stay 0600, so only that user reads them)."""
    try:
        os.chown(directory, *owner)
        directory.chmod(0o700)
        for path in directory.iterdir():
            os.chown(path, *(db_owner if path.name.endswith(".db_password") else owner))
            if path.is_dir() and not path.is_symlink():  # the `token-keys` step's pins
                for inner in path.iterdir():
                    os.chown(inner, *owner)
    except OSError as exc:
        raise CliError(f"cannot hand {directory} over: {exc.strerror}") from None


def cmd_keys_pin_issuer(args: argparse.Namespace) -> int:
    """Write the running token issuer's key ids to `<dir>/token-key-ids` (the compose
    `token-keys` step: the recipe server pins them into every recipe)."""
    try:
        with _http(args, None, 10.0) as http:
            ids = pin_issuer_keys(Path(args.dir), args.token_issuer, http)
    except (OSError, KeysError) as exc:
        raise CliError(f"pinning the issuer's keys: {exc}") from None
    print(f"{args.dir}: token-key-ids pins {len(ids)} key(s) of {args.token_issuer}")
    return 0


# --- sagg privacy -----------------------------------------------------------------------------


def cmd_privacy(args: argparse.Namespace) -> int:
    try:
        if args.privacy_command == "amplification":
            answer = privacy.amplification(
                args.eps0, args.n, args.delta, deletion=args.deletion, analysis=args.analysis
            )
        elif args.privacy_command == "batch-size":
            answer = privacy.batch_size(
                args.eps0, args.eps, args.delta, deletion=args.deletion, analysis=args.analysis
            )
        elif args.privacy_command == "sampling":
            answer = privacy.sampling(args.eps, args.q, args.delta)
        else:
            answer = privacy.gaussian_sigma(
                args.eps, args.delta, args.sensitivity, args.aggregators
            )
    except (ValueError, OverflowError, ArithmeticError) as exc:
        raise CliError(f"privacy {args.privacy_command}: {exc}") from None
    print(json.dumps(answer.document) if args.json else answer.text())
    return 0


def _finite(low: float, high: float, *, low_open: bool, high_open: bool, what: str) -> Any:
    """An argparse type: a finite float in the interval; the message names the interval."""
    left, right = "(" if low_open else "[", ")" if high_open else "]"

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
        too_low = value <= low if low_open else value < low
        too_high = value >= high if high_open else value > high
        if math.isnan(value) or too_low or too_high:
            bound = f"{left}{low:g}, {high:g}{right}"
            raise argparse.ArgumentTypeError(f"{what} must be in {bound}: {text!r}")
        return value

    return parse


_POSITIVE = _finite(0.0, float("inf"), low_open=True, high_open=True, what="value")
_PROBABILITY = _finite(0.0, 1.0, low_open=True, high_open=True, what="delta")
_RATE = _finite(0.0, 1.0, low_open=True, high_open=False, what="q")
_DELTA_OR_ZERO = _finite(0.0, 1.0, low_open=False, high_open=True, what="delta")


# --- sagg recipe ------------------------------------------------------------------------------


def _recipe_server(args: argparse.Namespace, deployment: Deployment | None) -> str:
    url = _url(args.recipe_server, "SAGG_RECIPE_SERVER_URL", deployment, "recipe_server")
    if url is None:
        raise CliError("no recipe server URL: pass --recipe-server or run `sagg up` first")
    return url


def cmd_recipe_publish(args: argparse.Namespace) -> int:
    deployment = _deployment(args)
    server = _recipe_server(args, deployment)
    token = os.environ.get("SAGG_ANALYST_TOKEN") or (
        deployment.analyst_token if deployment else None
    )
    if not token:
        raise CliError("no analyst token: set SAGG_ANALYST_TOKEN or run `sagg up` first")
    draft = load_draft(args.file)
    # Verify the answer against the key the deployment pins, unless the server was overridden.
    pinned = None
    if (
        deployment is not None
        and deployment.recipe_server is not None
        and server.rstrip("/") == deployment.recipe_server.rstrip("/")
    ):
        pinned = deployment.recipe_server_public_key
    with _http(args, deployment, 60.0) as http:
        summary = publish_recipe(server, token, draft, public_key=pinned, http=http)
    print(json.dumps(summary, indent=2))
    return 0


def cmd_recipe_list(args: argparse.Namespace) -> int:
    deployment = _deployment(args)
    with _http(args, deployment, 30.0) as http:
        listing = list_recipes(_recipe_server(args, deployment), http=http)
    print(json.dumps(listing, indent=2) if args.json else format_listing(listing))
    return 0


# --- parser -----------------------------------------------------------------------------------


def _subcommand(parser: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser | None:
    """The `name` subcommand parser of `parser`, if it has one."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            found = action.choices.get(name)
            return found if isinstance(found, argparse.ArgumentParser) else None
    return None


#: `sagg devices run`'s own default, when neither a flag nor a deployment file names the server.
_DEVICES_DEFAULT_RECIPE_SERVER = f"http://127.0.0.1:{DEFAULT_PORTS['recipe-server']}"


def _devices_defaults(args: argparse.Namespace) -> None:
    """Fill what `sagg devices run` was not told from the deployment: the recipe server, its
    public key (pinned, rather than trusted on first use from GET /keys), the leader, helper
    and token issuer the devices trust, and the manufacturer CA that certifies them."""
    deployment = _deployment(args)
    server = _url(args.recipe_server, "SAGG_RECIPE_SERVER_URL", deployment, "recipe_server")
    args.recipe_server = server or _DEVICES_DEFAULT_RECIPE_SERVER
    # Its own --ca-file wins over `sagg --ca-file`, SAGG_CA_FILE and the deployment file.
    policy = _transport(args, deployment)
    if args.ca_file is None:
        args.ca_file = policy.ca_file
    args.allow_insecure_http = args.allow_insecure_http or policy.allow_insecure_http
    if deployment is None:
        return
    same_server = (deployment.recipe_server or "").rstrip("/") == args.recipe_server.rstrip("/")
    if args.recipe_key is None and same_server:
        args.recipe_key = deployment.recipe_server_public_key
    if args.policy is None and same_server:
        for name, url in (
            ("leader", deployment.leader),
            ("helper", deployment.helper),
            ("token_issuer", deployment.token_issuer),
        ):
            if not getattr(args, name) and url:
                setattr(args, name, [url])
    if (
        not args.no_tokens
        and args.manufacturer_ca is None
        and args.manufacturer_key is None
        and deployment.manufacturer_ca_cert
        and deployment.manufacturer_ca_key
    ):
        args.manufacturer_ca = Path(deployment.manufacturer_ca_cert)
        args.manufacturer_key = Path(deployment.manufacturer_ca_key)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="sagg", description="sagg: private aggregation with DAP-09 and Prio3")
    parser.add_argument("--deployment", help="deployment file (default .data/deployment.json)")
    parser.add_argument(
        "--ca-file",
        dest="global_ca_file",
        metavar="PEM",
        help="CAs to verify the services' HTTPS certificates with (default: SAGG_CA_FILE, "
        "the deployment file's tls_ca_file, else the system's)",
    )
    parser.add_argument(
        "--allow-insecure-http",
        dest="global_allow_insecure_http",
        action="store_true",
        help="also use plain http:// URLs of hosts other than loopback",
    )
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    up = sub.add_parser(
        "up", help="start leader, helper, collector, token issuer and recipe server locally"
    )
    up.add_argument("--data-dir", default=str(DEFAULT_DATA_DIR))
    up.add_argument("--host", default="127.0.0.1")
    for name, port in DEFAULT_PORTS.items():
        up.add_argument(f"--{name}-port", type=int, default=port)
    up.add_argument("--store", choices=("sqlite", "postgres"), default="sqlite")
    up.add_argument("--postgres-url", help="postgresql://user@host:port/basename")
    up.add_argument("--startup-timeout", type=_seconds, default=60.0)
    up.add_argument(
        "--tls",
        action="store_true",
        help="serve HTTPS with certificates from a local CA (DATA_DIR/tls/ca.pem), which the "
        "deployment file names for every client",
    )
    up.add_argument(
        "--demo",
        action="store_true",
        help="run the papers' analyses through every service (README: what make demo shows)",
    )
    up.add_argument(
        "--demo-scale",
        choices=tuple(SCALES),
        default="full",
        help="full: epsilon 1 per collection; small: epsilon 1.5, far fewer devices (tests)",
    )
    up.add_argument("--demo-out", metavar="DIR", help="charts and CSV (default DATA_DIR/demo)")
    up.add_argument("--demo-seed", type=int, default=0, help="seed of the synthetic data")
    up.add_argument(
        "--demo-only",
        type=_analysis_list,
        metavar="A,B",
        help=f"only these analyses, of {','.join(ANALYSES)}",
    )
    up.add_argument(
        "--exit-after-demo",
        action="store_true",
        help="stop the services once the demo is done (exit 1 if an analysis fails)",
    )
    up.set_defaults(func=cmd_up)

    serve = sub.add_parser("serve", help="run one service in the foreground")
    serve.add_argument("service", choices=tuple(SERVE_MODULES))
    serve.add_argument("--host")
    serve.add_argument("--port", type=int)
    serve.add_argument("--database-url")
    serve.set_defaults(func=cmd_serve)

    task = sub.add_parser("task", help="manage tasks")
    task_sub = task.add_subparsers(dest="task_command", required=True, parser_class=_Parser)
    create = task_sub.add_parser("create", help="create a task on collector, leader and helper")
    create.add_argument("--config", help="TOML or JSON file with the same settings as the flags")
    create.add_argument(
        "--vdaf", help='e.g. \'{"type":"Prio3Histogram","length":4,"chunk_length":2}\''
    )
    create.add_argument("--query-type", choices=("time_interval", "fixed_size"))
    create.add_argument("--min-batch-size", type=_positive)
    create.add_argument("--max-batch-size", type=_positive)
    create.add_argument("--time-precision", type=_positive)
    create.add_argument("--max-batch-query-count", type=_positive)
    create.add_argument("--expires-in", type=_positive, help="seconds from now")
    create.add_argument(
        "--report-expiry-age",
        type=_positive,
        help="seconds after which reports are refused and their data deleted",
    )
    create.add_argument(
        "--expected-reports-per-bucket",
        type=_positive,
        metavar="R",
        help="rate validation (001 §4.8): reports expected per time_precision bucket",
    )
    create.add_argument(
        "--max-multiple",
        type=_POSITIVE,
        metavar="M",
        help="refuse batches with a bucket above M x R reports (default 2)",
    )
    create.add_argument(
        "--aggregator-noise",
        metavar="JSON",
        help='noise each aggregator adds (004 §5), e.g. \'{"mechanism":"discrete_gaussian",'
        '"sigma":"8.5402"}\'',
    )
    create.add_argument("--leader")
    create.add_argument("--helper")
    create.add_argument("--collector")
    create.set_defaults(func=cmd_task_create)

    upload = sub.add_parser("upload", help="shard, encrypt and upload reports (a DAP client)")
    upload.add_argument("--task-file", required=True, help="JSON printed by `sagg task create`")
    what = upload.add_mutually_exclusive_group(required=True)
    what.add_argument("--measurements", help="JSON array, e.g. [0,3,1]")
    what.add_argument("--random", type=_positive, metavar="N", help="N random measurements")
    upload.add_argument("--seed", type=int, help="seed for --random")
    upload.add_argument("--time", type=_epoch, help="report time (default now)")
    upload.set_defaults(func=cmd_upload)

    collect = sub.add_parser("collect", help="collect a batch and print the aggregate")
    collect.add_argument("--task", required=True, help="task id (base64url)")
    group = collect.add_mutually_exclusive_group()
    group.add_argument("--batch-id")
    group.add_argument("--current-batch", action="store_true")
    collect.add_argument("--interval-start", type=_epoch, help="epoch seconds or ISO 8601")
    collect.add_argument("--interval-duration", type=_positive, help="seconds")
    collect.add_argument("--collector")
    collect.add_argument("--format", choices=("table", "json", "csv"), default="table")
    collect.add_argument("--wait", type=_seconds, default=60.0, help="seconds to wait for it")
    collect.add_argument(
        "--recipe", help="analyse with this recipe: debiased estimates, CIs, privacy statement"
    )
    collect.add_argument("--recipe-version", type=_positive)
    collect.add_argument("--recipe-server", metavar="URL")
    collect.add_argument("--confidence", type=_confidence, default=0.95)
    collect.add_argument("--chart", metavar="PNG", help="with --recipe: write a chart here")
    collect.set_defaults(func=cmd_collect)

    keys = sub.add_parser("keys", help="deployment secrets and keys")
    keys_sub = keys.add_subparsers(dest="keys_command", required=True, parser_class=_Parser)
    init = keys_sub.add_parser("init", help="create tokens, recipe key and manufacturer CA")
    init.add_argument("--dir", required=True, help="directory to keep them in")
    for name in DEFAULT_PORTS:
        init.add_argument(f"--{name}", metavar="URL", help=f"{name} URL for deployment.json")
    init.add_argument(
        "--db-password",
        metavar="ROLE",
        action="append",
        default=[],
        help="also generate a PostgreSQL password for ROLE (ROLE.db_password, ROLE.pgpass)",
    )
    init.add_argument("--owner", type=_owner, metavar="UID[:GID]", help="chown the files to")
    init.add_argument(
        "--db-owner", type=_owner, metavar="UID[:GID]", help="chown *.db_password files to"
    )
    init.set_defaults(func=cmd_keys_init)
    pin = keys_sub.add_parser("pin-issuer", help="pin the token issuer's current key ids")
    pin.add_argument("--dir", required=True, help="the keys directory")
    pin.add_argument("--token-issuer", required=True, metavar="URL")
    pin.set_defaults(func=cmd_keys_pin_issuer)

    priv = sub.add_parser("privacy", help="privacy accounting (shared.dp)")
    priv_sub = priv.add_subparsers(dest="privacy_command", required=True, parser_class=_Parser)
    analyses = get_args(Analysis)
    amp = priv_sub.add_parser("amplification", help="(eps, delta) of n aggregated eps0-LDP reports")
    amp.add_argument("--eps0", type=_POSITIVE, required=True, help="local epsilon per report")
    amp.add_argument("--n", type=_positive, required=True, help="number of reports")
    amp.add_argument("--delta", type=_PROBABILITY, required=True)
    bsz = priv_sub.add_parser("batch-size", help="smallest batch for an aggregate (eps, delta)")
    bsz.add_argument("--eps0", type=_POSITIVE, required=True, help="local epsilon per report")
    bsz.add_argument("--eps", type=_POSITIVE, required=True, help="aggregate epsilon")
    bsz.add_argument("--delta", type=_PROBABILITY, required=True)
    for command in (amp, bsz):
        command.add_argument(
            "--deletion", action="store_true", help="eps0 is a deletion-model bound"
        )
        command.add_argument("--analysis", choices=analyses, default="stronger_clones")
    smp = priv_sub.add_parser("sampling", help="amplification by Poisson sampling at rate q")
    smp.add_argument("--eps", type=_POSITIVE, required=True)
    smp.add_argument("--q", type=_RATE, required=True, help="sampling rate in (0, 1]")
    smp.add_argument("--delta", type=_DELTA_OR_ZERO, default=0.0)
    gss = priv_sub.add_parser("gaussian-sigma", help="noise sigma of the analytic Gaussian")
    gss.add_argument("--eps", type=_POSITIVE, required=True)
    gss.add_argument("--delta", type=_PROBABILITY, required=True)
    gss.add_argument("--sensitivity", type=_POSITIVE, required=True, help="L2 sensitivity")
    gss.add_argument("--aggregators", type=_positive, default=1, help="honest aggregators")
    for command in (amp, bsz, smp, gss):
        command.add_argument("--json", action="store_true", help="one JSON object")
        command.set_defaults(func=cmd_privacy)

    recipe = sub.add_parser("recipe", help="publish and list recipes")
    recipe_sub = recipe.add_subparsers(dest="recipe_command", required=True, parser_class=_Parser)
    publish = recipe_sub.add_parser("publish", help="publish a RecipeDraft (JSON or TOML)")
    publish.add_argument("file")
    publish.add_argument("--recipe-server", metavar="URL")
    publish.set_defaults(func=cmd_recipe_publish)
    listing = recipe_sub.add_parser("list", help="the recipes in the server's log")
    listing.add_argument("--recipe-server", metavar="URL")
    listing.add_argument("--json", action="store_true")
    listing.set_defaults(func=cmd_recipe_list)

    # Owned by deploy/interop: the DAP interop test API roles (`sagg interop ROLE --port P`).
    add_interop_parser(sub)
    # Owned by client_sdk: `sagg devices run ...`; its defaults come from the deployment file.
    # (Its signature names plain ArgumentParser subparsers; ours make `_Parser`s, a subclass.)
    add_devices_parser(cast("argparse._SubParsersAction[argparse.ArgumentParser]", sub))
    devices_run = _subcommand(sub.choices["devices"], "run")
    if devices_run is not None:
        devices_run.set_defaults(recipe_server=None)
    return parser


#: Options whose value is a DAP id (32 bytes, 43 base64url characters): 1 in 64 ids begins
#: with "-", which argparse would take for an option, so such a value is attached to its
#: option (``--task=-AbC...``) before parsing.
ID_OPTIONS = ("--task", "--batch-id")
_DAP_ID = re.compile(r"[A-Za-z0-9_-]{43}")


def attach_id_values(argv: Sequence[str]) -> list[str]:
    out: list[str] = []
    for arg in argv:
        if out and out[-1] in ID_OPTIONS and _DAP_ID.fullmatch(arg):
            out[-1] = f"{out[-1]}={arg}"
        else:
            out.append(arg)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(attach_id_values(sys.argv[1:] if argv is None else argv))
    if (
        args.command == "collect"
        and (args.batch_id or args.current_batch)
        and (args.interval_start is not None or args.interval_duration is not None)
    ):
        parser.error("--interval-start/--interval-duration cannot be combined with a batch query")
    try:
        if args.command == "devices" and getattr(args, "devices_command", None) == "run":
            _devices_defaults(args)
        code: int = args.func(args)
        return code
    except (
        CliError,
        CollectError,
        ProvisionError,
        UploadError,
        LaunchError,
        RecipeError,
        KeysError,
        DemoError,
    ) as exc:
        print(f"sagg: {exc}", file=sys.stderr)
    except httpx.HTTPError as exc:  # `sagg devices run` reaching no server, e.g. TLS refused
        print(f"sagg: HTTP request failed: {http_failure(exc)}", file=sys.stderr)
    except KeyboardInterrupt:
        print("sagg: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # a bug: still one line, and the type names it for a report
        print(f"sagg: internal error: {type(exc).__name__}: {exc}", file=sys.stderr)
    return EXIT_ERROR


if __name__ == "__main__":
    sys.exit(main())
