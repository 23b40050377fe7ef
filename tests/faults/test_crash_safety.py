"""Crash safety of the three-process deployment under kill -9, a lossy link and a DB restart.

Every scenario uploads a few hundred reports into one hour (the "main" batch) and
min_batch_size - 1 into the hour before (the "small" batch), injects its faults, collects both
through the collector service, and checks the invariants:

- the main collection completes with report_count and aggregate equal to exactly the reports
  the client saw accepted (plus the unanswered ones, which were re-sent with the same bytes and
  then answered): nothing lost, nothing counted twice;
- the collection succeeded, so leader and helper agreed on count and checksum;
- the small batch is never released (it stays below min_batch_size).

Seeds are printed on failure; SAGG_FAULT_SEED=<seed> replays one.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests import pg
from tests.faults.harness import (
    Action,
    ClientReport,
    Crossing,
    Deployment,
    HarnessError,
    Ledger,
    Outcome,
    Schedule,
    Uploader,
    expected,
    seeded,
    wait_until,
)

HISTOGRAM: dict[str, Any] = {"type": "Prio3Histogram", "length": 4, "chunk_length": 2}
COUNT: dict[str, Any] = {"type": "Prio3Count"}
PRECISION = 3600
MIN_BATCH = 50
REPORTS = 200
COLLECT_TIMEOUT = 60.0


class Batches:
    """The main and the small batch of one scenario, built once (same bytes on re-sends)."""

    def __init__(self, dep: Deployment, vdaf: dict[str, Any], rng: Any, reports: int = REPORTS):
        self.dep = dep
        self.vdaf = vdaf
        self.task = dep.create_task(vdaf, MIN_BATCH, PRECISION)
        self.uploader = Uploader(self.task)
        now = int(time.time())
        self.start = now - now % PRECISION
        self.small_start = self.start - PRECISION
        values = 2 if vdaf["type"] == "Prio3Count" else int(vdaf["length"])
        self.main = self.uploader.build([rng.randrange(values) for _ in range(reports)], now)
        self.small = self.uploader.build(
            [rng.randrange(values) for _ in range(MIN_BATCH - 1)], self.small_start
        )

    def upload_all(self, after_each: Callable[[int], None] | None = None) -> None:
        self.uploader.send(self.main + self.small, after_each=after_each)

    def collect_and_check(
        self, *, started: str | None = None, small_job: str | None = None
    ) -> dict[str, Any]:
        """Collect both batches; assert the invariants; the main collection's view."""
        dep = self.dep
        self.uploader.resend_unanswered()
        small_job = small_job or dep.start_collection(self.small_start, PRECISION)
        job = started or dep.start_collection(self.start, PRECISION)
        body = dep.wait_collection(job, COLLECT_TIMEOUT)
        self.verify(body, self.main)
        assert body["interval"]["start"] >= self.start
        # The small batch was aggregated too by now (same drivers), yet stays withheld.
        small = dep.collection(small_job)
        assert small["state"] not in ("complete", "failed"), small
        assert "result" not in small and len(Ledger.of(self.small).counted) < MIN_BATCH
        return body

    def verify(self, body: dict[str, Any], reports: list[ClientReport]) -> None:
        """The collection counts exactly the reports known to be accepted."""
        assert body["state"] == "complete", body
        ledger = Ledger.of(reports)
        assert ledger.unknown == 0
        assert body["report_count"] == len(ledger.counted), (body, len(ledger.counted))
        assert body["result"] == expected(self.vdaf, ledger.counted)

    def close(self) -> None:
        self.uploader.close()


def _outcomes(reports: list[ClientReport]) -> dict[Outcome, int]:
    counts: dict[Outcome, int] = {}
    for r in reports:
        for o in r.outcomes:
            counts[o] = counts.get(o, 0) + 1
    return counts


