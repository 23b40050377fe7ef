"""Privacy accounting cost: ``python -m bench.accounting``.

Seconds for `shuffle_epsilon` of the symmetric-RAPPOR analyses (the collector evaluates them at
the real batch size; `min_batch_size` calls them ~40 times) at delta = 1e-9, n = 10^3 .. 10^6,
and the epsilon each states. One timed call per case: each builds its whole curve from scratch
(no cache), so a repeat would measure the same work.
"""

from __future__ import annotations

import time

from bench.common import Result
from shared.dp import amplification as amp

DELTA = 1e-9
SIZES = (10**3, 10**4, 10**5, 10**6)
EPS0S = (1.0, 3.0, 6.0)
ANALYSES: tuple[amp.Analysis, ...] = ("sym_rappor_exact", "sym_rappor_deletion_exact")


def _measure() -> list[tuple[amp.Analysis, float, int, float, float]]:
    """(analysis, eps0, n, seconds, epsilon) per case."""
    rows = []
    for analysis in ANALYSES:
        for eps0 in EPS0S:
            for n in SIZES:
                start = time.perf_counter()
                eps = amp.shuffle_epsilon(eps0, n, DELTA, analysis)
                rows.append((analysis, eps0, n, time.perf_counter() - start, eps))
    return rows


def run() -> list[Result]:
    """The summary rows for `python -m bench`."""
    return [
        Result("accounting", f"{analysis} eps0={eps0:g} n={n:.0e}", "shuffle_epsilon", sec, "s")
        for analysis, eps0, n, sec, _ in _measure()
    ]


def main() -> None:
    print(f"{'analysis':<26} {'eps0':>5} {'n':>9} {'seconds':>8} {'epsilon':>10}")
    for analysis, eps0, n, sec, eps in _measure():
        print(f"{analysis:<26} {eps0:>5g} {n:>9} {sec:>8.3f} {eps:>10.5f}")


if __name__ == "__main__":
    main()
