"""The budget accountant (000 §4.3, Table 1; dp.md §2.4): checks 1-3, atomic and durable
consumption, concurrency, and crashes between consuming and uploading."""

from __future__ import annotations

import random
import threading
from pathlib import Path

import pytest
from scipy import stats

from client_sdk.budget import BudgetAccountant, BudgetRefusedError
from client_sdk.device import Device
from client_sdk.policy import AnalysisAllowance, DevicePolicy, FieldAllowance
from client_sdk.sampling import DonationSchedule, poisson_sample
from client_sdk.storage import StateDb
from shared.recipe.model import RecipeDraft
from tests.client_sdk.harness import NOW, World, draft, policy, verified
from tests.recipe.helpers import complete, example_recipe


def table1_policy() -> DevicePolicy:
    """000 Table 1: analysis 0.5 / 1 report; n-gram local 5, aggregate 1, 1 report; bucketed
    age local 2, aggregate 0.3, 1 report."""
    return DevicePolicy(
        trusted=policy().trusted,
        query_classes=policy().query_classes,
        default_analysis=AnalysisAllowance(epsilon=0.5, reports=1),
        fields={
            "typed_ngrams": FieldAllowance(local_epsilon=5, epsilon=1, reports=1),
            "age": FieldAllowance(local_epsilon=2, epsilon=0.3, reports=1),
        },
    )


def test_table1_checks(tmp_path: Path) -> None:
    db = StateDb(tmp_path / "s.db")
    accountant = BudgetAccountant(db, table1_policy())
    # 000's example recipe: aggregate epsilon 1 > 0.5 for the analysis and > 0.3 for age.
    recipe = example_recipe()
    problems = accountant.check(recipe)
    assert any(p.startswith("check 1") and "epsilon" in p for p in problems)
    assert any("field 'age' has epsilon 0.3 left" in p for p in problems)
    # eps0 = 1 per bit, symmetric: local 2 <= 2 for age and <= 5 for n-grams.
    assert not any("local epsilon" in p for p in problems)
    small = example_recipe(privacy={"epsilon": 0.3, "delta": 1e-8}, min_batch_size=20000)
    assert [p for p in accountant.check(small) if not p.startswith("check 3")] == []
    accountant.spend(small, lambda conn: None)
    assert accountant.analysis_usage("keyboard.ngrams").reports_used == 1
    assert accountant.field_usage("age").eps_used == pytest.approx(0.3)
    again = accountant.check(small)
    assert any("used its 1 report" in p for p in again)
    # Durable: a new accountant on the same file sees the consumption.
    db.close()
    reopened = BudgetAccountant(StateDb(tmp_path / "s.db"), table1_policy())
    assert reopened.field_usage("typed_ngrams").reports_used == 1


def test_check2_local_epsilon_and_check3_claims(tmp_path: Path) -> None:
    accountant = BudgetAccountant(StateDb(None), table1_policy())
    loud = example_recipe(
        randomizer={"name": "one_hot", "eps0": 1.5, "symmetric": True},
        privacy={"epsilon": 0.3, "delta": 1e-8},
    )
    assert any(
        "local epsilon 3 exceeds 2 allowed for field 'age'" in p for p in accountant.check(loud)
    )
    # B far below what the claim needs: check 3 (the recipe's own claim) fails.
    body = draft(min_batch_size=10)
    weak = complete(RecipeDraft.model_validate(body))
    assert any(
        p.startswith("check 3") for p in BudgetAccountant(StateDb(None), policy()).check(weak)
    )


def test_refused_spend_changes_nothing_and_failed_recording_rolls_back() -> None:
    db = StateDb(None)
    accountant = BudgetAccountant(db, policy())
    recipe = complete(RecipeDraft.model_validate(draft()))

    def boom(conn: object) -> None:
        raise RuntimeError("crash while recording the pending upload")

    with pytest.raises(RuntimeError):
        accountant.spend(recipe, boom)
    assert accountant.analysis_usage("emoji.popular").reports_used == 0
    for _ in range(3):
        accountant.spend(recipe, lambda conn: None)
    with pytest.raises(BudgetRefusedError):
        accountant.spend(recipe, lambda conn: None)
    assert accountant.analysis_usage("emoji.popular").reports_used == 3
    assert accountant.field_usage("emoji").eps_used == pytest.approx(3.0)


