"""What every benchmark reports: rows of one summary table, printed by `python -m bench`."""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Result:
    """One measured number."""

    bench: str
    case: str
    metric: str
    value: float
    unit: str


def best_of(
    fn: Callable[[], object], repeat: int = 5, timer: Callable[[], float] = time.perf_counter
) -> float:
    """The fastest of `repeat` timed runs of `fn`, in seconds of `timer` (wall clock, or
    `time.process_time` for CPU time): the least disturbed by noise."""
    fn()
    best = float("inf")
    for _ in range(repeat):
        start = timer()
        fn()
        best = min(best, timer() - start)
    return best


def print_table(results: Sequence[Result], title: str) -> None:
    """A fixed-width table of results."""
    rows = [(r.bench, r.case, r.metric, _fmt(r.value), r.unit) for r in results]
    _print_rows(title, ("bench", "case", "metric", "value", "unit"), rows, numeric=range(3, 4))


def _print_rows(
    title: str, header: Sequence[str], rows: Sequence[Sequence[str]], numeric: range
) -> None:
    """`rows` under `header`, columns as wide as their widest cell, `numeric` ones right-aligned."""
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows, strict=True)]
    print(f"\n{title}")
    line = "  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True))
    print(line)
    print("-" * len(line))
    for row in rows:
        cells = [
            c.rjust(w) if i in numeric else c.ljust(w)
            for i, (c, w) in enumerate(zip(row, widths, strict=True))
        ]
        print("  ".join(cells))


@dataclass(frozen=True, slots=True)
class Spread:
    """One metric over repeated runs: what a host whose speed varies from minute to minute
    (this one's does, by a third and more) lets a change be judged by."""

    bench: str
    case: str
    metric: str
    median: float
    low: float
    high: float
    unit: str
    runs: int


def spread(runs: Sequence[Sequence[Result]]) -> list[Spread]:
    """Each metric's median, lowest and highest value over `runs` (the rows of one run each),
    in the first run's order; a metric missing from some runs is summarised over the others."""
    values: dict[tuple[str, str, str, str], list[float]] = {}
    for results in runs:
        for r in results:
            values.setdefault((r.bench, r.case, r.metric, r.unit), []).append(r.value)
    return [
        Spread(bench, case, metric, statistics.median(v), min(v), max(v), unit, len(v))
        for (bench, case, metric, unit), v in values.items()
    ]


def print_spread(spreads: Sequence[Spread], title: str) -> None:
    """A fixed-width table of repeated measurements: median, lowest and highest."""
    rows = [
        (s.bench, s.case, s.metric, _fmt(s.median), _fmt(s.low), _fmt(s.high), s.unit, str(s.runs))
        for s in spreads
    ]
    header = ("bench", "case", "metric", "median", "lowest", "highest", "unit", "runs")
    _print_rows(title, header, rows, numeric=range(3, 6))


def add_repeat_option(parser: argparse.ArgumentParser, what: str) -> None:
    """``--repeat N`` (at least 1): run `what` N times and print each figure's spread."""

    def at_least_one(text: str) -> int:
        value = int(text)
        if value < 1:
            raise argparse.ArgumentTypeError("at least 1")
        return value

    parser.add_argument(
        "--repeat",
        type=at_least_one,
        default=1,
        metavar="N",
        help=f"run {what} N times; print median, lowest, highest",
    )


def print_runs(runs: Sequence[Sequence[Result]], title: str) -> None:
    """One run as its table; several as the spread of each metric over them."""
    if len(runs) == 1:
        print_table(runs[0], title)
    else:
        print_spread(spread(runs), f"{title}, {len(runs)} runs")


def _fmt(value: float) -> str:
    if value >= 100:
        return f"{value:,.0f}"
    if value >= 1:
        return f"{value:.2f}"
    return f"{value:.4f}"
