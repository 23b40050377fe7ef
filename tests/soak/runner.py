"""Seeded fault scenarios on one shared deployment, each checked against an oracle of its own.

A scenario (`draw`: a pure function of the run's seed and the scenario's number, so one
scenario replays alone) publishes a recipe through the recipe server (a fresh task: the
leader, helper and collector provisioned, the helper behind the fault proxy), has SDK devices
(`client_sdk.device.Device`, each with its own state store, budget accountant, token wallet and
attester identity) answer it, and uploads their reports: `main` reports into the current hour
(at least B) and B-1 into the hour before (the `small` batch). Faults fire meanwhile:

- kill -9 of a service (leader API, leader drivers, helper, collector, token issuer, recipe
  server) when the n-th upload is answered, when the n-th aggregation-job request of the task
  crosses the proxy, or when the n-th aggregate-share request does (before it is forwarded, a
  few milliseconds into it while the helper may be inside its transaction, or after the helper
  answered); the service is started again after a drawn pause;
- a crash of the PostgreSQL server holding the leader's and helper's stores (`pg_ctl stop -m
  immediate`, then start), at the same kinds of moments;
- a lossy link: a drawn share of the leader's requests to the helper dropped before or after
  the helper saw them, delayed, answered 503, or delivered twice.

Devices re-send whatever got no answer (the SDK resumes its pending uploads with the same
bytes) until every report's fate is known. Then both batches are collected through the
collector, and the invariants are checked against what the runner saw on the wire, not what
the services say about themselves:

1. every accepted report (an upload answered 2xx, or "already seen" after an unanswered send)
   is counted exactly once: the collected report count and the decoded aggregate equal the
   count and the element-wise sum of the measurements the runner gave those devices;
2. no batch is released below B: the collection of the B-1 reports stays pending;
3. leader and helper agree: the collection completed (the leader checks the helper's count and
   checksum), and both aggregated exactly the accepted reports of both batches;
4. no honest report is refused (each carries a valid token and arrives before the collection);
5. no device exceeds its privacy budget (its budget store, and the runner's own count of its
   accepted reports) or its token quota (the attester's persisted charge and the tokens the
   device holds); a device asked again after its budget is spent refuses.

The invariants are the promises of DAP-09 §4.4.2 (a report is accepted once, replays are
refused), §4.5-§4.6 (leader and helper aggregate the same reports; a batch is collected only
with at least min_batch_size of them), 001 §4.3 and §4.6 (B), 000 §4.3 (the device's budget)
and RFC 9576 §3 with 001 §4.8 (the attester's per-device token quota).

Each scenario prints one line; a failure prints the command that replays it.
"""

from __future__ import annotations

import contextlib
import hashlib
import random
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Literal, TextIO

import httpx
import numpy as np

from client_sdk.budget import BudgetAccountant
from client_sdk.device import Device, DeviceConfig
from client_sdk.manufacturer import ManufacturerCA, SimulatedDevice
from client_sdk.policy import AnalysisAllowance, DevicePolicy, FieldAllowance, TrustedParties
from client_sdk.query import randomize_indices
from client_sdk.recipes import VerifiedRecipe
from client_sdk.sampling import DonationSchedule
from client_sdk.simulator import permissive_policy
from client_sdk.upload import Uploader
from deploy.collect import CollectError, request_collection
from deploy.keys import load_manufacturer_ca
from deploy.recipes import publish_recipe
from shared.b64url import b64url_decode
from shared.codec import DecodeError
from shared.dap.messages import Report
from shared.recipe.model import RecipeDraft
from tests.faults.harness import Action, Crossing, HarnessError, Schedule
from tests.soak.deployment import KILLABLE, QUOTA_TOKENS, SoakDeployment

__all__ = [
    "MIN_BATCH",
    "Fault",
    "Fleet",
    "Oracle",
    "Scenario",
    "Summary",
    "draw",
    "run",
]

MIN_BATCH = 10
PRECISION = 3600
ANALYSIS = "soak.emoji"
FIELD = "emoji"
EMOJI = ("smile", "heart", "cry", "fire")
#: Recipes a device may answer (its analysis and field allowance): 3 x epsilon 1.
REPORTS_PER_DEVICE = 3
EPSILON = 1.0
#: How long a scenario may take to settle each step before it is declared failed.
UPLOAD_DEADLINE_S = 120.0
COLLECT_DEADLINE_S = 120.0
Phase = Literal["upload", "aggregation", "collection"]
When = Literal["before", "mid", "after"]


