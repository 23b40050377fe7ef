"""What every benchmark reports: rows of one summary table, printed by `python -m bench`."""

from __future__ import annotations

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
    header = ("bench", "case", "metric", "value", "unit")
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows, strict=True)]
    print(f"\n{title}")
    line = "  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True))
    print(line)
    print("-" * len(line))
    for row in rows:
        cells = [
            c.rjust(w) if i == 3 else c.ljust(w)
            for i, (c, w) in enumerate(zip(row, widths, strict=True))
        ]
        print("  ".join(cells))


def _fmt(value: float) -> str:
    if value >= 100:
        return f"{value:,.0f}"
    if value >= 1:
        return f"{value:.2f}"
    return f"{value:.4f}"
