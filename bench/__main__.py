"""`make bench`: run every benchmark of the project and end with one summary table."""

from __future__ import annotations

from bench import deployment, field, flood, hpke, load, privacypass, vdaf
from bench.common import Result, print_table


def main() -> None:
    results: list[Result] = []
    for module in (field, hpke, privacypass, vdaf, deployment, load, flood):
        results += module.run()
    print_table(results, "Summary of all benchmarks")


if __name__ == "__main__":
    main()
