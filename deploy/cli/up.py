"""``sagg up`` (the whole deployment on loopback, `deploy.launcher`, optionally the demo) and
``sagg serve SERVICE`` (one service in the foreground: the compose file's entry point)."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Annotated, Any, Literal

import typer

from deploy.cli.common import SECONDS, CliError
from deploy.cli.errors import EXIT_ERROR
from deploy.config import DEFAULT_DATA_DIR
from deploy.demo import ANALYSES, run_demo
from deploy.launcher import DEFAULT_PORTS, Cluster, UpOptions, wait_for_shutdown
from services.aggregator.settings import AggregatorSettings
from services.collector.settings import CollectorSettings
from services.common.entry import service_main
from services.recipe_server.settings import RecipeServerSettings
from services.token_issuer.settings import TokenIssuerSettings

__all__ = ["SERVE_MODULES", "serve", "up"]

#: `sagg serve` name -> (module whose `__main__.serve(settings)` runs the service, its
#: settings, the setting `--database-url` sets: the joint token issuer has two stores, and
#: the flag names the issuer's).
SERVE_MODULES: dict[str, tuple[str, type[Any], str]] = {
    "aggregator": ("services.aggregator", AggregatorSettings, "database_url"),
    "collector": ("services.collector", CollectorSettings, "database_url"),
    "token-issuer": ("services.token_issuer", TokenIssuerSettings, "issuer_database_url"),
    "recipe-server": ("services.recipe_server", RecipeServerSettings, "database_url"),
}


def serve(
    service: Annotated[
        Literal["aggregator", "collector", "token-issuer", "recipe-server"], typer.Argument()
    ],
    host: Annotated[str | None, typer.Option()] = None,
    port: Annotated[int | None, typer.Option(min=0, max=65535)] = None,
    database_url: Annotated[str | None, typer.Option(metavar="URL")] = None,
) -> int:
    """Run one service in the foreground, configured by its SAGG_<SERVICE>_* environment (and
    `..._FILE` secrets); the flags override it."""
    module, settings, database = SERVE_MODULES[service]
    flags = {"host": host, "port": port, database: database_url}
    overrides = {name: value for name, value in flags.items() if value is not None}
    run = importlib.import_module(f"{module}.__main__").serve
    return service_main(settings, service, run, **overrides)


def _analyses(value: str | None) -> str | None:
    if value is None:
        return None
    names = [n.strip() for n in value.split(",") if n.strip()]
    if not names or any(n not in ANALYSES for n in names):
        raise typer.BadParameter(
            f"analyses are a comma-separated subset of {','.join(ANALYSES)}: {value!r}"
        )
    return ",".join(names)


Port = Annotated[int, typer.Option(min=0, max=65535)]


def up(
    data_dir: Annotated[Path, typer.Option()] = DEFAULT_DATA_DIR,
    host: Annotated[str, typer.Option()] = "127.0.0.1",
    leader_port: Port = DEFAULT_PORTS["leader"],
    helper_port: Port = DEFAULT_PORTS["helper"],
    collector_port: Port = DEFAULT_PORTS["collector"],
    token_issuer_port: Port = DEFAULT_PORTS["token-issuer"],
    recipe_server_port: Port = DEFAULT_PORTS["recipe-server"],
    store: Annotated[Literal["sqlite", "postgres"], typer.Option()] = "sqlite",
    postgres_url: Annotated[
        str | None, typer.Option(help="postgresql://user@host:port/basename")
    ] = None,
    startup_timeout: Annotated[float, typer.Option(parser=SECONDS)] = 60.0,
    token_issuer_workers: Annotated[
        int,
        typer.Option(
            min=1,
            max=64,
            help="processes of the token issuer on its stores (blind signing is CPU-bound)",
        ),
    ] = 1,
    taskprov: Annotated[
        bool,
        typer.Option(
            "--taskprov",
            help="the aggregators opt into DAP-19 tasks a DAP-Taskprov header announces, with "
            "secrets from DATA_DIR/keys (`sagg task create --dap 19 --taskprov` makes such tasks)",
        ),
    ] = False,
    tls: Annotated[
        bool,
        typer.Option(
            "--tls",
            help="serve HTTPS with certificates from a local CA (DATA_DIR/tls/ca.pem), which "
            "the deployment file names for every client",
        ),
    ] = False,
    demo: Annotated[
        bool,
        typer.Option(
            "--demo",
            help="run the papers' analyses through every service (README: what make demo shows)",
        ),
    ] = False,
    demo_scale: Annotated[
        Literal["full", "small", "large"],
        typer.Option(
            help="full: epsilon 1 per collection; small: epsilon 1.5, far fewer devices (tests); "
            "large: 10^5 devices streamed through the emoji analysis, epsilon 0.05"
        ),
    ] = "full",
    demo_out: Annotated[
        Path | None, typer.Option(metavar="DIR", help="charts and CSV (default DATA_DIR/demo)")
    ] = None,
    demo_seed: Annotated[int, typer.Option(help="seed of the synthetic data")] = 0,
    demo_only: Annotated[
        str | None,
        typer.Option(
            callback=_analyses, metavar="A,B", help=f"only these analyses, of {','.join(ANALYSES)}"
        ),
    ] = None,
    exit_after_demo: Annotated[
        bool,
        typer.Option(
            "--exit-after-demo",
            help="stop the services once the demo is done (exit 1 if an analysis fails)",
        ),
    ] = False,
) -> int:
    """Start leader, helper, collector, token issuer and recipe server locally."""
    if store == "postgres" and not postgres_url:
        raise CliError("--store postgres needs --postgres-url")
    cluster = Cluster(
        UpOptions(
            data_dir=data_dir,
            host=host,
            leader_port=leader_port,
            helper_port=helper_port,
            collector_port=collector_port,
            token_issuer_port=token_issuer_port,
            recipe_server_port=recipe_server_port,
            store=store,
            postgres_url=postgres_url,
            startup_timeout=startup_timeout,
            tls=tls,
            token_issuer_workers=token_issuer_workers,
            taskprov=taskprov,
        )
    )
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
        if demo:
            reports = run_demo(
                deployment,
                scale=demo_scale,
                out_dir=demo_out or cluster.data_dir / "demo",
                seed=demo_seed,
                only=demo_only.split(",") if demo_only else None,
            )
            if exit_after_demo:
                return 0 if all(r.passed for r in reports) else EXIT_ERROR
        elif exit_after_demo:
            return 0
        print("running; Ctrl-C to stop", flush=True)
        reason = wait_for_shutdown(cluster)
        print(f"stopping ({reason})", file=sys.stderr)
        return 0 if reason in ("SIGINT", "SIGTERM", "interrupted") else EXIT_ERROR
    finally:
        cluster.stop()