def test_concurrent_queries_never_exceed_the_budget(tmp_path: Path) -> None:
    world = World(tmp_path, tokens=False)
    world.publish()
    # Two Device objects on one directory (two processes' worth of connections) and threads.
    first = world.device(tmp_path / "d", tokens=False)
    second = world.device(tmp_path / "d", tokens=False)
    recipe = verified(world, first)
    outcomes: list[str] = []
    lock = threading.Lock()
    barrier = threading.Barrier(16)

    def run(device: Device) -> None:
        barrier.wait()
        status = device.answer(recipe).status
        with lock:
            outcomes.append(status)

    threads = [threading.Thread(target=run, args=(d,)) for d in [first, second] * 8]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(outcomes).count("queued") == 3  # the policy allows 3 reports
    assert outcomes.count("refused") == 13
    assert first.budget.analysis_usage("emoji.popular").reports_used == 3
    assert len(first.pending()) == 3


class Killed(BaseException):
    """Stands for the process dying (not an Exception: nothing may catch it)."""


@pytest.mark.parametrize("kill_at", ["seal", "put"])
def test_crash_between_consuming_and_uploading(tmp_path: Path, kill_at: str) -> None:
    world = World(tmp_path)
    world.publish()
    device = world.device(tmp_path / "d")
    device.events.add("emoji", {"emoji": "cry"}, NOW - 10)
    recipe = verified(world, device)
    assert device.answer(recipe).status == "queued"

    def die(*args: object, **kwargs: object) -> None:
        raise Killed

    if kill_at == "seal":
        device.seal = die  # type: ignore[method-assign,assignment]
    else:
        device.uploader.put = die  # type: ignore[method-assign,assignment]
    with pytest.raises(Killed):
        device.run_due()
    assert world.leader.uploads == []
    # Restart: the budget stays consumed once, the pending upload is resumed exactly once.
    restarted = world.device(tmp_path / "d", enroll=False)
    assert restarted.budget.analysis_usage("emoji.popular").reports_used == 1
    assert [r.status for r in restarted.run_due()] == ["sent"]
    assert restarted.run_due() == []
    assert len(world.leader.uploads) == 1
    assert len(restarted.audit.entries("sent")) == 1
    assert restarted.budget.analysis_usage("emoji.popular").reports_used == 1
    if kill_at == "put":
        # The sealed report was stored before the crash: the very same bytes were re-sent.
        stored = restarted.audit.entries("sent")[0].report_id
        assert world.leader.uploads[0].report_metadata.report_id.to_b64url() == stored


def test_poisson_sampling_rate_binomial() -> None:
    rng = random.Random(20261122)
    n, q = 4000, 0.3
    hits = sum(poisson_sample(q, rng) for _ in range(n))
    assert stats.binomtest(hits, n, q).pvalue > 1e-3
    assert stats.binomtest(hits, n, 0.35).pvalue < 1e-3  # the test can tell 0.3 from 0.35


def test_devices_self_sample_at_the_recipe_rate(tmp_path: Path) -> None:
    world = World(tmp_path, tokens=False)
    world.publish(sampling_rate=0.25, min_batch_size=2000)
    probe = world.device(None, tokens=False)
    recipe = verified(world, probe)
    rng = random.Random(7)
    n = 400
    statuses = []
    for _ in range(n):
        device = world.device(None, tokens=False, rng=random.Random(rng.getrandbits(64)))
        statuses.append(device.answer(recipe).status)
        device.close()
    sampled = statuses.count("queued")
    assert statuses.count("not_sampled") == n - sampled
    assert stats.binomtest(sampled, n, 0.25).pvalue > 1e-3


def test_donation_time_is_in_the_slots() -> None:
    schedule = DonationSchedule(slots=4, slot_seconds=100)
    rng = random.Random(1)
    times = {schedule.donation_time(1000, rng) for _ in range(200)}
    assert times == {1000, 1100, 1200, 1300}
    fetch = [schedule.token_fetch_time(1000, 1300, rng) for _ in range(200)]
    assert min(fetch) >= 1000 and max(fetch) <= 1300 and len(set(fetch)) > 50