# --- drawing scenarios -------------------------------------------------------------------------


@dataclass(frozen=True)
class Fault:
    """One fault: `target` (a service, or "postgres") killed at the `at`-th event of `phase`
    (uploads answered; the task's aggregation-job or aggregate-share requests at the proxy:
    `before` they are forwarded, `mid` `mid_s` (up to 100 ms) after they reached the proxy, or
    `after` the helper answered), down for `down_s` seconds. Printed as
    ``kill helper@agg-job#2~ 1.2s`` (``<`` before, ``~`` mid, ``>`` after)."""

    target: str
    phase: Phase
    at: int
    when: When
    mid_s: float
    down_s: float

    def describe(self) -> str:
        where = {"upload": "upload", "aggregation": "agg-job", "collection": "agg-share"}
        side = (
            "" if self.phase == "upload" else {"before": "<", "mid": "~", "after": ">"}[self.when]
        )
        kind = "crash" if self.target == "postgres" else "kill"
        return f"{kind} {self.target}@{where[self.phase]}#{self.at}{side} {self.down_s:.1f}s"


@dataclass(frozen=True)
class Scenario:
    seed: int
    index: int
    faults: tuple[Fault, ...]
    #: The proxy's per-request weights (None: a clean link).
    link: dict[Action, float] | None
    main: int  # reports into the collected batch (> B)
    small: int  # reports into the withheld batch (B - 1)
    exhausted: int  # devices asked again although their budget is spent
    rng_seed: int  # measurements, device choice and timing jitter

    def describe(self) -> str:
        parts = [f.describe() for f in self.faults]
        if self.link is not None:
            total = sum(self.link.values())
            shares = " ".join(
                f"{a.value}={w / total:.0%}" for a, w in self.link.items() if a is not Action.PASS
            )
            parts.append(f"link {shares}")
        return "; ".join(parts) or "none"


def _derive(seed: int, index: int, label: str) -> int:
    digest = hashlib.sha256(f"sagg-soak/{seed}/{index}/{label}".encode()).digest()
    return int.from_bytes(digest[:8], "big")


#: What each service does in each phase: a kill is drawn only where it can hit work.
_PHASES: dict[str, tuple[Phase, ...]] = {
    "leader": ("upload", "aggregation", "collection"),
    "leader-drivers": ("upload", "aggregation", "collection"),
    "helper": ("aggregation", "collection"),
    "collector": ("collection",),
    "token-issuer": ("upload",),
    "recipe-server": ("upload", "aggregation", "collection"),
    "postgres": ("upload", "aggregation", "collection"),
}


def draw(seed: int, index: int) -> Scenario:
    """Scenario `index` of the run with `seed` (independent of every other scenario)."""
    rng = random.Random(_derive(seed, index, "faults"))
    main = MIN_BATCH + rng.randint(2, 12)
    faults: list[Fault] = []
    for _ in range(rng.choice((0, 1, 1, 1, 2, 2))):
        target = rng.choice(KILLABLE)
        faults.append(_fault(rng, target, main))
    if rng.random() < 0.3:
        faults.append(_fault(rng, "postgres", main))
    link: dict[Action, float] | None = None
    if rng.random() < 0.5:
        link = {
            Action.PASS: 1.0,
            Action.DROP_REQUEST: rng.uniform(0, 0.15),
            Action.DROP_RESPONSE: rng.uniform(0, 0.25),
            Action.DELAY: rng.uniform(0, 0.2),
            Action.UNAVAILABLE: rng.uniform(0, 0.1),
            Action.DUPLICATE: rng.uniform(0.05, 0.25),
        }
    return Scenario(
        seed=seed,
        index=index,
        faults=tuple(faults),
        link=link,
        main=main,
        small=MIN_BATCH - 1,
        exhausted=rng.randint(0, 2),
        rng_seed=_derive(seed, index, "data"),
    )


def _fault(rng: random.Random, target: str, main: int) -> Fault:
    phase = rng.choice(_PHASES[target])
    at = {"upload": rng.randint(1, main), "aggregation": rng.randint(1, 2), "collection": 1}[phase]
    down = rng.uniform(0.0, 2.5) if target != "postgres" else rng.uniform(0.2, 2.0)
    when: When = rng.choice(("before", "mid", "after"))
    return Fault(target, phase, at, when, rng.uniform(0.0, 0.1), down)


