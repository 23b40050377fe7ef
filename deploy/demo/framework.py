"""The demo framework: run one of the papers' analyses through every service, against the truth.

An analysis module exposes ``run(ctx: DemoContext) -> AnalysisReport``. Through the context it

1. builds a `RecipeDraft` whose batch size B follows from its privacy claim by the accounting
   (`shared.recipe.accounting.required_batch_size`; the recipe server refuses any B that does
   not deliver the claim) and publishes it: the recipe server validates, provisions the DAP
   task on collector, leader and helper, signs and logs it (`deploy.recipes.publish_recipe`);
2. lets a population of simulated SDK devices (`client_sdk.simulator`) fetch and verify the
   recipe through the log, check it against their policy and budget (000 §4.2-4.3), sample,
   randomize, get a Privacy Pass token from the issuer and upload to the leader;
3. collects the batch through the collector (leader and helper aggregate in between;
   `deploy.collect`), and analyses it (`services.collector.analysis.analyze`: debiased
   estimates, confidence intervals, the privacy statement computed by the accounting);
4. compares the estimates with the ground truth the simulator knows (`SimulationSummary.truth`)
   and writes charts and CSV files.

The verdict of a comparison (`coverage_check`) is simultaneous: every estimate must lie within
z_k standard errors of its truth, z_k the two-sided normal quantile at 1 - alpha / k for k items
(Bonferroni), so that a correct pipeline fails with probability at most alpha.

Every population is sized from B (`population_for`), so the `DemoScale`'s privacy claim sets the
demo's cost: ``full`` claims epsilon = 1 per collection, ``small`` (tests) epsilon = 1.5.
"""

from __future__ import annotations

import math
import random
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import httpx

from client_sdk.cli import manufactured_identities
from client_sdk.device import Device, DeviceConfig
from client_sdk.policy import AnalysisAllowance, DevicePolicy, FieldAllowance, TrustedParties
from client_sdk.recipes import VerifiedRecipe
from client_sdk.sampling import DonationSchedule
from client_sdk.simulator import SimulationSummary, Simulator
from deploy.collect import request_collection, wait_for_collection
from deploy.config import Deployment
from deploy.errors import DeployError
from deploy.recipes import publish_recipe
from services.collector.analysis import (
    Analysis,
    Collection,
    analyze,
    collection_from_body,
    item_labels,
    sfp_label,
    to_csv,
)
from services.collector.charts import write_chart
from shared.b64url import b64url_decode
from shared.dp.amplification import Analysis as AmplificationAnalysis
from shared.dp.composition import basic_composition
from shared.dp.estimators import z_value
from shared.recipe.accounting import required_batch_size
from shared.recipe.model import (
    BitPushingRandomizer,
    IntegerFeature,
    PrivacyClaim,
    Recipe,
    RecipeDraft,
    SfpRandomizer,
)
from shared.recipe.query_class import QueryClass

__all__ = [
    "SCALES",
    "AnalysisReport",
    "Check",
    "DemoContext",
    "DemoError",
    "DemoScale",
    "Round",
    "claim_check",
    "coverage_check",
    "population_for",
    "truth_of",
]

#: Family-wise error rate of a `coverage_check`.
DEFAULT_ALPHA = 1e-3
#: Standard deviations of sampling slack between a population's expected sample and B.
SAMPLE_SIGMAS = 4.0


class DemoError(DeployError):
    """The demo could not run (a service refused, a collection did not finish, ...)."""


@dataclass(frozen=True)
class DemoScale:
    """How much privacy each collection claims, hence (by the accounting) how many devices."""

    name: str
    #: The aggregate (epsilon, delta) every collection's recipe claims.
    epsilon: float
    delta: float
    #: The fewest devices in a population, whatever B needs (accuracy needs some).
    min_devices: int
    #: Simulate a one-recipe population in streaming chunks (`Simulator.run`: flat memory,
    #: each device's state in the simulator's store) instead of keeping every device open.
    streaming: bool = False
    #: The analyses the scale runs when none are named (None: all); a streaming scale runs
    #: those answering one recipe.
    analyses: tuple[str, ...] | None = None

    def claim(self, analysis: AmplificationAnalysis = "stronger_clones") -> PrivacyClaim:
        return PrivacyClaim(epsilon=self.epsilon, delta=self.delta, analysis=analysis)


