"""The device simulator: N SDK devices answering one recipe, to load a deployment.

Every simulated device is a real `Device` (its own budget, coins and audit log, and its own
attester identity when a manufacturer CA is given). `run` streams a seeded population
(`client_sdk.population`) through in chunks: a chunk's devices are made, answer, fetch their
tokens, upload and are dropped, and their durable state (budget, tokens, audit, events) stays
in the worker's store (one SQLite file of state and one of events, every row keyed by device:
`StateDb.scoped`), so memory does not grow with the population. `run(shard=...)` simulates one
share of the population (`sagg devices run --workers N --shard i/k`). The expensive steps are
batched across devices where the protocol allows it, without sharing anything a device must
not share:

- local randomization: one numpy call per chunk, each row its own independent noise
  (`client_sdk.query.randomize_indices`), from the chunk's seeded generator in `run` and from
  the OS CSPRNG for a kept population (`devices`, `answer`);
- Prio3 sharding: `shard_batch` over a chunk of reports (fresh report ids and randomness per
  report); HPKE sealing stays per report (`client_sdk.reports`);
- requests: one thread pool (started once per simulator) over one keep-alive client
  (`client_sdk.http.pooled_client`: httpx cost five times its CPU per request), a network
  phase as one task per thread taking the next device (`Simulator._each`). Every device
  sends its own requests (enrolment, its batched token request, its upload), as a real one
  would; nothing of two devices is merged into one request, except in relay mode below.

Relay mode (``relay=True``, ``sagg devices run --relay``; off by default): a DAP-19 task's
reports of a chunk go to the leader in one UploadRequest (DAP-19 §4.4.2 lets one carry many
reports), as an upload relay forwarding many devices' reports would send them: the papers
need uploads the aggregators cannot tie to a device (dp.md §2.2: hidden sampling needs
anonymous upload), and a relay that batches is one way to get that. sagg runs no relay
service: this mode is the simulator sending what such a relay would. Each report's outcome
is read from UploadErrors and recorded by its own device; a report sealed to an outdated
config then takes its device's own path (`Device.send`: the recipe fetched and verified
again, one fresh report). DAP-09 has no bulk upload: one PUT per report in either mode.

A device's store writes keep their units (budget with its pending row, tokens with the row
they are attached to, sealed report, sent mark: the crash-safety units `client_sdk.device`
describes), but the main thread's phases commit a chunk's at once (`together`: each device's
unit a savepoint of one transaction per chunk): its enrolment marks (after the chunk's
enrolments; enrolling again after a crash is harmless), budget charges, sealed reports (all
stored before any is sent) and upload outcomes (recorded after the chunk's uploads; a crash
before that commit leaves them pending, and a resumed run re-sends the same bytes, which the
leader deduplicates). A commit in a worker store (file lock held, no sync) cost about 27 µs,
six a device with tokens; now a device commits once alone (its tokens attached to its pending
row as they arrive on a pool thread) and shares four with its chunk. The synthetic data a
chunk's devices start with is not theirs to decide: it goes into the event store in one
transaction per chunk (`EventStore.add_devices`; one per device cost 55 µs a device, 12 now).

The recipe is fetched and verified once (by the first device, through the log) and the
verified bytes handed to every device, and the issuer directory is fetched once for all: they
all would receive the same bytes.

`run` makes a fresh population per recipe. `devices` and `answer` keep one population across
several recipes instead (an interactive analysis, 000 §1 and §4.1): each device keeps its event
store and its budget accountant, so the recipes' budgets compose on every device (000 §4.3).
`SimulationSummary.truth` is the ground truth the aggregate estimates: the one-hot index (the
integer value, for bit pushing; the string, for SFP) each uploaded report randomized.

Randomized donation times (001 appendix A) run on a compressed clock: devices pick their slot
as usual, and the simulator walks the slots in order, sleeping ``slot_seconds / time_scale``
real seconds between them (0 with the default infinite scale); in `run`, each chunk walks its
own devices' slots from the same start.
"""

from __future__ import annotations

import contextlib
import secrets
import sys
import tempfile
import threading
import time
import weakref
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, TextIO, TypeVar, cast