# --- what the runner sees on the wire ----------------------------------------------------------

Fate = Literal["counted", "refused", "unknown"]


class Oracle(httpx.BaseTransport):
    """The devices' HTTP transport: records the leader's answer to every upload, by report id
    (read from the bytes on the wire), and calls `on_upload_answer` after each answer."""

    def __init__(self) -> None:
        self._inner = httpx.HTTPTransport(
            limits=httpx.Limits(max_connections=32, max_keepalive_connections=32)
        )
        self._lock = threading.Lock()
        #: report id -> one entry per PUT: "accepted", "replayed", "refused" or "unknown".
        self.answers: dict[bytes, list[str]] = {}
        #: report id -> the leader's last refusal (status and problem document).
        self.refusals: dict[bytes, str] = {}
        self.on_upload_answer: Callable[[], None] | None = None

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if request.method != "PUT" or not request.url.path.endswith("/reports"):
            return self._inner.handle_request(request)
        try:
            report_id = Report.decode(request.content).report_metadata.report_id.value
        except DecodeError:
            return self._inner.handle_request(request)
        try:
            response = self._inner.handle_request(request)
            text = response.read().decode(errors="replace")
        except httpx.HTTPError:
            self._record(report_id, "unknown")
            raise
        if 200 <= response.status_code < 300:
            answer = "accepted"
        elif response.status_code == 400 and "already seen" in text:
            answer = "replayed"  # an earlier send was stored, its answer lost
        elif 400 <= response.status_code < 500:
            answer = "refused"
            with self._lock:
                self.refusals[report_id] = f"{response.status_code} {text[:300]}"
        else:
            answer = "unknown"  # 5xx: stored or not, the device must send again
        self._record(report_id, answer)
        return response

    def _record(self, report_id: bytes, answer: str) -> None:
        with self._lock:
            self.answers.setdefault(report_id, []).append(answer)
        hook = self.on_upload_answer
        if hook is not None:
            hook()

    def fate(self, report_id: bytes) -> Fate:
        with self._lock:
            seen = list(self.answers.get(report_id, ()))
        if any(a in ("accepted", "replayed") for a in seen):
            return "counted"
        if any(a == "refused" for a in seen):
            return "refused"
        return "unknown"

    def close(self) -> None:
        self._inner.close()


# --- devices -----------------------------------------------------------------------------------


def device_policy(urls: dict[str, str]) -> DevicePolicy:
    """What every soak device allows: three recipes of the analysis, epsilon 1 each, through
    the deployment's own parties only."""
    trusted = TrustedParties(
        leaders=(urls["leader"],), helpers=(urls["helper"],), token_issuers=(urls["token-issuer"],)
    )
    base = permissive_policy((FIELD,), FIELD, trusted)
    return base.model_copy(
        update={
            "default_analysis": AnalysisAllowance(
                epsilon=REPORTS_PER_DEVICE * EPSILON, reports=REPORTS_PER_DEVICE
            ),
            "fields": {
                FIELD: FieldAllowance(
                    local_epsilon=2.0,
                    epsilon=REPORTS_PER_DEVICE * EPSILON,
                    reports=REPORTS_PER_DEVICE,
                )
            },
        }
    )


@dataclass
class FleetDevice:
    device: Device
    identity: SimulatedDevice
    #: Reports of this device the oracle saw counted, over the whole run.
    counted: int = 0
    #: Recipes it answered (queued a report for).
    answered: int = 0


