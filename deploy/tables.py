"""Tables the `sagg` commands print, drawn by Rich: aligned columns under a rule, the same on a
terminal as in a pipe or a log file (no colour, no width limit, so nothing wraps)."""

from __future__ import annotations

import io
from collections.abc import Iterable, Sequence

from rich import box
from rich.console import Console
from rich.table import Table

__all__ = ["table_text"]


def table_text(
    headers: Sequence[str], rows: Iterable[Sequence[object]], *, right: Sequence[int] = ()
) -> str:
    """`rows` under `headers`, one line each; the columns at indices `right` right-aligned."""
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False)
    for i, header in enumerate(headers):
        table.add_column(header, justify="right" if i in right else "left", no_wrap=True)
    for row in rows:
        table.add_row(*(str(cell) for cell in row))
    out = io.StringIO()
    Console(file=out, width=10_000, color_system=None, highlight=False).print(table)
    return "\n".join(line.rstrip() for line in out.getvalue().splitlines())