class Kill:
    """A kill -9 armed on the `nth` request of `kind` crossing the proxy."""

    def __init__(
        self,
        dep: Deployment,
        kind: str,
        victims: tuple[str, ...],
        nth: int,
        answer: Action | None,
        mid_request: float | None = None,
    ) -> None:
        self.dep, self.kind, self.victims, self.nth = dep, kind, victims, nth
        self.answer = answer  # what the proxy does with the request the victims die on
        self.mid_request = mid_request  # kill this long after forwarding, answer or not
        self.done = threading.Event()
        self.crossing: Crossing | None = None  # the request the victims died on
        self._seen = 0
        self._lock = threading.Lock()

    def __call__(self, crossing: Crossing) -> Action | None:
        if crossing.kind != self.kind or self.done.is_set():
            return None
        with self._lock:
            self._seen += 1
            if self._seen != self.nth:
                return None
        self.crossing = crossing
        if self.mid_request is not None:
            threading.Timer(self.mid_request, self._kill).start()
            return None
        self._kill()
        return self.answer

    def _kill(self) -> None:
        for name in self.victims:
            self.dep.services[name].kill9()
        self.done.set()

    def wait(self, timeout: float) -> Crossing:
        wait_until(f"{'+'.join(self.victims)} killed on {self.kind}", self.done.is_set, timeout)
        assert self.crossing is not None
        return self.crossing

    def resent_and_answered(self) -> None:
        """The request the victims died on was sent again later and answered with success."""
        assert self.crossing is not None and self.dep.proxy is not None
        crossings = self.dep.proxy.snapshot()
        died_on = crossings[self.crossing.index]
        if died_on.action is Action.PASS and died_on.upstream_status in (200, 201):
            return  # killed mid-request, but only after the helper had answered
        later = [c for c in crossings if c.path == died_on.path and c.index > died_on.index]
        assert later and later[-1].upstream_status in (200, 201), (died_on, later)


def _kill_on(
    dep: Deployment,
    kind: str,
    victim: str,
    nth: int,
    answer: Action | None,
    *,
    also: tuple[str, ...] = (),
    mid_request: float | None = None,
) -> Kill:
    """Kill -9 `victim` (and `also`) when the `nth` request of `kind` crosses the proxy.

    `answer` is what the proxy then does with that request: DROP_REQUEST kills before the
    helper sees it, DROP_RESPONSE after the helper answered (the leader never hears), None
    after forwarding it as scheduled; with `mid_request` seconds the kill comes that long
    after the request was forwarded, while the victim may still be working on it."""
    assert dep.proxy is not None
    kill = Kill(dep, kind, (victim, *also), nth, answer, mid_request)
    before = answer is Action.DROP_REQUEST or mid_request is not None
    (dep.proxy.before_hooks if before else dep.proxy.hooks).append(kill)
    return kill


def _store(store: str) -> bool:
    """True for PostgreSQL (both aggregators; skipped without a server, failed under CI)."""
    if store == "postgres":
        pg.require()
    return store == "postgres"


# --- scenarios ---------------------------------------------------------------------------------


@pytest.mark.parametrize("store", ["sqlite", "postgres"])
def test_leader_killed_during_uploads(tmp_path: Path, seed: int, store: str) -> None:
    postgres = _store(store)
    with seeded(seed) as rng, Deployment(tmp_path, Schedule(seed), postgres=postgres) as dep:
        batches = Batches(dep, HISTOGRAM, rng)
        kill_at = rng.randrange(40, 160)
        killed = threading.Event()

        def after_each(n: int) -> None:
            if n >= kill_at and not killed.is_set():
                killed.set()
                dep.leader.kill9()

        batches.upload_all(after_each)
        assert killed.is_set()
        first = _outcomes(batches.main + batches.small)
        # Uploads in flight and those after the kill got no answer; the rest were accepted.
        assert first.get(Outcome.NO_ANSWER, 0) > 0 and first.get(Outcome.ACCEPTED, 0) >= kill_at - 8
        assert Outcome.REJECTED not in first
        dep.leader.start()
        body = batches.collect_and_check()
        # Every unanswered report was answered on a re-send (accepted, or seen already).
        assert all(r.counted for r in batches.main)
        # The check itself notices one accepted report too many or too few.
        phantom = batches.uploader.build([1], batches.start)[0]
        phantom.outcomes.append(Outcome.ACCEPTED)
        with pytest.raises(AssertionError):
            batches.verify(body, [*batches.main, phantom])
        with pytest.raises(AssertionError):
            batches.verify(body, batches.main[1:])
        batches.close()