@dataclass
class Fleet:
    """Devices kept across scenarios, so that budgets and quotas compose over the run."""

    deployment: SoakDeployment
    oracle: Oracle
    ca: ManufacturerCA
    http: httpx.Client
    config: DeviceConfig
    policy: DevicePolicy
    devices: list[FleetDevice] = field(default_factory=list)

    @classmethod
    def create(cls, deployment: SoakDeployment) -> Fleet:
        oracle = Oracle()
        keys = deployment.keys
        config = DeviceConfig(
            recipe_server_url=deployment.urls["recipe-server"],
            recipe_server_key=b64url_decode(keys.recipe_public_key),
            donation=DonationSchedule(1, 0),
            # A device keeps trying through any outage; the runner decides when it is too long.
            max_upload_rounds=1_000_000,
        )
        return cls(
            deployment,
            oracle,
            load_manufacturer_ca(keys.ca_cert_file, keys.ca_key_file),
            httpx.Client(transport=oracle, timeout=5.0),
            config,
            device_policy(deployment.urls),
        )

    def new_device(self) -> FleetDevice:
        identity = SimulatedDevice.manufacture(self.ca)
        device = Device(
            self.policy,
            self.config,
            http=self.http,
            identity=identity,
            uploader=Uploader(self.http, retries=2, backoff=0.2),
        )
        device.events.register_stream(FIELD, 7 * 86400)
        found = FleetDevice(device, identity)
        self.devices.append(found)
        return found

    def pick(self, rng: random.Random, fresh: int, exhausted: int) -> tuple[list[FleetDevice], ...]:
        """`fresh` devices with budget left (new ones when too few) and up to `exhausted`
        whose budget is spent."""
        spare = [d for d in self.devices if d.answered < REPORTS_PER_DEVICE]
        rng.shuffle(spare)
        chosen = spare[:fresh]
        while len(chosen) < fresh:
            chosen.append(self.new_device())
        spent = [d for d in self.devices if d.answered >= REPORTS_PER_DEVICE]
        return chosen, rng.sample(spent, min(exhausted, len(spent)))

    def verify(self, recipe_id: str) -> VerifiedRecipe:
        probe = Device(self.policy, self.config, http=self.http)
        try:
            verified = probe.fetch_recipe(recipe_id)
        finally:
            probe.close()
        if verified is None:
            raise SoakError(f"recipe {recipe_id} refused by the device: {probe.audit.entries()}")
        return verified

    def close(self) -> None:
        for d in self.devices:
            d.device.close()
        self.http.close()
        self.oracle.close()


# --- one scenario ------------------------------------------------------------------------------


class SoakError(Exception):
    """A scenario did not settle (a deadline passed); the message says where."""


class InvariantError(Exception):
    """An invariant does not hold; the message says which and by how much."""


@dataclass
class Pending:
    """One report a device queued in this scenario, and what the runner gave it."""

    owner: FleetDevice
    pending_id: int
    measurement: list[int]
    batch: Literal["main", "small"]


@dataclass
class Outcome:
    verdict: Literal["PASS", "FAIL"]
    accepted_main: int = 0
    accepted_small: int = 0
    collected: int | None = None
    refused: int = 0
    fired: list[str] = field(default_factory=list)
    problem: str = ""
    seconds: float = 0.0


#: Test hook: changes what the oracle believes was accepted before the comparison.
Tamper = Callable[[list[list[int]]], list[list[int]]]


class Armed:
    """The scenario's faults, waiting for their moments; each fires once."""

    def __init__(self, dep: SoakDeployment, scenario: Scenario, task_id: str) -> None:
        self.dep = dep
        self.faults = list(scenario.faults)
        self.task_id = task_id
        self.fired: list[str] = []
        self.errors: list[str] = []
        self._counts: dict[Phase, int] = {"upload": 0, "aggregation": 0, "collection": 0}
        self._done: set[int] = set()
        #: Proxy crossing index -> its rank among this task's requests of its phase.
        self._ranks: dict[int, int] = {}
        self._lock = threading.Lock()
        self._restarts: list[threading.Thread] = []

    def upload_answered(self) -> None:
        with self._lock:
            self._counts["upload"] += 1
            n = self._counts["upload"]
        self._tick("upload", n, None)

    def crossing(self, side: When) -> Callable[[Crossing], Action | None]:
        def hook(crossing: Crossing) -> Action | None:
            if self.task_id not in crossing.path:
                return None
            phase: Phase = "collection" if crossing.kind == "aggregate_share" else "aggregation"
            with self._lock:
                # Each crossing is seen twice, before and after: its rank is fixed on arrival.
                if crossing.index not in self._ranks:
                    self._counts[phase] += 1
                    self._ranks[crossing.index] = self._counts[phase]
                n = self._ranks[crossing.index]
            self._tick(phase, n, side)
            return None

        return hook

    def _tick(self, phase: Phase, n: int, side: When | None) -> None:
        due: list[Fault] = []
        with self._lock:
            for i, fault in enumerate(self.faults):
                if i in self._done or fault.phase != phase or fault.at != n:
                    continue
                if side is not None and (fault.when == "after") != (side == "after"):
                    continue
                self._done.add(i)
                due.append(fault)
        for fault in due:
            if fault.when == "mid":
                timer = threading.Timer(fault.mid_s, self._fire, (fault,))
                timer.daemon = True
                self._restarts.append(timer)
                timer.start()
            else:
                self._fire(fault)

    def _fire(self, fault: Fault) -> None:
        try:
            if fault.target == "postgres":
                self.dep.crash_database()
            else:
                self.dep.kill(fault.target)
        except Exception as exc:
            self.errors.append(f"{fault.describe()}: {exc}")
            return
        self.fired.append(fault.describe())
        thread = threading.Thread(target=self._revive, args=(fault,), daemon=True)
        self._restarts.append(thread)
        thread.start()

    def _revive(self, fault: Fault) -> None:
        time.sleep(fault.down_s)
        deadline = time.monotonic() + 90
        while True:
            try:
                self.dep.restart(fault.target)
                return
            except HarnessError as exc:
                # A service started while the database is still down may exit at start-up.
                if time.monotonic() > deadline:
                    self.errors.append(f"revive after {fault.describe()}: {exc}")
                    return
                time.sleep(0.5)

    def settle(self) -> None:
        for thread in self._restarts:
            thread.join(120)


