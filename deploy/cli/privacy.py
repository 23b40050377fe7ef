"""``sagg privacy ...``: the accounting of `shared.dp` (`deploy.privacy` explains each number)."""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import partial
from typing import Annotated

import typer

from deploy import privacy
from deploy.cli.common import POSITIVE, CliError, finite
from shared.dp.amplification import Analysis

__all__ = ["app"]

app = typer.Typer(help="privacy accounting (shared.dp)")

_PROBABILITY = finite(0.0, 1.0, low_open=True, high_open=True, what="delta")
_RATE = finite(0.0, 1.0, low_open=True, high_open=False, what="q")
_DELTA_OR_ZERO = finite(0.0, 1.0, low_open=False, high_open=True, what="delta")

Eps0 = Annotated[float, typer.Option(parser=POSITIVE, help="local epsilon per report")]
Eps = Annotated[float, typer.Option(parser=POSITIVE, help="aggregate epsilon")]
Delta = Annotated[float, typer.Option(parser=_PROBABILITY)]
Deletion = Annotated[bool, typer.Option("--deletion", help="eps0 is a deletion-model bound")]
AnalysisOption = Annotated[Analysis, typer.Option()]
Json = Annotated[bool, typer.Option("--json", help="one JSON object")]


def _answer(command: str, as_json: bool, compute: Callable[[], privacy.Answer]) -> None:
    try:
        answer = compute()
    except (ValueError, OverflowError, ArithmeticError) as exc:
        raise CliError(f"privacy {command}: {exc}") from None
    print(json.dumps(answer.document) if as_json else answer.text())


@app.command()
def amplification(
    eps0: Eps0,
    n: Annotated[int, typer.Option(min=1, help="number of reports")],
    delta: Delta,
    deletion: Deletion = False,
    analysis: AnalysisOption = "stronger_clones",
    as_json: Json = False,
) -> None:
    """(eps, delta) of n aggregated eps0-LDP reports."""
    compute = partial(privacy.amplification, eps0, n, delta, deletion=deletion, analysis=analysis)
    _answer("amplification", as_json, compute)


@app.command("batch-size")
def batch_size(
    eps0: Eps0,
    eps: Eps,
    delta: Delta,
    analysis: AnalysisOption = "stronger_clones",
    deletion: Deletion = False,
    as_json: Json = False,
) -> None:
    """The smallest batch for an aggregate (eps, delta)."""
    compute = partial(privacy.batch_size, eps0, eps, delta, deletion=deletion, analysis=analysis)
    _answer("batch-size", as_json, compute)


@app.command()
def sampling(
    eps: Eps,
    q: Annotated[float, typer.Option(parser=_RATE, help="sampling rate in (0, 1]")],
    delta: Annotated[float, typer.Option(parser=_DELTA_OR_ZERO)] = 0.0,
    as_json: Json = False,
) -> None:
    """Amplification by Poisson sampling at rate q."""
    _answer("sampling", as_json, partial(privacy.sampling, eps, q, delta))


@app.command("gaussian-sigma")
def gaussian_sigma(
    eps: Eps,
    delta: Delta,
    sensitivity: Annotated[float, typer.Option(parser=POSITIVE, help="L2 sensitivity")],
    aggregators: Annotated[int, typer.Option(min=1, help="honest aggregators")] = 1,
    as_json: Json = False,
) -> None:
    """The noise sigma of the analytic Gaussian mechanism."""
    compute = partial(privacy.gaussian_sigma, eps, delta, sensitivity, aggregators)
    _answer("gaussian-sigma", as_json, compute)
