"""The device simulator: N SDK devices answering one recipe, to load a deployment.

Every simulated device is a real `Device` (its own state and event stores, in memory or in a
directory each, its own budget, coin and audit log, and its own attester identity when a
manufacturer CA is given). The expensive steps are batched across devices where the protocol
allows it, without sharing anything a device must not share:

- local randomization: one numpy call per chunk, each row its own independent noise
  (`client_sdk.query.randomize_indices`), seeded from the OS CSPRNG;
- Prio3 sharding: `shard_batch` over a chunk of reports (fresh report ids and randomness per
  report); HPKE sealing stays per report (`client_sdk.reports`);
- uploads: a thread pool over one pooled `httpx.Client`.

The recipe is fetched and verified once (by the first device, through the log) and the
verified bytes handed to every device: they all would receive the same bytes.

`run` makes a fresh population per recipe. `devices` and `answer` keep one population across
several recipes instead (an interactive analysis, 000 §1 and §4.1): each device keeps its event
store and its budget accountant, so the recipes' budgets compose on every device (000 §4.3).
`SimulationSummary.truth` is the ground truth the aggregate estimates: the one-hot index (the
integer value, for bit pushing; the string, for SFP) each uploaded report randomized.

Randomized donation times (001 appendix A) run on a compressed clock: devices pick their slot
as usual, and the simulator walks the slots in order, sleeping ``slot_seconds / time_scale``
real seconds between them (0 with the default infinite scale).
"""

from __future__ import annotations

import random
import secrets
import sys
import threading
import time
import weakref
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

import httpx
import numpy as np
import rich.progress
from rich.console import Console

from client_sdk.datagen import generate_events
from client_sdk.device import Device, DeviceConfig, PendingUpload, Plan
from client_sdk.http import http_client
from client_sdk.policy import AnalysisAllowance, DevicePolicy, FieldAllowance, TrustedParties
from client_sdk.query import Answer, randomize_indices
from client_sdk.recipes import VerifiedRecipe
from client_sdk.reports import ReportInput, build_reports
from client_sdk.tokens import DeviceIdentity, TokenError
from client_sdk.upload import Uploader
from shared.dap.ids import TaskId
from shared.recipe.query_class import QueryClass

__all__ = ["SimulationSummary", "Simulator", "permissive_policy"]

#: Reports sharded together (Prio3 `shard_batch` amortizes its NTT set-up over a chunk).
CHUNK = 64