def _hour(now: int) -> int:
    return now - now % PRECISION


def _recipe_draft(scenario: Scenario, tag: str) -> RecipeDraft:
    return RecipeDraft.model_validate(
        {
            "recipe_id": f"soak.{tag}.s{scenario.index}",
            "version": 1,
            "analysis_id": ANALYSIS,
            "query": {
                "stream": FIELD,
                "fields": [FIELD],
                "selection": {"kind": "random_event", "window_seconds": 86400},
            },
            "encoding": {"features": [{"kind": "categories", "field": FIELD, "values": EMOJI}]},
            # eps0 0.5 on 5 buckets: B = 10 reports meet (1, 1e-6) (`check_recipe_claims`).
            "randomizer": {"name": "one_hot", "eps0": 0.5, "symmetric": True},
            "sampling_rate": 1.0,
            "min_batch_size": MIN_BATCH,
            "privacy": {"epsilon": EPSILON, "delta": 1e-6, "analysis": "stronger_clones"},
            "task": {"time_precision": PRECISION},
        }
    )


def _queue(
    owner: FleetDevice,
    verified: VerifiedRecipe,
    report_time: int,
    rng: random.Random,
    batch: Literal["main", "small"],
) -> Pending | None:
    """Steps 2-5 on one device, with the randomized measurement chosen here (the truth)."""
    device = owner.device
    device.enroll(device.attester_url(verified.recipe))
    device.events.add(FIELD, {FIELD: rng.choice(EMOJI)}, report_time - 60)
    plan = device.plan(verified, report_time)
    if plan.status != "answer":
        device.commit(plan)
        return None
    assert plan.index is not None
    noise = np.random.default_rng(rng.getrandbits(64))
    (randomized,) = randomize_indices(verified.recipe, [plan.index], noise)
    assert isinstance(randomized, list)  # one-hot: a vector
    measurement = [int(x) for x in randomized]
    outcome = device.commit(plan, measurement)
    if outcome.status != "queued":
        return None
    assert outcome.pending_id is not None
    owner.answered += 1
    return Pending(owner, outcome.pending_id, measurement, batch)


def _stored(item: Pending) -> tuple[str, bytes | None, str]:
    """The device's row for this report: its state, the sealed report (once sealed), and the
    leader URL it goes to."""
    device = item.owner.device
    with device.db.lock:
        row = device.db.conn.execute(
            "SELECT state, report, recipe_id, version FROM pending_upload WHERE id = ?",
            (item.pending_id,),
        ).fetchone()
    assert row is not None
    leader = device.recipe(str(row[2]), int(row[3])).task.leader
    return str(row[0]), None if row[1] is None else bytes(row[1]), leader


def _report_id(report: bytes | None) -> bytes:
    return b"" if report is None else Report.decode(report).report_metadata.report_id.value


def _upload(fleet: Fleet, task_id: str, items: Sequence[Pending]) -> None:
    """Run the devices' uploads until every report has left its device and its fate is known:
    the SDK resumes what got no answer with the same bytes."""
    owners = list({id(i.owner): i.owner for i in items}.values())
    deadline = time.monotonic() + UPLOAD_DEADLINE_S
    while True:
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda o: o.device.run_due(), owners))
        unsettled = []
        for item in items:
            state, report, leader = _stored(item)
            if state == "pending":
                unsettled.append(item)
            elif fleet.oracle.fate(_report_id(report)) == "unknown":
                # The device gave up without an answer; whether the leader stored the report
                # is unknown, and the oracle must know: send the same bytes again.
                assert report is not None
                item.owner.device.uploader.put(leader, task_id, report)
                unsettled.append(item)
        if not unsettled:
            return
        if time.monotonic() > deadline:
            raise SoakError(f"{len(unsettled)} report(s) still without an answer")
        owners = list({id(i.owner): i.owner for i in unsettled}.values())
        time.sleep(0.3)