@pytest.mark.parametrize(
    ("answer", "store"),
    [
        (None, "sqlite"),
        (Action.DROP_RESPONSE, "sqlite"),
        (Action.DROP_RESPONSE, "postgres"),
    ],
    ids=["mid-job-twice-sqlite", "after-job-sqlite", "after-job-postgres"],
)
def test_leader_killed_during_aggregation(
    tmp_path: Path, seed: int, answer: Action | None, store: str
) -> None:
    """The leader dies while it holds leases on aggregation jobs: after the helper answered
    a job (the answer is lost), or (None) at a random moment up to 120 ms after sending one
    (waiting for the answer, handling it, or committing the job; and then once more soon
    after the restart). After the leases expire the restarted leader re-sends the identical
    request and the helper answers from its stored response."""
    postgres = _store(store)
    with seeded(seed) as rng, Deployment(tmp_path, Schedule(seed), postgres=postgres) as dep:
        batches = Batches(dep, HISTOGRAM, rng)
        mid = rng.uniform(0.0, 0.12) if answer is None else None
        kills = [
            _kill_on(dep, "aggregation_job", "leader", rng.randrange(2, 6), answer, mid_request=mid)
        ]
        batches.upload_all()
        kills[0].wait(60)
        dep.leader.start()
        if answer is None:
            mid = rng.uniform(0.0, 0.12)
            kills.append(
                _kill_on(
                    dep, "aggregation_job", "leader", rng.randrange(1, 3), None, mid_request=mid
                )
            )
            kills[1].wait(60)
            dep.leader.start()
        batches.collect_and_check()
        for kill in kills:
            kill.resent_and_answered()
        batches.close()


def test_leader_and_collector_killed_during_collection(tmp_path: Path, seed: int) -> None:
    """The leader dies after freezing the batch, while its aggregate-share request is at the
    helper (which answers; the answer is lost); the collector dies with it, mid-poll."""
    with seeded(seed) as rng, Deployment(tmp_path, Schedule(seed)) as dep:
        batches = Batches(dep, COUNT, rng)
        killed = _kill_on(
            dep, "aggregate_share", "leader", 1, Action.DROP_RESPONSE, also=("collector",)
        )
        batches.upload_all()
        small_job = dep.start_collection(batches.small_start, PRECISION)
        job = dep.start_collection(batches.start, PRECISION)
        killed.wait(COLLECT_TIMEOUT)
        time.sleep(rng.uniform(0, 1.5))
        dep.leader.start()
        dep.collector.start()
        batches.collect_and_check(started=job, small_job=small_job)
        killed.resent_and_answered()
        batches.close()


@pytest.mark.parametrize(
    ("on_job", "on_share", "vdaf"),
    [
        (Action.DROP_REQUEST, Action.DROP_RESPONSE, HISTOGRAM),
        (Action.DROP_RESPONSE, None, COUNT),
        (None, Action.DROP_RESPONSE, HISTOGRAM),
    ],
    ids=["before-job,after-share", "after-job,mid-share", "mid-job,after-share"],
)
def test_helper_killed_during_aggregation_and_aggregate_share(
    tmp_path: Path,
    seed: int,
    on_job: Action | None,
    on_share: Action | None,
    vdaf: dict[str, Any],
) -> None:
    """The helper is killed twice: on an aggregation job, then on the aggregate-share
    request. DROP_REQUEST: before it sees the request; DROP_RESPONSE: after it answered (the
    leader never hears); None: a few milliseconds into it, possibly inside its transaction.
    The leader re-sends the identical request once the helper is back."""
    with seeded(seed) as rng, Deployment(tmp_path, Schedule(seed)) as dep:
        batches = Batches(dep, vdaf, rng)
        mid = rng.uniform(0.0, 0.05) if on_job is None else None
        on_job_kill = _kill_on(
            dep, "aggregation_job", "helper", rng.randrange(2, 6), on_job, mid_request=mid
        )
        mid = rng.uniform(0.0, 0.06) if on_share is None else None
        on_share_kill = _kill_on(dep, "aggregate_share", "helper", 1, on_share, mid_request=mid)
        batches.upload_all()
        on_job_kill.wait(60)
        time.sleep(rng.uniform(0.5, 2.0))
        dep.helper.start()
        small_job = dep.start_collection(batches.small_start, PRECISION)
        job = dep.start_collection(batches.start, PRECISION)
        on_share_kill.wait(COLLECT_TIMEOUT)
        time.sleep(rng.uniform(0.5, 2.0))
        dep.helper.start()
        batches.collect_and_check(started=job, small_job=small_job)
        on_job_kill.resent_and_answered()
        on_share_kill.resent_and_answered()
        assert dep.helper.starts == 3
        batches.close()