import numpy as np
import rich.progress
from rich.console import Console

from client_sdk.datagen import generate_events
from client_sdk.device import Device, DeviceConfig, PendingUpload, Plan
from client_sdk.events import EventStore
from client_sdk.http import HttpClient, pooled_client
from client_sdk.policy import AnalysisAllowance, DevicePolicy, FieldAllowance, TrustedParties
from client_sdk.population import (
    CHUNK,
    PopulationMix,
    Shard,
    chunk_devices,
    chunk_noise,
    device_random,
)
from client_sdk.query import Answer, randomize_indices
from client_sdk.recipes import VerifiedRecipe
from client_sdk.reports import ReportInput, build_reports
from client_sdk.storage import StateDb
from client_sdk.tokens import DeviceIdentity, TokenError
from client_sdk.upload import Uploader, UploadResult
from shared.files import create_private, private_dir
from shared.privacypass.directory import IssuerDirectory
from shared.recipe.model import Recipe
from shared.recipe.query_class import QueryClass
from shared.vdaf.plain_aggregate import PlainAggregate

__all__ = ["SimulationSummary", "Simulator", "permissive_policy", "worker_stores"]

_T = TypeVar("_T")
#: The end of `Simulator._each`'s feed.
_DONE = object()


@dataclass
class SimulationSummary:
    devices: int = 0
    sampled: int = 0
    not_sampled: int = 0
    refused: Counter[str] = field(default_factory=Counter)
    uploaded: int = 0
    failed: Counter[str] = field(default_factory=Counter)
    seconds: float = 0.0
    #: CPU seconds of the simulating process (all its threads) while it ran: summed over shards.
    cpu_seconds: float = 0.0
    report_bytes: int = 0
    #: One-hot index (the value, for bit pushing; the string, for SFP) -> number of uploaded
    #: real reports that encoded it.
    truth: Counter[Answer] = field(default_factory=Counter)
    #: Devices offline for the window (`PopulationMix.offline`): they did nothing.
    offline: int = 0
    #: Dummy reports queued by devices not sampled (001 §4.6), and of those uploaded.
    dummies: int = 0
    dummies_uploaded: int = 0
    #: Sybil devices that answered (`PopulationMix.sybils`), counted in `sampled` too.
    sybils: int = 0
    #: What the adversaries tried -> how the deployment answered.
    adversary: Counter[str] = field(default_factory=Counter)
    #: Wall clock (`time.time`) when `run` started and ended: shards that ran side by side in
    #: processes started a little apart, so their `seconds` is the span from the first start
    #: to the last end, not the longest shard's own time.
    started: float | None = None
    ended: float | None = None
    #: Task id -> the plain-text aggregate of the measurements its uploaded reports carry
    #: (real and dummy): what collecting exactly them must give, an oracle kept as they go.
    sent: dict[str, PlainAggregate] = field(default_factory=dict)

    def merge(self, other: SimulationSummary) -> None:
        """Add another shard's counts (`seconds`: the span over both, `started` to `ended`)."""
        for f in fields(self):
            mine, theirs = getattr(self, f.name), getattr(other, f.name)
            if isinstance(mine, Counter):
                mine.update(theirs)
            elif f.name == "sent":
                for task_id, total in theirs.items():
                    mine.setdefault(task_id, PlainAggregate(total.spec)).merge(total)
            elif f.name not in ("seconds", "started", "ended"):
                setattr(self, f.name, mine + theirs)
        self.seconds = max(self.seconds, other.seconds)
        if other.started is not None and other.ended is not None:
            if self.started is None or self.ended is None:
                self.started, self.ended = other.started, other.ended
            else:
                self.started = min(self.started, other.started)
                self.ended = max(self.ended, other.ended)
                self.seconds = max(self.seconds, self.ended - self.started)

    def as_json(self) -> dict[str, Any]:
        """The summary as one JSON object (`sagg devices run --summary-json`): the counts, the
        ground truth as [answer, count] pairs, and each task's sent aggregate."""
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "truth":
                out[f.name] = [[answer, n] for answer, n in value.most_common()]
            elif f.name == "sent":
                out[f.name] = {
                    task_id: {"reports": total.reports, "aggregate": total.result}
                    for task_id, total in value.items()
                }
            else:
                out[f.name] = dict(value) if isinstance(value, Counter) else value
        return out

    @property
    def reports_per_second(self) -> float:
        return self.uploaded / self.seconds if self.seconds > 0 else 0.0

    def lines(self) -> list[str]:
        out = [
            f"devices {self.devices}: sampled {self.sampled}, not sampled {self.not_sampled}, "
            f"refused {sum(self.refused.values())}, uploaded {self.uploaded}, "
            f"failed {sum(self.failed.values())}",
            f"{self.seconds:.1f} s, {self.reports_per_second:.1f} reports/s, "
            f"{self.report_bytes / max(1, self.uploaded):.0f} bytes/report, "
            f"CPU {self.cpu_seconds:.2f} s",
        ]
        if self.offline or self.dummies or self.sybils:
            out.append(
                f"offline {self.offline}, dummy reports {self.dummies} "
                f"(uploaded {self.dummies_uploaded}), sybils {self.sybils}"
            )
        out += [f"  adversary x{n}: {what}" for what, n in self.adversary.most_common()]
        out += [f"  refused x{n}: {reason}" for reason, n in self.refused.most_common(5)]
        out += [f"  failed x{n}: {reason}" for reason, n in self.failed.most_common(5)]
        return out