def _sum(measurements: Sequence[list[int]], length: int) -> list[int]:
    total = [0] * length
    for m in measurements:
        for i, x in enumerate(m):
            total[i] += x
    return total


def _collection(dep: SoakDeployment, task_id: str, start: int, deadline: float) -> str:
    while True:
        try:
            return request_collection(
                dep.http,
                dep.services["collector"].url,
                dep.keys.admin_tokens["collector"],
                task_id,
                {"type": "time_interval", "start": start, "duration": PRECISION},
            )
        except CollectError as exc:
            if time.monotonic() > deadline:
                raise SoakError(f"collection not accepted: {exc}") from None
            time.sleep(0.3)


def _job(dep: SoakDeployment, job_id: str) -> dict[str, Any]:
    try:
        response = dep.http.get(
            f"{dep.services['collector'].url}/collections/{job_id}",
            headers=dep.admin_headers("collector"),
        )
        response.raise_for_status()
    except httpx.HTTPError:
        return {"state": "unreachable"}
    body: dict[str, Any] = response.json()
    return body


def _wait(what: str, predicate: Callable[[], bool], deadline: float) -> None:
    while not predicate():
        if time.monotonic() > deadline:
            raise SoakError(f"timed out waiting for {what}")
        time.sleep(0.2)


def _aggregated(dep: SoakDeployment, task_id: str, expected: int) -> Callable[[], bool]:
    """Both aggregators have finished at least `expected` report aggregations and nothing is
    left waiting or in flight at the leader (`_check_agreement` then wants exactly)."""

    def done() -> bool:
        try:
            leader = dep.task_stats("leader", task_id)
            helper = dep.task_stats("helper", task_id)
        except httpx.HTTPError:
            return False
        states = leader["report_aggregations"]
        jobs = leader["aggregation_jobs"]
        return bool(
            leader["reports"].get("waiting", 0) == 0
            and sum(states.values()) == states.get("finished", 0) >= expected
            and sum(jobs.values()) == jobs.get("finished", 0)
            and helper["report_aggregations"].get("finished", 0) >= expected
        )

    return done


