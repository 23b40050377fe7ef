"""`sagg`: the command line (Typer; one module per command group).

    sagg [--deployment F] [--ca-file PEM] [--allow-insecure-http] COMMAND ...
    sagg up [--data-dir D] [--leader-port P ...] [--store sqlite|postgres --postgres-url U] [--tls]
            [--demo [--demo-scale full|small] [--demo-out DIR] [--demo-seed N] [--demo-only A,B]
             [--exit-after-demo]]                                              (up.py)
    sagg serve aggregator|collector|token-issuer|recipe-server [--host H --port P
                                                                --database-url U]  (up.py)
    sagg keys init --dir D [--leader U ... --recipe-server U] | pin-issuer    (keys.py)
    sagg task create --vdaf JSON ... | --config FILE                          (task.py)
    sagg upload --task-file FILE (--measurements JSON | --random N [--seed S]) (task.py)
    sagg collect --task ID (--interval-start S --interval-duration D | --batch-id B |
                            --current-batch) [--format table|json|csv]        (collect.py)
    sagg privacy amplification|batch-size|sampling|gaussian-sigma ...          (privacy.py)
    sagg recipe publish FILE | list                                           (recipe.py)
    sagg interop aggregator|collector|client --port P      (deploy/interop/cli.py)
    sagg devices run --recipe ID [--count N ...]            (client_sdk/cli.py, devices.py)

Every failure is one line on stderr and a non-zero exit status, no traceback (`errors.py`).
An option's value is the next word even when it begins with "-" (1 in 64 DAP ids do).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Annotated

import typer

from client_sdk.cli import AllowInsecureHttp
from deploy.cli import collect, devices, keys, privacy, recipe, task, up
from deploy.cli.common import GLOBAL_OPTIONS, GlobalOptions
from deploy.cli.errors import run
from deploy.interop.cli import interop

__all__ = ["app", "main"]

app = typer.Typer(
    help="sagg: private aggregation with DAP (drafts 09 and 19) and Prio3 (VDAF-08 and VDAF-20)",
    add_completion=False,
    pretty_exceptions_enable=False,
)


_DEPLOYMENT_HELP = "deployment file (default .data/deployment.json)"
_CA_HELP = (
    "CAs to verify the services' HTTPS certificates with (default: SAGG_CA_FILE, the deployment "
    "file's tls_ca_file, else the system's)"
)


@app.callback()
def _global(
    deployment: Annotated[str | None, typer.Option(help=_DEPLOYMENT_HELP)] = None,
    ca_file: Annotated[str | None, typer.Option(metavar="PEM", help=_CA_HELP)] = None,
    allow_insecure_http: AllowInsecureHttp = False,
) -> None:
    GLOBAL_OPTIONS.set(GlobalOptions(deployment, ca_file, allow_insecure_http))


app.command(help="start leader, helper, collector, token issuer and recipe server locally")(up.up)
app.command(help="run one service in the foreground")(up.serve)
app.add_typer(keys.app, name="keys")
app.add_typer(task.app, name="task")
app.command(help="shard, encrypt and upload reports (a DAP client)")(task.upload)
app.command(help="collect a batch and print the aggregate")(collect.collect)
app.add_typer(privacy.app, name="privacy")
app.add_typer(recipe.app, name="recipe")
app.command(help="serve a DAP interop test API role (interop draft §4)")(interop)
app.add_typer(devices.app, name="devices")


def main(argv: Sequence[str] | None = None) -> int:
    """The `sagg` entry point: the exit status."""
    before = GLOBAL_OPTIONS.set(None)
    try:
        return run(typer.main.get_command(app), sys.argv[1:] if argv is None else argv)
    finally:
        GLOBAL_OPTIONS.reset(before)
