"""`python -m tests.soak [--seed S] [--scenarios N] [--scenario n]`: the soak run (`make soak`).

Exits 0 when every scenario passed, 1 when one failed (each failure prints the command that
replays it), 2 when the deployment could not be started.
"""

from __future__ import annotations

import argparse
import secrets
import sys
import tempfile
from pathlib import Path

from tests.faults.harness import HarnessError
from tests.soak.deployment import SoakDeployment
from tests.soak.postgres import binaries_available
from tests.soak.runner import run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.soak", description=__doc__)
    parser.add_argument("--seed", type=int, default=None, help="run seed (default: random)")
    parser.add_argument("--scenarios", type=int, default=100, help="how many (default 100)")
    parser.add_argument("--scenario", type=int, default=None, help="run only this one")
    args = parser.parse_args(argv)
    seed = args.seed if args.seed is not None else secrets.randbelow(2**31)
    if args.scenarios < 1:
        parser.error("--scenarios must be at least 1")
    indices = [args.scenario] if args.scenario is not None else list(range(args.scenarios))
    if not binaries_available():
        print("soak: initdb/pg_ctl (PostgreSQL server binaries) are needed", file=sys.stderr)
        return 2
    print(f"soak seed={seed}: {len(indices)} scenario(s); starting the deployment", flush=True)
    with tempfile.TemporaryDirectory(prefix="sagg-soak-") as tmp:
        try:
            deployment = SoakDeployment(Path(tmp)).__enter__()
        except (HarnessError, RuntimeError, OSError) as exc:
            print(f"soak: the deployment did not start: {exc}", file=sys.stderr)
            return 2
        try:
            summary = run(deployment, seed, indices, sys.stdout)
        finally:
            deployment.close()
    return 0 if summary.ok else 1


if __name__ == "__main__":
    sys.exit(main())