def run_scenario(
    dep: SoakDeployment, fleet: Fleet, scenario: Scenario, tag: str, tamper: Tamper | None = None
) -> Outcome:
    rng = random.Random(scenario.rng_seed)
    outcome = Outcome("FAIL")
    started = time.monotonic()
    proxy = dep.proxy
    assert proxy is not None
    task_id: str | None = None
    armed: Armed | None = None
    try:
        summary = publish_recipe(
            dep.urls["recipe-server"],
            dep.keys.analyst_token,
            _recipe_draft(scenario, tag),
            http=dep.http,
        )
        task_id = str(summary["task_id"])
        verified = fleet.verify(str(summary["recipe_id"]))
        armed = Armed(dep, scenario, task_id)
        proxy.schedule = Schedule(
            _derive(scenario.seed, scenario.index, "link"),
            weights=scenario.link or {Action.PASS: 1.0},
            delay_s=(0.05, 1.0),
        )
        proxy.before_hooks[:] = [armed.crossing("before")]
        proxy.hooks[:] = [armed.crossing("after")]
        fleet.oracle.on_upload_answer = armed.upload_answered
        now = int(time.time())
        main_time, small_time = _hour(now), _hour(now) - PRECISION
        fresh, spent = fleet.pick(rng, scenario.main + scenario.small, scenario.exhausted)
        items: list[Pending] = []
        for i, owner in enumerate(fresh):
            batch: Literal["main", "small"] = "main" if i < scenario.main else "small"
            queued = _queue(
                owner, verified, main_time if batch == "main" else small_time, rng, batch
            )
            if queued is None:
                raise InvariantError(f"a device with budget left did not answer: {owner}")
            items.append(queued)
        for owner in spent:
            if _queue(owner, verified, main_time, rng, "main") is not None:
                raise InvariantError("a device answered a recipe beyond its privacy budget")
        _upload(fleet, task_id, items)
        fates = {id(item): fleet.oracle.fate(_report_id(_stored(item)[1])) for item in items}
        main = [i.measurement for i in items if i.batch == "main" and fates[id(i)] == "counted"]
        small = [i.measurement for i in items if i.batch == "small" and fates[id(i)] == "counted"]
        outcome.refused = sum(1 for f in fates.values() if f == "refused")
        if outcome.refused:
            # Every device here is honest, with its own token, and every upload comes before
            # the collection: a refusal is a report lost to a fault.
            refused = next(i for i in items if fates[id(i)] == "refused")
            why = fleet.oracle.refusals.get(_report_id(_stored(refused)[1]), "?")
            raise InvariantError(f"{outcome.refused} honest report(s) refused, e.g. {why}")
        outcome.accepted_main, outcome.accepted_small = len(main), len(small)
        for item in items:
            if fates[id(item)] == "counted":
                item.owner.counted += 1
        deadline = time.monotonic() + COLLECT_DEADLINE_S
        small_job = _collection(dep, task_id, small_time, deadline)
        main_job = _collection(dep, task_id, main_time, deadline)
        _wait(
            "the main collection",
            lambda: _job(dep, main_job)["state"] in ("complete", "failed"),
            deadline,
        )
        body = _job(dep, main_job)
        _wait(
            "leader and helper to aggregate every report",
            _aggregated(dep, task_id, len(main) + len(small)),
            deadline,
        )
        armed.settle()
        truth = tamper(main) if tamper is not None else main
        outcome.collected = body.get("report_count")
        _check_collection(body, truth)
        _check_withheld(dep, task_id, _job(dep, small_job), len(small))
        _check_agreement(dep, task_id, len(main) + len(small), len(main))
        _check_budgets(dep, fleet)
        if armed.errors:
            raise SoakError("; ".join(armed.errors))
        outcome.verdict = "PASS"
    except Exception as exc:  # any failure is this scenario's verdict, with its seed
        outcome.problem = f"{type(exc).__name__}: {exc}"
    finally:
        fleet.oracle.on_upload_answer = None
        proxy.before_hooks.clear()
        proxy.hooks.clear()
        proxy.schedule = Schedule(0)
        if armed is not None:
            armed.settle()
            outcome.fired = armed.fired
        with contextlib.suppress(Exception):
            dep.revive()
        if task_id is not None:
            # Stops the leader answering the withheld batch's collection, polled forever.
            with contextlib.suppress(Exception):
                dep.delete_task(task_id)
    outcome.seconds = time.monotonic() - started
    return outcome


def _check_collection(body: dict[str, Any], truth: list[list[int]]) -> None:
    if body.get("state") != "complete":
        raise InvariantError(f"main batch not collected: {body.get('state')} {body.get('error')}")
    result = body.get("result")
    if not isinstance(result, list):
        raise InvariantError(f"collected aggregate is not a vector: {result!r}")
    if body.get("report_count") != len(truth):
        raise InvariantError(
            f"collected {body.get('report_count')} reports, {len(truth)} were accepted"
        )
    expected = _sum(truth, len(result))
    if result != expected:
        raise InvariantError(f"aggregate {result} != sum of accepted measurements {expected}")
    if len(truth) < MIN_BATCH:
        raise InvariantError(f"a batch of {len(truth)} < B={MIN_BATCH} reports was released")


def _check_withheld(dep: SoakDeployment, task_id: str, job: dict[str, Any], accepted: int) -> None:
    if accepted >= MIN_BATCH:
        raise InvariantError(f"the small batch holds {accepted} accepted reports, not < B")
    if job.get("state") in ("complete",) or "result" in job:
        raise InvariantError(f"a batch of {accepted} < B={MIN_BATCH} reports was released: {job}")
    leader = dep.task_stats("leader", task_id)
    if leader.get("batches_collected") != 1:
        raise InvariantError(f"the leader collected {leader.get('batches_collected')} batches")


def _check_agreement(dep: SoakDeployment, task_id: str, accepted: int, collected: int) -> None:
    leader = dep.task_stats("leader", task_id)
    helper = dep.task_stats("helper", task_id)
    ours = leader["report_aggregations"].get("finished", 0)
    theirs = helper["report_aggregations"].get("finished", 0)
    received = leader["reports"].get("received", 0)
    if not ours == theirs == accepted == received:
        raise InvariantError(
            f"leader aggregated {ours}, helper {theirs}, leader stored {received}, "
            f"{accepted} were accepted"
        )
    open_batches = sum(int(b["reports"]) for b in leader.get("open_batches", []))
    if open_batches != accepted - collected:
        raise InvariantError(f"{open_batches} reports in open batches, {accepted - collected} left")