@dataclass
class SimulationSummary:
    devices: int = 0
    sampled: int = 0
    not_sampled: int = 0
    refused: Counter[str] = field(default_factory=Counter)
    uploaded: int = 0
    failed: Counter[str] = field(default_factory=Counter)
    seconds: float = 0.0
    report_bytes: int = 0
    #: One-hot index (the value, for bit pushing; the string, for SFP) -> number of uploaded
    #: reports that encoded it.
    truth: Counter[Answer] = field(default_factory=Counter)

    @property
    def reports_per_second(self) -> float:
        return self.uploaded / self.seconds if self.seconds > 0 else 0.0

    def lines(self) -> list[str]:
        out = [
            f"devices {self.devices}: sampled {self.sampled}, not sampled {self.not_sampled}, "
            f"refused {sum(self.refused.values())}, uploaded {self.uploaded}, "
            f"failed {sum(self.failed.values())}",
            f"{self.seconds:.1f} s, {self.reports_per_second:.1f} reports/s, "
            f"{self.report_bytes / max(1, self.uploaded):.0f} bytes/report",
        ]
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
        http: httpx.Client | None = None,
        identities: Callable[[], DeviceIdentity] | None = None,
        directory: Path | None = None,
        concurrency: int = 16,
        seed: int = 0,
        time_scale: float = float("inf"),
        clock: Callable[[], int] | None = None,
        progress: TextIO | None = sys.stderr,
        uploader: Uploader | None = None,
    ) -> None:
        """`policy`, or without one a permissive one (`permissive_policy`) through the
        `trusted` parties, which must then be given."""
        if policy is None and trusted is None:
            raise ValueError("a simulator needs a device policy or the parties it trusts")
        self.config = config
        self.policy = policy
        self.trusted = policy.trusted if policy is not None else trusted
        limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
        self.http = http or http_client(config.transport, timeout=30.0, limits=limits)
        self.uploader = uploader or Uploader(self.http)
        self.identities = identities
        self.directory = directory
        self.concurrency = max(1, concurrency)
        self.data_rng = random.Random(seed)  # the synthetic data only: seeded, reproducible
        self.time_scale = time_scale
        self.base_clock = clock or (lambda: int(time.time()))
        self.offset = 0
        self.progress = progress
        #: (device, pending upload id) -> the index it randomized, until the report is sent.
        self._indices: dict[tuple[int, int], Answer] = {}
        self._lock = threading.Lock()

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
    ) -> SimulationSummary:
        summary = SimulationSummary(devices=count)
        start = time.perf_counter()
        verified = verified or self.verify(recipe_id, version)
        if verified is None:
            summary.refused["recipe could not be verified"] = count
            summary.seconds = time.perf_counter() - start
            return summary
        recipe = verified.recipe
        policy = self.policy or self._permissive(recipe.query.fields, recipe.query.stream)
        devices = self.devices(count, policy)
        now = self.now()
        for device in devices:
            device.events.register_stream(recipe.query.stream)
            device.events.add_many(
                recipe.query.stream, generate_events(data, recipe, self.data_rng, now)
            )
        try:
            self.answer(devices, verified, summary)
        finally:
            self.close(devices)
        summary.seconds = time.perf_counter() - start
        return summary

    def answer(
        self,
        devices: list[Device],
        verified: VerifiedRecipe,
        summary: SimulationSummary | None = None,
    ) -> SimulationSummary:
        """Steps 2-7 of `client_sdk.device` for one verified recipe on these devices (enrolling
        those not yet enrolled with the recipe's attester). The devices stay open."""
        summary = summary if summary is not None else SimulationSummary(devices=len(devices))
        start = time.perf_counter()
        recipe = verified.recipe
        if self.config.use_tokens and self.identities is not None:
            self._parallel(
                lambda d: d.enroll(d.attester_url(recipe)), devices, "enrolling", summary
            )
        self._answer(devices, verified, summary)
        self._donate(devices, summary)
        summary.seconds += time.perf_counter() - start
        return summary

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
        fn: Callable[[Device], object],
        devices: list[Device],
        label: str,
        summary: SimulationSummary,
        quiet: bool = False,
    ) -> None:
        bar = Progress(len(devices), label, None if quiet else self.progress)

        def one(device: Device) -> None:
            try:
                fn(device)
            except TokenError as exc:
                summary.failed[f"{label}: {exc}"] += 1
            bar.add()

        with ThreadPoolExecutor(self.concurrency) as pool:
            list(pool.map(one, devices))

    def _answer(
        self, devices: list[Device], verified: VerifiedRecipe, summary: SimulationSummary
    ) -> None:
        bar = Progress(len(devices), "answering", self.progress)
        for lo in range(0, len(devices), CHUNK):
            chunk = devices[lo : lo + CHUNK]
            plans: list[Plan] = [d.plan(verified) for d in chunk]
            answering = [p.index for p in plans if p.status == "answer"]
            # One generator per chunk, from the OS CSPRNG: every report its own noise.
            rng = np.random.default_rng(secrets.randbits(128))
            measurements = iter(randomize_indices(verified.recipe, answering, rng))  # type: ignore[arg-type]
            for device, plan in zip(chunk, plans, strict=True):
                m = next(measurements) if plan.status == "answer" else None
                outcome = device.commit(plan, m)
                if outcome.status == "queued":
                    assert plan.index is not None and outcome.pending_id is not None
                    self._indices[(id(device), outcome.pending_id)] = plan.index
                    summary.sampled += 1
                elif outcome.status == "not_sampled":
                    summary.not_sampled += 1
                else:
                    summary.refused[outcome.reason[:120]] += 1
            bar.add(len(chunk))

    def _donate(self, devices: list[Device], summary: SimulationSummary) -> None:
        pending: list[tuple[Device, PendingUpload]] = [(d, p) for d in devices for p in d.pending()]
        if not pending:
            return
        bar = Progress(len(pending), "uploading", self.progress)
        events = {p.donation_time for _, p in pending} | {p.token_fetch_at for _, p in pending}
        previous = self.now()
        for t in sorted(events):
            if t > previous and self.time_scale != float("inf"):
                time.sleep((t - previous) / self.time_scale)
            # The compressed clock: jump to the next slot instead of waiting for it.
            self.offset = max(self.offset, t - self.base_clock())
            previous = t
            if self.config.use_tokens:
                fetching = _unique([d for d, p in pending if p.token_fetch_at == t])
                self._parallel(_prefetcher(t), fetching, "tokens", summary, quiet=True)
            due = [(d, p) for d, p in pending if p.donation_time == t]
            self._upload(due, t, summary, bar)

    def _upload(
        self,
        due: list[tuple[Device, PendingUpload]],
        now: int,
        summary: SimulationSummary,
        bar: Progress,
    ) -> None:
        for lo in range(0, len(due), CHUNK):
            chunk = due[lo : lo + CHUNK]
            inputs: list[tuple[Device, PendingUpload, ReportInput]] = []
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
                TaskId.from_b64url(recipe.task.task_id),
                recipe.task.time_precision,
                [r for _, _, r in inputs],
                first.config_for(recipe, "leader"),
                first.config_for(recipe, "helper"),
            )
            stored = [
                (device, device.store_report(item, report))
                for (device, item, _), report in zip(inputs, reports, strict=True)
            ]

            def send(pair: tuple[Device, PendingUpload]) -> None:
                device, item = pair
                result = device.send(item, now)
                with self._lock:
                    index = self._indices.pop((id(device), item.id), None)
                    if result.status == "sent":
                        summary.uploaded += 1
                        summary.report_bytes += len(item.report or b"")
                        if index is not None:
                            summary.truth[index] += 1
                    else:
                        summary.failed[result.detail or result.status] += 1
                bar.add()

            with ThreadPoolExecutor(self.concurrency) as pool:
                list(pool.map(send, stored))


def _prefetcher(t: int) -> Callable[[Device], object]:
    return lambda device: device.prefetch_tokens(t)


def _unique(devices: list[Device]) -> list[Device]:
    return list({id(d): d for d in devices}.values())