def permissive_policy(
    recipe_fields: tuple[str, ...], stream: str, trusted: TrustedParties
) -> DevicePolicy:
    """A policy admitting the recipe's stream and fields with generous budgets (for load
    tests; a real device ships its own), through the `trusted` parties only."""
    return DevicePolicy(
        trusted=trusted,
        query_classes=(
            QueryClass(
                name="simulation",
                streams=(stream,),
                fields=recipe_fields,
                max_local_epsilon=20,
                max_epsilon=10,
                max_delta=1e-3,
            ),
        ),
        default_analysis=AnalysisAllowance(epsilon=100, reports=100),
        fields={
            f: FieldAllowance(local_epsilon=20, epsilon=100, reports=100) for f in recipe_fields
        },
    )


class Progress:
    """Progress of one phase on `stream` (None: silent): on a terminal a Rich bar redrawn in
    place; elsewhere (a pipe, a log file) one line once the phase is done, so no carriage
    return ever reaches a file."""

    def __init__(self, total: int, label: str, stream: TextIO | None) -> None:
        self.total, self.label, self.stream = max(1, total), label, stream
        self.done = 0
        self._lock = threading.Lock()
        self._last = 0.0
        self._bar: rich.progress.Progress | None = None
        if stream is not None and Console(file=stream).is_terminal:
            # Redrawn from `add` only (no refresh thread): a phase that ends early leaves none.
            self._bar = rich.progress.Progress(
                rich.progress.TextColumn(f"{label:<10}"),
                rich.progress.BarColumn(),
                rich.progress.MofNCompleteColumn(),
                console=Console(file=stream),
                auto_refresh=False,
            )
            self._task = self._bar.add_task(label, total=self.total)
            self._bar.start()
            # A phase cut short by an exception: the terminal gets its cursor back anyway.
            weakref.finalize(self, self._bar.stop)

    def add(self, n: int = 1) -> None:
        with self._lock:
            self.done += n
            finished = self.done >= self.total
            now = time.monotonic()
            if self.stream is None or (now - self._last < 0.1 and not finished):
                return
            self._last = now
            if self._bar is not None:
                self._bar.update(self._task, completed=self.done, refresh=True)
                if finished:
                    self._bar.stop()
            elif finished:
                self.stream.write(f"{self.label:<10} {self.done}/{self.total}\n")
                self.stream.flush()