@pytest.mark.slow
def test_helper_down_for_a_while(tmp_path: Path, seed: int) -> None:
    """The helper is down from the first aggregation job for several seconds: the collection
    waits (pending, no error) and completes once it is back, with nothing lost."""
    with seeded(seed) as rng, Deployment(tmp_path, Schedule(seed)) as dep:
        batches = Batches(dep, HISTOGRAM, rng)
        killed = _kill_on(dep, "aggregation_job", "helper", 1, Action.DROP_REQUEST)
        batches.upload_all()
        killed.wait(60)
        small_job = dep.start_collection(batches.small_start, PRECISION)
        job = dep.start_collection(batches.start, PRECISION)
        down_until = time.monotonic() + rng.uniform(4.0, 5.5)
        while time.monotonic() < down_until:
            state = dep.collection(job)["state"]
            assert state not in ("complete", "failed"), state
            time.sleep(0.5)
        dep.helper.start()
        batches.collect_and_check(started=job, small_job=small_job)
        batches.close()


def test_lossy_link_between_leader_and_helper(tmp_path: Path, seed: int) -> None:
    """Seeded faults on every leader->helper request: drops both ways, 503s, delays."""
    schedule = Schedule(
        seed,
        weights={
            Action.PASS: 0.45,
            Action.DROP_RESPONSE: 0.25,
            Action.DROP_REQUEST: 0.1,
            Action.UNAVAILABLE: 0.1,
            Action.DELAY: 0.1,
        },
        delay_s=(0.1, 1.0),
    )
    with seeded(seed) as rng, Deployment(tmp_path, schedule) as dep:
        batches = Batches(dep, HISTOGRAM, rng)
        # The first aggregate-share answer is lost for sure.
        assert dep.proxy is not None
        first_share = threading.Event()

        def lose_first_share(crossing: Crossing) -> Action | None:
            answered = crossing.upstream_status == 200
            if crossing.kind == "aggregate_share" and answered and not first_share.is_set():
                first_share.set()
                return Action.DROP_RESPONSE
            return None

        dep.proxy.hooks.append(lose_first_share)
        batches.upload_all()
        batches.collect_and_check()
        crossings = dep.proxy.snapshot()
        # The helper processed requests whose answers the leader never got, and the identical
        # re-sends were answered (from the helper's stored response) and counted once.
        lost = [
            c
            for c in crossings
            if c.action is Action.DROP_RESPONSE and c.upstream_status in (200, 201)
        ]
        faulted = [c for c in crossings if c.action is not Action.PASS]
        assert len(faulted) >= 5, crossings
        assert any(c.kind == "aggregation_job" for c in lost)
        assert any(c.kind == "aggregate_share" for c in lost)
        for c in lost:
            later = [d for d in crossings if d.path == c.path and d.index > c.index]
            assert any(d.upstream_status in (200, 201) for d in later), (c, later)
        batches.close()


def test_postgres_backends_terminated(tmp_path: Path, seed: int) -> None:
    """Both aggregators on PostgreSQL; their backend connections are killed (the pools have
    to reconnect, transactions in flight are retried): the leader's during uploads, the
    helper's a few milliseconds into aggregation jobs and the aggregate-share request, the
    leader's just before it gets the helper's answers (which it then commits)."""
    pg.require()
    with seeded(seed) as rng, Deployment(tmp_path, Schedule(seed), postgres=True) as dep:
        batches = Batches(dep, HISTOGRAM, rng)
        points = set(rng.sample(range(20, REPORTS), 3))
        terminated: dict[str, int] = {"leader": 0, "helper": 0}
        lock = threading.Lock()

        def terminate(role: str) -> None:
            killed = dep.terminate_backends(role)
            with lock:
                terminated[role] += killed

        def after_each(n: int) -> None:
            if n in points:
                terminate("leader")

        assert dep.proxy is not None
        chosen = {1, 3, 5}
        seen: list[Crossing] = []
        timers: list[threading.Timer] = []

        def chosen_one(crossing: Crossing) -> bool:
            return crossing.kind == "aggregate_share" or crossing.index in chosen

        def helper_side(crossing: Crossing) -> Action | None:
            if chosen_one(crossing):
                timer = threading.Timer(rng.uniform(0.0, 0.03), terminate, ("helper",))
                timers.append(timer)
                timer.start()
            return None

        def leader_side(crossing: Crossing) -> Action | None:
            seen.append(crossing)
            if chosen_one(crossing):
                terminate("leader")
            return None

        dep.proxy.before_hooks.append(helper_side)
        dep.proxy.hooks.append(leader_side)
        batches.upload_all(after_each)
        batches.collect_and_check()
        for timer in timers:
            timer.join(5)
        print(f"backends terminated: {terminated}; uploads: {_outcomes(batches.main)}")
        assert terminated["leader"] > 0 and terminated["helper"] > 0, terminated
        assert dep.leader.running and dep.helper.running
        batches.close()


