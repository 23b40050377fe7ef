"""The soak runner itself cannot rot: two seeded scenarios pass on a real deployment, a
broken invariant (a report counted twice by the oracle's comparison) is reported with the seed
and scenario that replay it, and the scenarios drawn cover every fault kind."""

from __future__ import annotations

import io
from collections.abc import Iterator

import pytest

from tests import pg
from tests.faults.harness import Action
from tests.soak.deployment import KILLABLE, SoakDeployment
from tests.soak.postgres import binaries_available
from tests.soak.runner import draw, run

#: Scenarios 0 and 1 of this seed kill a service and crash the database between them.
SEED = 1


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SoakDeployment]:
    """Skipped without PostgreSQL's server binaries (failed under CI=true)."""
    if not binaries_available():
        pg.missing("initdb/pg_ctl (PostgreSQL server binaries) not found")
    with SoakDeployment(tmp_path_factory.mktemp("soak")) as dep:
        yield dep


@pytest.mark.slow
def test_two_seeded_scenarios_pass(deployment: SoakDeployment) -> None:
    assert draw(SEED, 0).faults and draw(SEED, 1).faults
    out = io.StringIO()
    summary = run(deployment, SEED, [0, 1], out)
    text = out.getvalue()
    assert summary.ok, text
    lines = [line for line in text.splitlines() if line.startswith(f"seed={SEED} scenario=")]
    assert len(lines) == 2 and all(line.endswith("PASS") for line in lines), text
    assert "fired=0/" not in text, text  # the faults drawn did fire
    assert f"soak seed={SEED}: 2 scenarios, 2 passed, all passed in" in text


@pytest.mark.slow
def test_a_double_count_is_reported_with_its_seed(deployment: SoakDeployment) -> None:
    """The oracle is made to believe the first accepted report came twice: the collection no
    longer matches, and the failure names the seed and scenario."""
    out = io.StringIO()
    summary = run(deployment, SEED, [2], out, tamper={2: lambda main: main + main[:1]})
    text = out.getvalue()
    assert summary.failed == [2], text
    assert f"seed={SEED} scenario=  2 " in text and "FAIL" in text
    assert "were accepted" in text  # the count check is the one that fired
    assert f"make soak SOAK_SEED={SEED} SOAK_ONLY=2" in text
    assert f"python -m tests.soak --seed {SEED} --scenario 2" in text
    assert "1 FAILED" in text


def test_draws_are_reproducible_and_cover_every_fault() -> None:
    assert draw(7, 3) == draw(7, 3)
    assert [draw(7, i) for i in range(5)] != [draw(8, i) for i in range(5)]
    scenarios = [draw(7, i) for i in range(100)]
    targets = {f.target for s in scenarios for f in s.faults}
    assert targets == {*KILLABLE, "postgres"}
    assert {f.phase for s in scenarios for f in s.faults} == {"upload", "aggregation", "collection"}
    assert {f.when for s in scenarios for f in s.faults} == {"before", "mid", "after"}
    links = [s.link for s in scenarios if s.link is not None]
    assert links and all(link[Action.DUPLICATE] > 0 for link in links)
    assert any(not s.faults and s.link is None for s in scenarios)  # clean runs too
    assert all(s.small < s.main for s in scenarios)