class Simulator:
    def __init__(
        self,
        config: DeviceConfig,
        *,
        policy: DevicePolicy | None = None,
        trusted: TrustedParties | None = None,
        http: HttpClient | None = None,
        identities: Callable[[], DeviceIdentity] | None = None,
        directory: Path | None = None,
        concurrency: int = 16,
        seed: int = 0,
        time_scale: float = float("inf"),
        clock: Callable[[], int] | None = None,
        progress: TextIO | None = sys.stderr,
        uploader: Uploader | None = None,
        mix: PopulationMix | None = None,
        relay: bool = False,
    ) -> None:
        """`policy`, or without one a permissive one (`permissive_policy`) through the
        `trusted` parties, which must then be given. `mix`: who is offline, when devices
        answer, and the adversaries of `run`'s population (`PopulationMix`)."""
        if policy is None and trusted is None:
            raise ValueError("a simulator needs a device policy or the parties it trusts")
        self.config = config
        self.policy = policy
        self.trusted = policy.trusted if policy is not None else trusted
        self.http = http or pooled_client(config.transport, timeout=30.0, max_idle=concurrency)
        self.uploader = uploader or Uploader(self.http)
        self.identities = identities
        self.directory = directory
        self.concurrency = max(1, concurrency)
        self.seed = seed
        self.mix = mix or PopulationMix()
        #: Relay mode (module docstring): a chunk's DAP-19 reports in one UploadRequest.
        self.relay = relay
        #: Issuer directories, fetched once for every device of this simulator.
        self.directories: dict[str, IssuerDirectory] = {}
        self.time_scale = time_scale
        self.base_clock = clock or (lambda: int(time.time()))
        self.offset = 0
        self.progress = progress
        #: (device, pending upload id) -> the index it randomized, until the report is sent.
        self._indices: dict[tuple[int, int], Answer] = {}
        #: (device, pending upload id) of the dummy reports (001 §4.6) not yet sent.
        self._dummies: set[tuple[int, int]] = set()
        self._lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None

    @property
    def pool(self) -> ThreadPoolExecutor:
        """The simulator's threads for network phases, started once: a pool per phase and
        chunk started thousands of threads in a run (a tenth of its CPU)."""
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.concurrency, thread_name_prefix="sagg-device")
            weakref.finalize(self, self._pool.shutdown, wait=False)
        return self._pool

    def now(self) -> int:
        return self.base_clock() + self.offset

    def _device(self, i: int, policy: DevicePolicy) -> Device:
        identity = self.identities() if self.identities else None
        return Device(
            policy,
            self.config,
            directory=None if self.directory is None else self.directory / f"device-{i:06d}",
            http=self.http,
            identity=identity,
            clock=self.now,
            uploader=self.uploader,
            directories=self.directories,
        )

    def devices(self, count: int, policy: DevicePolicy, first: int = 0) -> list[Device]:
        """`count` new devices with this policy, numbered from `first` (their store
        directories, when the simulator has one); close them with `close`."""
        return [self._device(first + i, policy) for i in range(count)]

    @staticmethod
    def close(devices: list[Device]) -> None:
        for device in devices:
            device.close()

    def run(
        self,
        recipe_id: str,
        count: int,
        data: str,
        *,
        version: int | None = None,
        verified: VerifiedRecipe | None = None,
        shard: Shard | None = None,
    ) -> SimulationSummary:
        """Share `shard` (default: all) of the seeded population of `count` devices answers
        the recipe, chunk by chunk (the module docstring)."""
        shard = shard or Shard()
        mix = self.mix
        total = count + mix.sybils
        summary = SimulationSummary(devices=shard.devices(total), started=time.time())
        start, cpu = time.perf_counter(), time.process_time()
        verified = verified or self.verify(recipe_id, version)
        if verified is None:
            summary.refused["recipe could not be verified"] = summary.devices
            summary.seconds = time.perf_counter() - start
            summary.cpu_seconds = time.process_time() - cpu
            summary.ended = time.time()
            return summary
        recipe = verified.recipe
        policy = self.policy or self._permissive(recipe.query.fields, recipe.query.stream)
        bar = Progress(summary.devices, "devices", self.progress)
        begin = self.now()
        with worker_stores(self.directory, shard) as (state, events):
            for chunk in shard.chunks(total):
                numbers = chunk_devices(chunk, total)
                online = [i for i in numbers if i >= count or not mix.is_offline(self.seed, i)]
                summary.offline += len(numbers) - len(online)
                # The Sybils answer together, at the start (the surge).
                offsets = [
                    0 if i >= count else mix.clock_offset(self.seed, i, begin) for i in online
                ]
                devices = [
                    self._member(i, policy, state, events, offset)
                    for i, offset in zip(online, offsets, strict=True)
                ]
                events.add_devices(
                    recipe.query.stream,
                    (
                        (
                            i,
                            generate_events(
                                data, recipe, device_random(self.seed, "data", i), d.clock()
                            ),
                        )
                        for i, d in zip(online, devices, strict=True)
                    ),
                )
                fixed: list[Answer | None] = [
                    mix.sybil_answer if i >= count else None for i in online
                ]
                malicious = {
                    id(d)
                    for i, d in zip(online, devices, strict=True)
                    if i < count and mix.is_malicious(self.seed, i)
                }
                summary.sybils += sum(i >= count for i in online)
                offset = self.offset
                try:
                    self._enroll(devices, verified, summary, quiet=True)
                    noise = chunk_noise(self.seed, chunk)
                    self._answer(devices, verified, summary, noise, fixed=fixed)
                    self._donate(devices, summary, quiet=True, malicious=malicious)
                finally:
                    # The next chunk starts from the same clock, not after this one's slots.
                    self.offset = offset
                    self.close(devices)
                    # Nothing of a chunk's devices outlives it (a report that never left
                    # leaves its entry behind).
                    self._indices.clear()
                    self._dummies.clear()
                bar.add(len(numbers))
        summary.seconds = time.perf_counter() - start
        summary.cpu_seconds = time.process_time() - cpu
        summary.ended = time.time()
        return summary

    def _member(
        self, i: int, policy: DevicePolicy, state: StateDb, events: EventStore, offset: int
    ) -> Device:
        """Device `i` of the seeded population, its state in the worker's stores, its clock
        `offset` seconds from the simulation's."""
        return Device(
            policy,
            self.config,
            http=self.http,
            identity=self.identities() if self.identities else None,
            clock=lambda: self.now() + offset,
            rng=device_random(self.seed, "coins", i),
            uploader=self.uploader,
            stores=(state.scoped(i), events.scoped(i)),
            directories=self.directories,
        )

    def answer(
        self,
        devices: list[Device],
        verified: VerifiedRecipe,
        summary: SimulationSummary | None = None,
    ) -> SimulationSummary:
        """Steps 2-7 of `client_sdk.device` for one verified recipe on these devices (enrolling
        those not yet enrolled with the recipe's attester). The devices stay open."""
        summary = summary if summary is not None else SimulationSummary(devices=len(devices))
        start, cpu = time.perf_counter(), time.process_time()
        self._enroll(devices, verified, summary)
        # A kept population is not a seeded one: its noise comes from the OS CSPRNG.
        self._answer(
            devices, verified, summary, np.random.default_rng(secrets.randbits(128)), bar=True
        )
        self._donate(devices, summary)
        summary.seconds += time.perf_counter() - start
        summary.cpu_seconds += time.process_time() - cpu
        return summary

    def _enroll(
        self,
        devices: list[Device],
        verified: VerifiedRecipe,
        summary: SimulationSummary,
        quiet: bool = False,
    ) -> None:
        if self.config.use_tokens and self.identities is not None:
            recipe = verified.recipe
            enrolled: list[tuple[Device, str]] = []

            def enroll(device: Device) -> None:
                url = device.attester_url(recipe)
                if device.tokens.enroll(url, record=False):
                    enrolled.append((device, url))

            self._parallel(enroll, devices, "enrolling", summary, quiet)
            # The enrolments recorded in one transaction, not one a device on its thread.
            with together(devices):
                for device, url in enrolled:
                    device.tokens.record_enrolment(url)

    def _permissive(self, fields: tuple[str, ...], stream: str) -> DevicePolicy:
        assert self.trusted is not None  # __init__
        return permissive_policy(fields, stream, self.trusted)

    def verify(self, recipe_id: str, version: int | None = None) -> VerifiedRecipe | None:
        """The recipe as a device fetches and verifies it (None: refused, e.g. not logged)."""
        probe = Device(
            self.policy or self._permissive(("x",), "x"),
            self.config,
            http=self.http,
            clock=self.now,
        )
        try:
            return probe.fetch_recipe(recipe_id, version)
        finally:
            probe.close()

    def _parallel(
        self,
        fn: Callable[[_T], object],
        items: Sequence[_T],
        label: str,
        summary: SimulationSummary,
        quiet: bool = False,
    ) -> None:
        bar = Progress(len(items), label, None if quiet else self.progress)

        def one(item: _T) -> None:
            try:
                fn(item)
            except TokenError as exc:
                summary.failed[f"{label}: {exc}"] += 1
            bar.add()

        self._each(one, items)

    def _each(self, fn: Callable[[_T], object], items: Sequence[_T]) -> None:
        """`fn` on every item over the pool's threads: a few tasks, each taking the next item
        until none is left (a task per item cost a future and a thread wake-up each). An
        exception of `fn` does not stop the others: the first is raised once all are done."""
        feed = iter(items)
        lock = threading.Lock()

        def drain() -> Exception | None:
            failure: Exception | None = None
            while True:
                with lock:
                    item = next(feed, _DONE)
                if item is _DONE:
                    return failure
                try:
                    fn(cast(_T, item))
                except Exception as exc:
                    failure = failure or exc

        tasks = [self.pool.submit(drain) for _ in range(min(self.concurrency, len(items)))]
        failures = [failure for failure in (task.result() for task in tasks) if failure]
        if failures:
            raise failures[0]

    def _answer(
        self,
        devices: list[Device],
        verified: VerifiedRecipe,
        summary: SimulationSummary,
        rng: np.random.Generator,
        bar: bool = False,
        fixed: list[Answer | None] | None = None,
    ) -> None:
        """Steps 2-5, randomizing a chunk at a time with `rng` (every row its own noise);
        `fixed[k]`, when not None, is the answer device k gives whatever its data (a Sybil)."""
        progress = Progress(len(devices), "answering", self.progress if bar else None)
        for lo in range(0, len(devices), CHUNK):
            chunk = devices[lo : lo + CHUNK]
            plans: list[Plan] = [d.plan(verified) for d in chunk]
            if fixed is not None:
                plans = [
                    replace(p, index=a) if a is not None and p.status == "answer" else p
                    for p, a in zip(plans, fixed[lo : lo + CHUNK], strict=True)
                ]
            answering = [p.index for p in plans if p.status == "answer"]
            measurements = iter(randomize_indices(verified.recipe, answering, rng))  # type: ignore[arg-type]
            with together(chunk):
                outcomes = [
                    device.commit(plan, next(measurements) if plan.status == "answer" else None)
                    for device, plan in zip(chunk, plans, strict=True)
                ]
            for device, plan, outcome in zip(chunk, plans, outcomes, strict=True):
                if outcome.status == "queued":
                    assert plan.index is not None and outcome.pending_id is not None
                    self._indices[(id(device), outcome.pending_id)] = plan.index
                    summary.sampled += 1
                elif outcome.status == "dummy":
                    assert outcome.pending_id is not None
                    self._dummies.add((id(device), outcome.pending_id))
                    summary.not_sampled += 1
                    summary.dummies += 1
                elif outcome.status == "not_sampled":
                    summary.not_sampled += 1
                else:
                    summary.refused[outcome.reason[:120]] += 1
            progress.add(len(chunk))

    def _donate(
        self,
        devices: list[Device],
        summary: SimulationSummary,
        quiet: bool = False,
        malicious: set[int] | None = None,
    ) -> None:
        """Steps 6-7 on the compressed clock; the devices whose id is in `malicious` then
        replay their tokens in a second report."""
        pending: list[tuple[Device, PendingUpload]] = [(d, p) for d in devices for p in d.pending()]
        if not pending:
            return
        bar = Progress(len(pending), "uploading", None if quiet else self.progress)
        events = {p.donation_time for _, p in pending} | {p.token_fetch_at for _, p in pending}
        previous = self.now()
        for t in sorted(events):
            if t > previous and self.time_scale != float("inf"):
                time.sleep((t - previous) / self.time_scale)
            # The compressed clock: jump to the next slot instead of waiting for it.
            self.offset = max(self.offset, t - self.base_clock())
            previous = t
            if self.config.use_tokens:
                fetching = [k for k, (_, p) in enumerate(pending) if p.token_fetch_at == t]

                def fetch(k: int, t: int = t) -> None:
                    # The item as it is now, its tokens attached (`Device.prefetch`).
                    device, item = pending[k]
                    pending[k] = (device, device.prefetch(item, t))

                self._parallel(fetch, fetching, "tokens", summary, quiet=True)
            due = [(d, p) for d, p in pending if p.donation_time == t]
            self._upload(due, t, summary, bar, malicious or set())

    def _upload(
        self,
        due: list[tuple[Device, PendingUpload]],
        now: int,
        summary: SimulationSummary,
        bar: Progress,
        malicious: set[int],
    ) -> None:
        for lo in range(0, len(due), CHUNK):
            chunk = due[lo : lo + CHUNK]
            inputs: list[tuple[Device, PendingUpload, ReportInput]] = []
            # The chunk's tokens taken (when not attached at the fetch) and its sealed reports
            # stored in one transaction: all before any of them is sent.
            with together([device for device, _ in chunk]):
                for device, item in chunk:
                    try:
                        report_input = device.report_input(item, now)
                    except (TokenError, ValueError) as exc:
                        summary.failed[f"no token: {exc}"] += 1
                        bar.add()
                        continue
                    inputs.append((device, item, report_input))
                if not inputs:
                    continue
                first = inputs[0][0]
                recipe = first.recipe(inputs[0][1].recipe_id, inputs[0][1].version)
                reports = build_reports(
                    recipe.task.vdaf.instance(),
                    first.wire(recipe),
                    [r for _, _, r in inputs],
                    first.config_for(recipe, "leader"),
                    first.config_for(recipe, "helper"),
                )
                stored = [
                    (device, device.store_report(item, report))
                    for (device, item, _), report in zip(inputs, reports, strict=True)
                ]

            if self.relay and first.wire(recipe).dap == "dap-19":
                self._send_bulk(stored, recipe, now, summary, bar, malicious)
                continue

            delivered: list[tuple[Device, PendingUpload, Recipe, UploadResult]] = []
            try:
                self._deliver(stored, now, delivered)
            finally:
                # Should one device's upload raise, the others' outcomes are recorded first.
                self._finish(delivered, summary, bar, malicious, now)

    def _deliver(
        self,
        stored: list[tuple[Device, PendingUpload]],
        now: int,
        delivered: list[tuple[Device, PendingUpload, Recipe, UploadResult]],
    ) -> None:
        """Each stored report uploaded by its own device over the pool's threads; each one's
        device, item as sent, recipe and result (`Device.deliver`) appended to `delivered`, not
        recorded yet."""

        def send(pair: tuple[Device, PendingUpload]) -> None:
            device, item = pair
            delivered.append((device, *device.deliver(item, now)))

        self._each(send, stored)

    def _send_bulk(
        self,
        stored: list[tuple[Device, PendingUpload]],
        recipe: Recipe,
        now: int,
        summary: SimulationSummary,
        bar: Progress,
        malicious: set[int],
    ) -> None:
        """Relay mode: one UploadRequest for the chunk's DAP-19 reports (module docstring)."""
        reports = [item.report or b"" for _, item in stored]
        results = self.uploader.upload(
            "dap-19",
            recipe.task.leader,
            recipe.task.task_id,
            reports,
            announce=Device.announcement(recipe),
            resent=[item.attempts > 0 for _, item in stored],
        )
        delivered = [
            (device, *device.deliver(item, now))
            if result.status == "outdated_config"
            else (device, item, recipe, result)
            for (device, item), result in zip(stored, results, strict=True)
        ]
        self._finish(delivered, summary, bar, malicious, now)

    def _finish(
        self,
        delivered: list[tuple[Device, PendingUpload, Recipe, UploadResult]],
        summary: SimulationSummary,
        bar: Progress,
        malicious: set[int],
        now: int,
    ) -> None:
        """Record a chunk's upload outcomes on its devices in one transaction (a crash before
        it commits leaves the reports pending, and a resumed run re-sends the same bytes,
        which the leader deduplicates), then count them; the malicious devices that got a
        report in then replay its tokens."""
        with together([device for device, *_ in delivered]):
            for device, item, recipe, result in delivered:
                device.finish(item, recipe, result, now)
        replaying: list[tuple[Device, PendingUpload]] = []
        for device, item, recipe, result in delivered:
            self._record(device, item, recipe, result, summary, bar)
            if result.status == "sent" and id(device) in malicious:
                replaying.append((device, item))

        def replay(pair: tuple[Device, PendingUpload]) -> None:
            outcome = self._replay(*pair, now)
            with self._lock:
                summary.adversary[f"token replay: {outcome}"] += 1

        self._each(replay, replaying)

    def _record(
        self,
        device: Device,
        item: PendingUpload,
        recipe: Recipe,
        result: UploadResult,
        summary: SimulationSummary,
        bar: Progress,
    ) -> None:
        """Count one report's outcome."""
        key = (id(device), item.id)
        with self._lock:
            index = self._indices.pop(key, None)
            dummy = key in self._dummies
            self._dummies.discard(key)
            if result.status == "sent":
                summary.uploaded += 1
                summary.dummies_uploaded += dummy
                summary.report_bytes += len(item.report or b"")
                if index is not None:
                    summary.truth[index] += 1
                sent = summary.sent.get(item.task_id)
                if sent is None:
                    sent = summary.sent[item.task_id] = PlainAggregate(recipe.task.vdaf)
                sent.add(item.measurement)
            else:
                summary.failed[result.detail or result.status] += 1
        bar.add()

    def _replay(self, device: Device, item: PendingUpload, now: int) -> str:
        """A malicious device's second report: the same measurement and the same two tokens
        (already spent), under a fresh report id; what the leader answered."""
        recipe = device.recipe(item.recipe_id, item.version)
        wire = device.wire(recipe)
        (report,) = build_reports(
            recipe.task.vdaf.instance(),
            wire,
            [device.report_input(item, now)],
            device.config_for(recipe, "leader"),
            device.config_for(recipe, "helper"),
        )
        (result,) = self.uploader.upload(
            wire.dap, recipe.task.leader, item.task_id, [report.encode()]
        )
        return "accepted" if result.status == "sent" else f"refused ({result.detail})"


