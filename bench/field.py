"""Field arithmetic throughput (VDAF-08 §6.1 fields): ``python -m bench.field``.

Prints the median time per element (per polynomial for NTTs and Horner) over repeated runs,
after a warm-up call that also triggers any JIT compilation or cache load. Results include
allocating the fresh output array, as callers see them.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import numpy as np

from bench.common import Result
from shared.vdaf.field import Field, Field64, Field128, FieldArray

N = 10**6
BATCH = 1000
REPEATS = 9


def _time(fn: Callable[..., FieldArray], *args: object) -> float:
    """Median seconds per call of fn(*args)."""
    fn(*args)
    runs = []
    for _ in range(REPEATS):
        start = time.perf_counter()
        fn(*args)
        runs.append(time.perf_counter() - start)
    return statistics.median(runs)


def _rows(F: type[Field], rng: np.random.Generator) -> list[tuple[str, float]]:
    a, b = F.random(N, rng), F.random(N, rng)
    ns = 1e9 / N
    rows = [
        ("add, ns/element", _time(F.add, a, b) * ns),
        ("mul, ns/element", _time(F.mul, a, b) * ns),
        ("mul by one element, ns/element", _time(F.mul, a, b[0]) * ns),
        ("inner, ns/term", _time(F.inner, a, b) * ns),
        ("sum, ns/element", _time(F.sum, a) * ns),
        ("inv (batched), ns/element", _time(F.inv, a) * ns),
        ("pow(x, p-2), ns/element", _time(F.pow, a[:10_000], F.MODULUS - 2) * 1e9 / 10_000),
    ]
    for n in (16, 64, 256):
        polys = F.random((BATCH, n), rng)
        rows.append((f"ntt size {n}, µs/poly", _time(F.ntt, polys) * 1e6 / BATCH))
        rows.append((f"intt size {n}, µs/poly", _time(F.intt, polys) * 1e6 / BATCH))
    coeffs, x = F.random((BATCH, 64), rng), F.random(BATCH, rng)
    rows.append(("poly_eval 64 coeffs, µs/poly", _time(F.poly_eval, coeffs, x) * 1e6 / BATCH))
    for la in (16, 64, 256):
        pa, pb = F.random((BATCH // 10, la), rng), F.random((BATCH // 10, la), rng)
        per_poly = _time(F.poly_mul, pa, pb) * 1e6 / (BATCH // 10)
        rows.append((f"poly_mul {la}x{la}, µs/product", per_poly))
    return rows


def _measure() -> list[list[tuple[str, float]]]:
    rng = np.random.default_rng(0)
    return [_rows(F, rng) for F in (Field64, Field128)]


def run() -> list[Result]:
    """The summary rows for `python -m bench`."""
    results = []
    for F, rows in zip((Field64, Field128), _measure(), strict=True):
        for name, value in rows:
            operation, unit = name.rsplit(", ", 1)
            results.append(Result("field", F.__name__, operation, value, unit))
    return results


def main() -> None:
    results = _measure()
    print(f"{'operation':<32} {'Field64':>10} {'Field128':>10}")
    for (name, t64), (_, t128) in zip(*results, strict=True):
        print(f"{name:<32} {t64:>10.2f} {t128:>10.2f}")


if __name__ == "__main__":
    main()