def _check_budgets(dep: SoakDeployment, fleet: Fleet) -> None:
    charges = dep.attester_charges()
    allowance = fleet.policy.analysis_allowance(ANALYSIS)
    field_allowance = fleet.policy.fields[FIELD]
    for n, d in enumerate(fleet.devices):
        budget = BudgetAccountant(d.device.db, fleet.policy)
        analysis, field_usage = budget.analysis_usage(ANALYSIS), budget.field_usage(FIELD)
        if d.counted > allowance.reports or analysis.reports_used > allowance.reports:
            raise InvariantError(
                f"device {n}: {d.counted} reports counted, {analysis.reports_used} spent, "
                f"{allowance.reports} allowed"
            )
        if analysis.eps_used > allowance.epsilon + 1e-9:
            raise InvariantError(f"device {n}: epsilon {analysis.eps_used} spent")
        if (
            field_usage.reports_used > field_allowance.reports
            or field_usage.eps_used > field_allowance.epsilon + 1e-9
        ):
            raise InvariantError(f"device {n}: field budget {field_usage} overspent")
        charged = charges.get(d.identity.device_id, 0)
        with d.device.db.lock:
            (held,) = d.device.db.conn.execute("SELECT COUNT(*) FROM token").fetchone()
        if charged > QUOTA_TOKENS or int(held) > QUOTA_TOKENS:
            raise InvariantError(
                f"device {n}: {charged} tokens charged, {held} held, quota {QUOTA_TOKENS}"
            )


# --- the run -----------------------------------------------------------------------------------


@dataclass
class Summary:
    seed: int
    passed: int = 0
    failed: list[int] = field(default_factory=list)
    seconds: float = 0.0
    drawn: int = 0
    fired: int = 0
    lossy: int = 0
    accepted: int = 0

    @property
    def ok(self) -> bool:
        return not self.failed


def reproduce(seed: int, index: int) -> str:
    return (
        f"make soak SOAK_SEED={seed} SOAK_ONLY={index}  "
        f"(or: python -m tests.soak --seed {seed} --scenario {index})"
    )


def run(
    dep: SoakDeployment,
    seed: int,
    indices: Iterable[int],
    out: TextIO,
    *,
    tamper: dict[int, Tamper] | None = None,
) -> Summary:
    """Run the scenarios `indices` of `seed` on `dep`, one line each, then a summary."""
    summary = Summary(seed)
    began = time.monotonic()
    tag = f"{seed}.{int(time.time())}"
    fleet = Fleet.create(dep)
    try:
        for index in indices:
            scenario = draw(seed, index)
            result = run_scenario(dep, fleet, scenario, tag, (tamper or {}).get(index))
            line = (
                f"seed={seed} scenario={index:3d} faults=[{scenario.describe()}] "
                f"fired={len(result.fired)}/{len(scenario.faults)} "
                f"accepted={result.accepted_main}+{result.accepted_small} "
                f"collected={result.collected} refused={result.refused} "
                f"{result.seconds:5.1f}s {result.verdict}"
            )
            print(line, file=out, flush=True)
            summary.drawn += len(scenario.faults)
            summary.fired += len(result.fired)
            summary.lossy += scenario.link is not None
            summary.accepted += result.accepted_main + result.accepted_small
            if result.verdict == "PASS":
                summary.passed += 1
            else:
                summary.failed.append(index)
                print(f"  FAILED: {result.problem}", file=out)
                print(f"  reproduce: {reproduce(seed, index)}", file=out, flush=True)
    finally:
        fleet.close()
    summary.seconds = time.monotonic() - began
    verdict = "all passed" if summary.ok else f"{len(summary.failed)} FAILED"
    print(
        f"soak seed={seed}: {summary.passed + len(summary.failed)} scenarios, "
        f"{summary.passed} passed, {verdict} in {summary.seconds:.0f} s; "
        f"{summary.fired} of {summary.drawn} kills and crashes fired, {summary.lossy} lossy "
        f"links, {summary.accepted} reports accepted",
        file=out,
    )
    for index in summary.failed:
        print(f"  scenario {index} failed; reproduce: {reproduce(seed, index)}", file=out)
    out.flush()
    return summary