@contextlib.contextmanager
def worker_stores(directory: Path | None, shard: Shard) -> Iterator[tuple[StateDb, EventStore]]:
    """The state and event stores of the worker simulating `shard`: files in `directory`
    (kept: the same devices again find their budgets spent), else in a temporary directory
    removed afterwards. Files, not memory: they hold every device of the shard."""
    with contextlib.ExitStack() as stack:
        if directory is None:
            base = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="sagg-devices-")))
        else:
            base = private_dir(directory)
        name = f"shard-{shard.index}-of-{shard.count}"
        paths = (base / f"{name}.state.sqlite3", base / f"{name}.events.sqlite3")
        for path in paths:
            create_private(path, b"")
        state = StateDb(paths[0], durable=False)
        stack.callback(state.close)
        events = EventStore(paths[1])
        stack.callback(events.close)
        yield state, events


@contextlib.contextmanager
def together(devices: Sequence[Device]) -> Iterator[None]:
    """One transaction per store for what the devices write meanwhile: a worker store's
    devices (`StateDb.scoped`) commit a chunk's writes at once (a commit costs about 27 µs,
    six a device before) instead of each its own. Each device's writes stay its own atomic
    unit (a savepoint: `StateDb.transaction`); the chunk's commit together or, on a crash,
    not at all, before anything of theirs leaves the device."""
    with contextlib.ExitStack() as stack:
        for db in {id(d.db.conn): d.db for d in devices}.values():
            stack.enter_context(db.transaction())
        yield
