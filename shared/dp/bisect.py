"""Threshold search for monotone predicates: every privacy search in `shared.dp` is one.

An accountant asks for the smallest sigma, epsilon or batch size that *passes* a privacy test
(or the largest rho or local epsilon that still passes). The answer must err on the passing side:
a result a hair on the failing side would overstate the guarantee. So the search keeps a bracket
(last failing point, first passing point) and returns the passing end. `scipy.optimize.bisect`
looks for a root of a continuous function and promises no side, hence this module.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

Number = TypeVar("Number", int, float)

#: Enough halvings to exhaust a float64 interval of any width the accountants use.
MAX_STEPS = 2200


class NoThresholdError(ValueError):
    """The predicate fails even at the search's limit."""


def bracket(
    passes: Callable[[Number], bool],
    failing: Number,
    passing: Number,
    *,
    tol: float = 0.0,
    relative: bool = False,
) -> tuple[Number, Number]:
    """Narrow (failing, passing) around the threshold of a monotone `passes`.

    `failing` may lie on either side of `passing` (smallest passing value or largest). Stops once
    the bracket is no wider than `tol` (times |passing| when `relative`), after which the passing
    end is the answer, or when halving can no longer split the bracket. Integer endpoints bisect
    over the integers; with `tol=1` the result is the exact threshold.
    """
    for _ in range(MAX_STEPS):
        width = abs(passing - failing)
        if width <= (tol * abs(passing) if relative else tol):
            break
        mid: Number = (
            (failing + passing) // 2
            if isinstance(failing, int) and isinstance(passing, int)
            else (failing + passing) / 2
        )
        if mid in (failing, passing):
            break
        if passes(mid):
            passing = mid
        else:
            failing = mid
    return failing, passing


def smallest_passing(
    passes: Callable[[Number], bool],
    lower: Number,
    start: Number,
    *,
    limit: Number | None = None,
    tol: float = 0.0,
    relative: bool = False,
) -> Number:
    """Smallest value passing an increasing-in-success `passes`, searched upwards from `start`.

    `lower` must fail. The upper end doubles until it passes (NoThresholdError past `limit`),
    then the bracket is bisected; the answer errs large by at most `tol`, never small.
    """
    failing, passing = lower, start
    while not passes(passing):
        if limit is not None and passing >= limit:
            raise NoThresholdError(f"no value up to {limit} passes")
        failing, passing = passing, 2 * passing if limit is None else min(2 * passing, limit)
    return bracket(passes, failing, passing, tol=tol, relative=relative)[1]