SCALES: dict[str, DemoScale] = {
    "full": DemoScale("full", epsilon=1.0, delta=1e-6, min_devices=800),
    "small": DemoScale("small", epsilon=1.5, delta=1e-6, min_devices=150),
    # 10^5 devices earn epsilon = 0.05 from eps0 = 2 (B = 46,720 for the emoji sketch).
    "large": DemoScale(
        "large",
        epsilon=0.05,
        delta=1e-6,
        min_devices=100_000,
        streaming=True,
        analyses=("emoji",),
    ),
}


def population_for(batch_size: int, q: float, floor: int = 1) -> int:
    """The fewest devices (at least `floor`) whose Poisson q-sample reaches `batch_size` unless
    it falls `SAMPLE_SIGMAS` standard deviations short of its mean."""
    n = max(floor, math.ceil(batch_size / q))
    while n * q - SAMPLE_SIGMAS * math.sqrt(n * q * (1 - q)) < batch_size:
        n += max(1, n // 100)
    return n


@dataclass(frozen=True)
class Check:
    """One pass/fail comparison of an analysis with the truth."""

    what: str
    passed: bool
    detail: str

    def line(self) -> str:
        return f"[{'PASS' if self.passed else 'FAIL'}] {self.what}: {self.detail}"


@dataclass
class AnalysisReport:
    """What one analysis printed, wrote and concluded."""

    name: str
    title: str
    lines: list[str] = field(default_factory=list)
    charts: list[Path] = field(default_factory=list)
    files: list[Path] = field(default_factory=list)
    checks: list[Check] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return bool(self.checks) and all(c.passed for c in self.checks)

    def text(self) -> str:
        rule = "=" * 78
        out = [rule, f"{self.title} [{self.name}]", rule, *self.lines, ""]
        out += [c.line() for c in self.checks]
        out += [f"chart  {p}" for p in self.charts]
        out += [f"file   {p}" for p in self.files]
        out.append(f"verdict: {'PASS' if self.passed else 'FAIL'}")
        return "\n".join(out)


@dataclass(frozen=True)
class Round:
    """One recipe answered by a population and collected."""

    recipe: Recipe
    summary: SimulationSummary
    collection: Collection
    analysis: Analysis
    #: Item label -> its true value among the uploaded reports (`truth_of`).
    truth: dict[str, float]


def truth_of(recipe: Recipe, summary: SimulationSummary) -> dict[str, float]:
    """The ground truth of a collection, keyed like the analysis' items: counts per one-hot
    label; for bit pushing the mean and each bit's mean (`analysis._bit_pushing_items`); for
    SFP counts per word (`analysis.sfp_label`)."""
    r = recipe.randomizer
    if isinstance(r, SfpRandomizer):
        words: Counter[str] = Counter()
        for word, c in summary.truth.items():
            words[sfp_label(r, str(word))] += c
        return {w: float(c) for w, c in words.items()}
    values = {int(v): c for v, c in summary.truth.items()}
    if isinstance(r, BitPushingRandomizer):
        feature = recipe.encoding.features[0]
        assert isinstance(feature, IntegerFeature)
        n = sum(values.values())
        if n == 0:
            return {}
        out = {f"mean({feature.field})": sum(v * c for v, c in values.items()) / n}
        for j in range(feature.bits):
            out[f"bit {j}"] = sum(c for v, c in values.items() if v >> j & 1) / n
        return out
    labels = item_labels(recipe.encoding)
    # Every item, zeros included: a chart marks the truth of every bar it draws.
    out = dict.fromkeys(labels, 0.0)
    for i, c in values.items():
        out[labels[i]] += c
    return out


def coverage_check(
    what: str, analysis: Analysis, truth: Mapping[str, float], alpha: float = DEFAULT_ALPHA
) -> Check:
    """Every item's estimate within z_k standard errors of its truth (module docstring)."""
    items = analysis.items
    if not items:
        return Check(what, False, "no estimates")
    z = z_value(1 - alpha / len(items))
    misses = [it for it in items if abs(it.estimate - truth.get(it.label, 0.0)) > z * it.stderr]
    worst = max(
        items,
        key=lambda it: abs(it.estimate - truth.get(it.label, 0.0)) / max(it.stderr, 1e-12),
    )
    gap = abs(worst.estimate - truth.get(worst.label, 0.0)) / max(worst.stderr, 1e-12)
    detail = (
        f"{len(items) - len(misses)} of {len(items)} estimates within {z:.2f} standard errors "
        f"of the truth (simultaneous level {1 - alpha:g}); largest gap {gap:.2f} "
        f"({worst.label!r})"
    )
    return Check(what, not misses, detail)


def exact_check(result: Round) -> Check:
    """Is the collection exactly what the devices sent: every report they count as uploaded,
    and the sum of their measurements (`SimulationSummary.sent`)? A recipe whose aggregators
    add noise (004 §5) is held to its report count only."""
    recipe, collection = result.recipe, result.collection
    sent = result.summary.sent.get(recipe.task.task_id)
    reports = 0 if sent is None else sent.reports
    got = collection.aggregate
    same = sent is not None and (got if isinstance(got, int) else list(got)) == sent.result
    noised = recipe.aggregator_noise is not None
    detail = f"{collection.report_count} reports collected of {reports} sent; " + (
        "the aggregators noise the aggregate, so only the count is compared"
        if noised
        else f"the aggregate {'is' if same else 'is not'} the sum of their measurements"
    )
    passed = collection.report_count == reports and (noised or same)
    return Check(f"exact aggregate of {recipe.recipe_id}", passed, detail)


def claim_check(result: Round) -> Check:
    """Does the batch actually collected meet its recipe's claim (at its report count)?"""
    privacy = result.analysis.privacy
    assert privacy is not None  # a recipe's analysis always states one
    return Check(
        f"privacy claim of {result.recipe.recipe_id}",
        privacy.claim_met is True,
        f"({privacy.epsilon:.4g}, {privacy.delta:.3g})-DP for {privacy.report_count} reports; "
        f"the recipe claims ({privacy.claimed_epsilon:g}, {privacy.claimed_delta:g})",
    )


@dataclass
class DemoContext:
    """What an analysis needs: the deployment, where to write, the seed and the scale."""

    deployment: Deployment
    out_dir: Path
    seed: int
    scale: DemoScale
    #: Makes this run's recipe ids unique, so a demo can run again on the same deployment.
    tag: str
    http: httpx.Client
    progress: TextIO | None = None
    #: Seconds to wait for one collection (aggregation jobs run in between).
    collect_wait: float = 300.0
    clock: Callable[[], float] = time.time

    def __post_init__(self) -> None:
        for needed in ("recipe_server", "analyst_token", "recipe_server_public_key"):
            if getattr(self.deployment, needed) is None:
                raise DemoError(f"the deployment has no {needed}: the demo needs every service")
        self.out_dir.mkdir(parents=True, exist_ok=True)

    # --- recipes --------------------------------------------------------------------------

    def recipe_id(self, name: str) -> str:
        return f"demo.{self.tag}.{name}"

    def rng(self, name: str) -> random.Random:
        """The synthetic data's generator for one analysis (reproducible per seed)."""
        return random.Random(f"{self.seed}:{name}")

    def draft(self, body: Mapping[str, Any]) -> RecipeDraft:
        """A `RecipeDraft` from `body` with B = the accounting's smallest batch size that
        delivers the claim at the recipe's sampling rate."""
        draft = RecipeDraft.model_validate({**body, "min_batch_size": 1})
        needed = required_batch_size(
            draft.randomizer, draft.sampling_rate, draft.privacy, draft.dummy_rate
        )
        if needed is None:
            raise DemoError(f"{draft.recipe_id}: no batch size delivers {draft.privacy}")
        return draft.model_copy(update={"min_batch_size": needed})

    def publish(self, draft: RecipeDraft) -> tuple[VerifiedRecipe, dict[str, Any]]:
        """Publish through the recipe server (its answer verified against the pinned key),
        then fetch it as a device does: signature, log inclusion and consistency."""
        d = self.deployment
        assert d.recipe_server and d.analyst_token and d.recipe_server_public_key
        summary = publish_recipe(
            d.recipe_server,
            d.analyst_token,
            draft,
            public_key=d.recipe_server_public_key,
            http=self.http,
        )
        verified = self.simulator().verify(draft.recipe_id, draft.version)
        if verified is None:
            raise DemoError(f"the devices refused recipe {draft.recipe_id}")
        return verified, summary

    # --- devices --------------------------------------------------------------------------

    def policy(self, recipes: Sequence[Recipe | RecipeDraft], rounds: int = 1) -> DevicePolicy:
        """The demo devices' policy (000 §4.2 and Table 1): one query class admitting these
        recipes' streams, fields, local epsilon and claims, and per analysis and per field a
        budget of `rounds` reports at the largest claim."""
        fields = tuple(dict.fromkeys(f for r in recipes for f in r.query.fields))
        local = max(r.randomizer.local_epsilon for r in recipes)
        eps = max(r.privacy.epsilon for r in recipes)
        return DevicePolicy(
            trusted=self.trusted(),
            query_classes=(
                QueryClass(
                    name="demo",
                    streams=tuple(dict.fromkeys(r.query.stream for r in recipes)),
                    fields=fields,
                    max_local_epsilon=local,
                    max_epsilon=eps,
                    max_delta=max(r.privacy.delta for r in recipes),
                    analysis_id_prefixes=("demo",),
                ),
            ),
            default_analysis=AnalysisAllowance(epsilon=rounds * eps, reports=rounds),
            fields={
                f: FieldAllowance(local_epsilon=local, epsilon=rounds * eps, reports=rounds)
                for f in fields
            },
        )

    def composition_lines(
        self, rounds: Sequence[Round], device: Device, analysis_id: str
    ) -> list[str]:
        """What several collections from the same devices cost each device: the batches'
        guarantees composed (basic composition, as the accountant does, 000 §4.3), and what
        one device's budget accountant recorded against its policy's allowance."""
        statements = [r.analysis.privacy for r in rounds]
        assert all(s is not None for s in statements)
        eps, delta = basic_composition((s.epsilon, s.delta) for s in statements if s)
        used = device.budget.analysis_usage(analysis_id)
        allowed = device.policy.analysis_allowance(analysis_id)
        return [
            f"composed over {len(rounds)} collections from the same devices (basic "
            f"composition, 000 §4.3): ({eps:.4g}, {delta:.3g})-DP per device (OAMC)",
            f"a device's budget accountant: analysis {analysis_id} used epsilon "
            f"{used.eps_used:g} of {allowed.epsilon:g}, {used.reports_used} of "
            f"{allowed.reports} reports (claimed epsilons add up)",
        ]

    def population_size(self, recipe: Recipe | RecipeDraft, factor: int = 1) -> int:
        """Devices to simulate: enough to reach the recipe's B (`population_for`), and at least
        `factor` times the scale's floor (analyses that need more reports for accuracy)."""
        floor = factor * self.scale.min_devices
        return population_for(recipe.min_batch_size, recipe.sampling_rate, floor)

    def population(
        self,
        simulator: Simulator,
        policy: DevicePolicy,
        stream: str,
        count: int,
        events: Callable[[int], list[tuple[dict[str, Any], int]]],
    ) -> list[Device]:
        """`count` devices whose `stream` holds `events(now)` each (close with
        `Simulator.close`)."""
        devices = simulator.devices(count, policy)
        now = simulator.now()
        for device in devices:
            device.events.register_stream(stream)
            device.events.add_many(stream, events(now))
        return devices

    def trusted(self) -> TrustedParties:
        """The demo devices trust the deployment's leader, helper and token issuer only."""
        d = self.deployment
        assert d.token_issuer
        return TrustedParties(
            leaders=(d.leader,), helpers=(d.helper,), token_issuers=(d.token_issuer,)
        )

    def simulator(self, policy: DevicePolicy | None = None) -> Simulator:
        d = self.deployment
        assert d.recipe_server and d.recipe_server_public_key
        identities = None
        if d.manufacturer_ca_cert and d.manufacturer_ca_key:
            identities = manufactured_identities(
                Path(d.manufacturer_ca_cert), Path(d.manufacturer_ca_key)
            )
        config = DeviceConfig(
            recipe_server_url=d.recipe_server,
            recipe_server_key=b64url_decode(d.recipe_server_public_key, "recipe key"),
            use_tokens=identities is not None,
            donation=DonationSchedule(1, 0),
            transport=d.transport,
        )
        return Simulator(
            config,
            policy=policy,
            trusted=self.trusted(),
            http=self.http,
            identities=identities,
            concurrency=8,
            seed=self.seed,
            progress=self.progress,
            # DAP-19 tasks (emoji): a chunk's reports through one UploadRequest, as an upload
            # relay would send them (`client_sdk.simulator`: relay mode), as the demo always did.
            relay=True,
        )

    # --- collection -----------------------------------------------------------------------

    def collect(self, recipe: Recipe, since: float) -> Collection:
        """The batch of every report of the recipe's task timed from `since` until now."""
        d = self.deployment
        precision = recipe.task.time_precision
        start = int(since) // precision * precision
        end = (int(self.clock()) // precision + 1) * precision
        query = {"type": "time_interval", "start": start, "duration": end - start}
        token = d.admin_token("collector")
        if token is None:
            raise DemoError("the deployment file has no collector admin token")
        job = request_collection(self.http, d.collector, token, recipe.task.task_id, query)
        body = wait_for_collection(self.http, d.collector, token, job, self.collect_wait)
        return collection_from_body(body)

    def answer_and_collect(
        self,
        verified: VerifiedRecipe,
        simulator: Simulator,
        devices: list[Device],
        *,
        candidates: Sequence[int | str] | None = None,
        threshold_level: float = 0.95,
    ) -> Round:
        """Steps 2-4 of the module docstring for one published recipe."""
        recipe = verified.recipe
        since = self.clock()
        summary = simulator.answer(devices, verified)
        if summary.uploaded < recipe.min_batch_size:
            raise DemoError(
                f"{recipe.recipe_id}: {summary.uploaded} reports uploaded, B = "
                f"{recipe.min_batch_size}: " + "; ".join(summary.lines())
            )
        collection = self.collect(recipe, since)
        analysis = analyze(
            recipe, collection, candidates=candidates, threshold_level=threshold_level
        )
        return Round(recipe, summary, collection, analysis, truth_of(recipe, summary))

    def stream_and_collect(
        self, verified: VerifiedRecipe, simulator: Simulator, count: int, data: str
    ) -> Round:
        """As `answer_and_collect`, for a seeded population of `count` devices with
        `client_sdk.datagen` data `data`, streamed through `simulator` (`Simulator.run`)."""
        recipe = verified.recipe
        since = self.clock()
        summary = simulator.run(recipe.recipe_id, count, data, verified=verified)
        if summary.uploaded < recipe.min_batch_size:
            raise DemoError(
                f"{recipe.recipe_id}: {summary.uploaded} reports uploaded, B = "
                f"{recipe.min_batch_size}: " + "; ".join(summary.lines())
            )
        collection = self.collect(recipe, since)
        analysis = analyze(recipe, collection)
        return Round(recipe, summary, collection, analysis, truth_of(recipe, summary))

    # --- output ---------------------------------------------------------------------------

    def write(
        self, name: str, analysis: Analysis, truth: Mapping[str, float] | None = None
    ) -> tuple[Path, Path]:
        """The chart (PNG, truth as markers) and the CSV of an analysis."""
        chart = write_chart(analysis, self.out_dir / f"{name}.png", truth)
        table = self.out_dir / f"{name}.csv"
        table.write_text(to_csv(analysis))
        return chart, table
