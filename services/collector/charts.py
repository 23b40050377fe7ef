"""A PNG bar chart of a collection's `Analysis`: estimates with their confidence intervals.

Bars are the debiased estimates (`services.collector.analysis`), error bars the two-sided
intervals at the analysis' confidence level; items below the threshold are drawn pale and
hatched (their value is noise-dominated, module docstring of `analysis`). The optional ground
truth (a simulation or the demo knows it) is drawn as markers, so that coverage can be seen.
The title names the recipe and the OAMC privacy statement of 004 §3.3 for this batch.

The figure is a bare `matplotlib.figure.Figure` on an Agg canvas: no pyplot, so no display, no
global backend switch and no figure registry to leak into the caller (the CLI) or across threads.
"""

from __future__ import annotations

import functools
import textwrap
import unicodedata
from collections.abc import Mapping
from pathlib import Path

# matplotlib is imported when a chart is drawn: it is most of a second of the start of the CLI
# and the demo, which import this module whether or not they draw.
from services.collector.analysis import Analysis, Item

__all__ = ["DEFAULT_MAX_BARS", "write_chart"]

#: More bars than this are unreadable: the chart then shows the largest estimates.
DEFAULT_MAX_BARS = 40


@functools.cache
def _font_codepoints() -> frozenset[int]:
    """The characters the default font draws."""
    from matplotlib import font_manager  # noqa: PLC0415
    from matplotlib.ft2font import FT2Font  # noqa: PLC0415

    path = font_manager.findfont(font_manager.FontProperties())
    return frozenset(FT2Font(path).get_charmap())


def _drawable(label: str) -> str:
    """`label` with every character the font cannot draw (e.g. emoji) spelled by its Unicode
    name, and variation selectors dropped: a chart of emoji counts stays readable."""
    known = _font_codepoints()
    out: list[str] = []
    for ch in label:
        if ord(ch) in known:
            out.append(ch)
        elif unicodedata.category(ch) != "Mn":
            out.append(unicodedata.name(ch, f"U+{ord(ch):04X}").lower())
    return "".join(out)


def _shown(analysis: Analysis, max_bars: int) -> tuple[list[Item], int]:
    items = list(analysis.items)
    if len(items) <= max_bars:
        return items, 0
    order = {id(it): i for i, it in enumerate(items)}
    keep = sorted(items, key=lambda it: -it.estimate)[:max_bars]
    return sorted(keep, key=lambda it: order[id(it)]), len(items) - max_bars


def write_chart(
    analysis: Analysis,
    path: Path,
    truth: Mapping[str, float] | None = None,
    *,
    max_bars: int = DEFAULT_MAX_BARS,
) -> Path:
    """Write the bar chart of `analysis` to `path` (PNG) and return the path.

    `truth`: label -> true value (count, or mean for bit pushing), drawn as markers for the
    labels shown. `max_bars`: at most this many bars (the largest estimates), in item order;
    being selected as the largest, their estimates are biased up (the truth markers show it).
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: PLC0415
    from matplotlib.figure import Figure  # noqa: PLC0415

    items, hidden = _shown(analysis, max_bars)
    # Long labels (multi-feature, n-grams) or many bars read better as horizontal bars, the
    # first item on top; short ones as columns.
    horizontal = len(items) > 20 or max((len(it.label) for it in items), default=0) > 10
    pos = list(range(len(items)))
    if horizontal:
        pos = pos[::-1]
    est = [it.estimate for it in items]
    err = [
        [it.estimate - it.ci_low for it in items],
        [it.ci_high - it.estimate for it in items],
    ]
    if horizontal:
        size = (10.0, min(16.0, max(4.0, 0.3 * len(items) + 2.0)))
    else:
        size = (min(16.0, max(6.0, 0.45 * len(items) + 2.5)), 5.6)
    fig = Figure(figsize=size, dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    colours = ["#c9d4e3" if it.below_threshold else "#3b6ea5" for it in items]
    draw = ax.barh if horizontal else ax.bar
    bars = draw(pos, est, color=colours, edgecolor="#2b4f78", linewidth=0.6)
    for bar, it in zip(bars, items, strict=True):
        if it.below_threshold:
            bar.set_hatch("//")
    ci = f"{100 * analysis.confidence:g}% CI"
    if horizontal:
        ax.errorbar(est, pos, xerr=err, fmt="none", ecolor="#222222", capsize=3, label=ci)
    else:
        ax.errorbar(pos, est, yerr=err, fmt="none", ecolor="#222222", capsize=3, label=ci)
    if truth is not None:
        shown = [
            (p, truth[it.label]) for p, it in zip(pos, items, strict=True) if it.label in truth
        ]
        tp, tv = [p for p, _ in shown], [v for _, v in shown]
        sx, sy = (tv, tp) if horizontal else (tp, tv)
        ax.scatter(sx, sy, marker="D", s=28, color="#d1495b", zorder=3, label="truth")
    if any(it.below_threshold for it in items):
        # An empty patch only to explain the hatching in the legend.
        draw([0], [0], color="#c9d4e3", hatch="//", edgecolor="#2b4f78", label="below threshold")
    labels = [textwrap.shorten(_drawable(it.label), 48, placeholder="...") for it in items]
    value_axis = "estimated mean" if analysis.statistic == "mean" else "estimated count"
    if horizontal:
        ax.axvline(0, color="#888888", linewidth=0.8)
        ax.set_yticks(pos)
        ax.set_yticklabels(labels, fontsize=8)
        ax.set_xlabel(value_axis)
        ax.grid(axis="x", alpha=0.3)
    else:
        ax.axhline(0, color="#888888", linewidth=0.8)
        ax.set_xticks(pos)
        ax.set_xticklabels(labels, fontsize=8)
        ax.set_ylabel(value_axis)
        ax.grid(axis="y", alpha=0.3)
    ax.legend(loc="lower right" if horizontal else "upper right", fontsize=8, frameon=False)
    recipe = (
        f"{analysis.recipe_id} v{analysis.recipe_version}" if analysis.recipe_id else "plain task"
    )
    title = f"{recipe}: {analysis.randomizer}, {analysis.report_count} reports"
    if hidden:
        title += f" (largest {len(items)} of {len(items) + hidden} items)"
    privacy = (
        analysis.privacy.headline() if analysis.privacy else "no privacy statement (raw counts)"
    )
    ax.set_title(f"{title}\n{privacy}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, format="png")
    return path
