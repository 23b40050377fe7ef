"""`make bench`: run every benchmark of the project and end with one summary table."""

from __future__ import annotations

from bench import (
    accounting,
    deployment,
    field,
    flood,
    hpke,
    load,
    population,
    privacypass,
    store,
    vdaf,
)
from bench.common import Result, print_table


def main() -> None:
    results: list[Result] = []
    modules = (
        field,
        hpke,
        privacypass,
        vdaf,
        accounting,
        deployment,
        store,
        load,
        flood,
        population,
    )
    for module in modules:
        results += module.run()
    print_table(results, "Summary of all benchmarks")


if __name__ == "__main__":
    main()