def test_uploads_racing_the_collection(tmp_path: Path, seed: int) -> None:
    """The collection is requested while uploads still stream in: every report the leader
    accepted before it froze the batch is in the aggregate, every later one is refused
    (batch collected), none is accepted yet left out."""
    with seeded(seed) as rng, Deployment(tmp_path, Schedule(seed)) as dep:
        batches = Batches(dep, HISTOGRAM, rng, reports=REPORTS + 100)
        first, rest = batches.main[: MIN_BATCH + 20], batches.main[MIN_BATCH + 20 :]
        batches.uploader.send(first + batches.small)
        small_job = dep.start_collection(batches.small_start, PRECISION)
        job = dep.start_collection(batches.start, PRECISION)
        stop = threading.Event()

        # A steady stream keeps the batch incomplete (unaggregated reports), so the leader
        # waits; one seeded lull lets it freeze the batch, and the stream then runs into it.
        lull = rng.randrange(3, 20)

        def trickle() -> None:
            for n, i in enumerate(range(0, len(rest), 4)):
                if stop.is_set():
                    return
                batches.uploader.send(rest[i : i + 4], concurrency=4)
                time.sleep(3.0 if n == lull else rng.uniform(0.0, 0.15))

        uploader = threading.Thread(target=trickle, daemon=True)
        uploader.start()
        try:
            body = dep.wait_collection(job, COLLECT_TIMEOUT)
        finally:
            uploader.join(60)
            stop.set()
        assert body["state"] == "complete", body
        outcomes = _outcomes(batches.main)
        # The race was real: some reports made it in after the request, some were too late.
        assert outcomes.get(Outcome.REJECTED, 0) > 0, outcomes
        assert body["report_count"] > len(first), body
        batches.collect_and_check(started=job, small_job=small_job)


@pytest.mark.slow
def test_chaos(tmp_path: Path, seed: int) -> None:
    """Seeded chaos: kill -9 of random processes at random moments (uploads, aggregation and
    collection alike) on a lossy link; every report is re-sent until answered, and the
    collection must count exactly the accepted ones."""
    schedule = Schedule(
        seed,
        weights={
            Action.PASS: 0.7,
            Action.DROP_RESPONSE: 0.1,
            Action.DROP_REQUEST: 0.05,
            Action.UNAVAILABLE: 0.1,
            Action.DELAY: 0.05,
        },
    )
    with seeded(seed) as rng, Deployment(tmp_path, schedule) as dep:
        batches = Batches(dep, HISTOGRAM, rng, reports=250)
        plan = sorted(
            (rng.uniform(0.5, 10.0), rng.choice(["leader", "leader", "helper", "collector"]))
            for _ in range(4)
        )
        kills: list[tuple[float, str]] = []
        errors: list[BaseException] = []

        def chaos() -> None:
            began = time.monotonic()
            try:
                for at, victim in plan:
                    time.sleep(max(0.0, at - (time.monotonic() - began)))
                    dep.services[victim].kill9()
                    kills.append((round(time.monotonic() - began, 2), victim))
                    time.sleep(rng.uniform(0.2, 2.0))
                    dep.services[victim].start()
            except BaseException as exc:
                errors.append(exc)

        monkey = threading.Thread(target=chaos, daemon=True)
        monkey.start()
        try:
            reports = batches.main + batches.small
            for i in range(0, len(reports), 25):
                batches.uploader.send(reports[i : i + 25])
                time.sleep(rng.uniform(0.1, 0.6))
            # The leader may be down right now: re-send until every report has an answer.
            wait_until("the leader up", lambda: dep.leader.running, 30)
            deadline = time.monotonic() + 40
            while any(r.counted is None for r in reports):
                assert time.monotonic() < deadline, "reports still unanswered"
                batches.uploader.send([r for r in reports if r.counted is None])
                time.sleep(0.5)
            while True:  # the collector may be down too
                try:
                    small_job = dep.start_collection(batches.small_start, PRECISION)
                    job = dep.start_collection(batches.start, PRECISION)
                    break
                except (HarnessError, httpx.HTTPError):
                    assert time.monotonic() < deadline + 20, "collector never came back"
                    time.sleep(0.3)
        finally:
            monkey.join(60)
        assert not errors, errors
        assert len(kills) == len(plan), kills
        print(f"kills: {kills}")
        batches.collect_and_check(started=job, small_job=small_job)
