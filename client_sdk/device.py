"""`Device`: one device of the system, from a recipe to the report it uploads.

The steps (000 §4; 001 §4.1, §4.8, appendix A):

1. fetch and verify the recipe (`client_sdk.recipes`): signature, log inclusion and
   consistency; a refusal is audited;
2. check it against the device policy: leader, helper and token issuer pinned by the policy
   (and, with tokens, issuer keys pinned by the recipe), an approved query class (000 §4.2)
   and, in the budget accountant, checks 1-3 (000 §4.3; `client_sdk.budget`);
3. self-sample with probability q (`client_sdk.sampling`); a device not sampled sends a dummy
   report (the VDAF's zero measurement, `VdafSpec.zero_measurement`) with the recipe's
   probability q' (`dummy_rate`; 001 §4.6: the batch size then hides how many devices
   contributed), through the same steps 5-7 as a real one;
4. if sampled: select the record, encode, randomize locally and map to the VDAF measurement
   (`client_sdk.query`), and pick the donation time and a token fetch time;
5. in ONE transaction: consume the budget, record the pending upload (the randomized
   measurement and its times) and the audit entry. A device not sampled consumes the budget
   too (`client_sdk.sampling` says why) and records nothing to upload;
6. at the token fetch time, obtain two Privacy Pass tokens for the task and window, one for
   each aggregator's share, in one batched request (`client_sdk.tokens`), and in one
   transaction record them used and attach them to the pending row (`prefetch`; tokens not
   attached, e.g. one share's only, are cached for any report of the window);
7. at the donation time: take the tokens (the attached pair, else a cached token of each share
   marked used and attached in one transaction), shard and seal the report with the
   recipe-binding extension in both shares and each aggregator's token in its own share
   (`client_sdk.reports`), store the sealed report in the pending row, then upload
   (`client_sdk.upload`): every report due for one
   DAP-19 task goes in one UploadRequest (DAP-19 §4.4.2: a request may carry many), with the
   task's DAP-Taskprov announcement if it is a taskprov task (digest §11); a DAP-09 report
   goes alone. On ``outdatedConfig`` fetch and verify the recipe again and send one fresh
   report for each refused one, sealed to the configs the recipe now lists, if they changed
   (never to a bare ``/hpke_config`` answer); on success mark the row sent and audit what
   left the device.

Crash safety: a pending row exists iff its budget was consumed (step 5 is one transaction), so
no report ever leaves without budget and no budget is consumed twice for one report. After a
crash, `run_due` resumes pending rows: a row whose report was already sealed re-sends exactly
those bytes (the leader deduplicates by report id), so a report is counted at most once.
"""

from __future__ import annotations

import json
import random
import sqlite3
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

import numpy as np

from client_sdk.audit import AuditLog
from client_sdk.budget import BudgetAccountant, BudgetRefusedError
from client_sdk.events import EventStore
from client_sdk.http import HttpClient, http_client
from client_sdk.policy import DevicePolicy
from client_sdk.query import (
    Answer,
    Measurement,
    NoDataError,
    encode_record,
    randomize_indices,
)
from client_sdk.query import select_record as _select_record
from client_sdk.recipes import RecipeClient, RecipeRefusedError, VerifiedRecipe
from client_sdk.reports import AnyReport, ReportInput, ReportWire, build_reports, choose_config
from client_sdk.sampling import DonationSchedule, device_random, poisson_sample
from client_sdk.storage import StateDb
from client_sdk.tokens import DeviceIdentity, TokenError, TokenWallet
from client_sdk.upload import Uploader, UploadResult
from shared.dap.extensions import (
    TOKEN_ROLES,
    RecipeBinding,
    encode_extensions,
    recipe_digest,
)
from shared.dap.ids import TaskId
from shared.dap.messages import HpkeConfig
from shared.dap.task import TokenPolicy
from shared.files import create_private, private_dir
from shared.privacypass.directory import IssuerDirectory
from shared.privacypass.messages import Token
from shared.recipe.model import Recipe
from shared.recipe.query_class import check_query_class, matching_class
from shared.transport import TransportPolicy

__all__ = ["Device", "DeviceConfig", "Outcome", "PendingUpload", "Plan"]

_ROLE_NAMES: tuple[Literal["leader"], Literal["helper"]] = ("leader", "helper")


@dataclass(frozen=True)
class DeviceConfig:
    """What the device is configured with besides its policy (OS-shipped too)."""

    #: The recipe server and its pinned Ed25519 public key (raw 32 bytes).
    recipe_server_url: str = "http://127.0.0.1:8070"
    recipe_server_key: bytes = b""
    #: Where to enroll and ask for tokens; None: the recipe's token issuer URL (joint mode).
    attester_url: str | None = None
    #: Attach a token to every report (the aggregators require one when the task has a policy).
    use_tokens: bool = True
    #: Attach the recipe-binding extension (001 §4.8). Off only for aggregators that predate
    #: sagg's extensions (they reject unknown extensions, DAP-09 §4.5.1.4).
    bind_recipe: bool = True
    donation: DonationSchedule = field(default_factory=DonationSchedule)
    #: run_due rounds after which a report that keeps failing is given up (and audited).
    max_upload_rounds: int = 5
    #: The CAs the device trusts, and whether plain http:// off the host is allowed.
    transport: TransportPolicy = field(default_factory=TransportPolicy)


@dataclass(frozen=True, slots=True)
class Plan:
    """Steps 2-4 up to the index: what `commit` needs (the simulator batches randomization)."""

    verified: VerifiedRecipe
    status: Literal["answer", "not_sampled", "refused"]
    now: int
    reason: str = ""
    #: The one-hot index, or the string for SFP (`client_sdk.query.Answer`).
    index: Answer | None = None
    #: Not sampled, and sends a dummy report (001 §4.6).
    dummy: bool = False


@dataclass(frozen=True, slots=True)
class Outcome:
    status: Literal["queued", "dummy", "not_sampled", "refused"]
    reason: str = ""
    pending_id: int | None = None


@dataclass(frozen=True, slots=True)
class PendingUpload:
    id: int
    recipe_id: str
    version: int
    task_id: str
    measurement: Measurement
    donation_time: int
    token_fetch_at: int
    report: bytes | None
    #: The tokens taken for the leader's and the helper's share (both or neither).
    token: bytes | None
    attempts: int
    helper_token: bytes | None


_PENDING_COLUMNS = (
    "id, recipe_id, version, task_id, measurement, donation_time, token_fetch_at, report, "
    "token, attempts, helper_token"
)


def _pending(row: tuple[Any, ...]) -> PendingUpload:
    return PendingUpload(
        int(row[0]),
        str(row[1]),
        int(row[2]),
        str(row[3]),
        json.loads(str(row[4])),
        int(row[5]),
        int(row[6]),
        None if row[7] is None else bytes(row[7]),
        None if row[8] is None else bytes(row[8]),
        int(row[9]),
        None if row[10] is None else bytes(row[10]),
    )


class _NoTokenError(Exception):
    """A share of the report has no cached token (`Device._take_tokens` rolls back)."""


class Device:
    def __init__(
        self,
        policy: DevicePolicy,
        config: DeviceConfig,
        *,
        directory: Path | str | None = None,
        http: HttpClient | None = None,
        identity: DeviceIdentity | None = None,
        clock: Callable[[], int] | None = None,
        rng: random.Random | None = None,
        uploader: Uploader | None = None,
        stores: tuple[StateDb, EventStore] | None = None,
        directories: dict[str, IssuerDirectory] | None = None,
    ) -> None:
        """`directory`: where the device keeps ``state.sqlite3`` and ``events.sqlite3``
        (None: in memory); or `stores`, this device's views of stores holding many devices
        (`StateDb.scoped`, `EventStore.scoped`: a simulator's worker store). `rng` is the
        device's randomness (default the OS CSPRNG; tests and simulators pass a seeded one).
        `directories`: issuer directories already fetched, shared by the devices of one
        simulator (they would all receive the same public bytes)."""
        self.policy = policy
        self.config = config
        base = None if directory is None else Path(directory)
        if base is not None:
            # The raw events and the budget ledger: owner-only, never through a planted link.
            private_dir(base)
            for store in ("state.sqlite3", "events.sqlite3"):
                create_private(base / store, b"")
        if stores is not None:
            self.db, self.events = stores
        else:
            self.db = StateDb(None if base is None else base / "state.sqlite3")
            self.events = EventStore(None if base is None else base / "events.sqlite3")
        self.audit = AuditLog(self.db)
        self.budget = BudgetAccountant(self.db, policy)
        self._own_http = http is None
        self.http = http or http_client(config.transport, timeout=30.0)
        self.uploader = uploader or Uploader(self.http)
        self.tokens = TokenWallet(self.db, self.http, identity, directories)
        self.clock = clock or (lambda: int(time.time()))
        self.rng = rng or device_random()
        self._recipes: RecipeClient | None = None
        self._parsed: dict[tuple[str, int], Recipe] = {}
        self._bindings: dict[tuple[str, int], RecipeBinding] = {}
        self._configs: dict[tuple[str, str], HpkeConfig] = {}

    # --- recipes --------------------------------------------------------------------------

    @property
    def recipes(self) -> RecipeClient:
        if self._recipes is None:
            self._recipes = RecipeClient(
                self.db, self.http, self.config.recipe_server_url, self.config.recipe_server_key
            )
        return self._recipes

    def fetch_recipe(self, recipe_id: str, version: int | None = None) -> VerifiedRecipe | None:
        """The verified recipe, or None when refused (the refusal is audited)."""
        try:
            return self.recipes.fetch(recipe_id, version)
        except RecipeRefusedError as exc:
            self.audit.record(
                self.clock(), "refused", recipe_id=recipe_id, reason=f"recipe: {exc.reason}"
            )
            return None

    # --- answering a query ----------------------------------------------------------------

    def _refuse(self, verified: VerifiedRecipe, now: int, reason: str) -> Plan:
        r = verified.recipe
        self.audit.record(
            now,
            "refused",
            recipe_id=r.recipe_id,
            version=r.version,
            task_id=r.task.task_id,
            reason=reason,
        )
        return Plan(verified, "refused", now, reason)

    def plan(self, verified: VerifiedRecipe, now: int | None = None) -> Plan:
        """Steps 2-4 up to the one-hot index. A refusal is audited here; nothing is consumed."""
        now = self.clock() if now is None else now
        recipe = verified.recipe
        distrusted = self.policy.trusted.problems(recipe)
        if self.config.use_tokens and not recipe.token_issuer.key_ids:
            distrusted.append("the recipe pins no token issuer key")
        if distrusted:
            return self._refuse(verified, now, "trust: " + "; ".join(distrusted))
        if matching_class(recipe, self.policy.query_classes) is None:
            problems = check_query_class(recipe, self.policy.query_classes[0])
            return self._refuse(verified, now, "query class: " + "; ".join(problems))
        problems = self.budget.check(recipe, verified.canonical)
        if problems:
            return self._refuse(verified, now, "budget: " + "; ".join(problems))
        if not poisson_sample(recipe.sampling_rate, self.rng):
            # The recipe guarantees a zero measurement when it has a dummy rate.
            dummy = recipe.dummy_rate is not None and poisson_sample(recipe.dummy_rate, self.rng)
            return Plan(verified, "not_sampled", now, dummy=dummy)
        try:
            index = encode_record(recipe, _select_record(recipe, self.events, now, self.rng))
        except NoDataError as exc:
            return self._refuse(verified, now, f"no data: {exc}")
        return Plan(verified, "answer", now, index=index)

    def numpy_rng(self) -> np.random.Generator:
        return np.random.default_rng(self.rng.getrandbits(128))

    def commit(self, plan: Plan, measurement: Measurement | None = None) -> Outcome:
        """Step 5: consume the budget and record the pending upload, atomically."""
        if plan.status == "refused":
            return Outcome("refused", plan.reason)
        recipe = plan.verified.recipe
        now = plan.now
        common: dict[str, Any] = {"recipe_id": recipe.recipe_id, "version": recipe.version}
        task_id = recipe.task.task_id

        if plan.status == "not_sampled" and plan.dummy:
            measurement = recipe.task.vdaf.zero_measurement()
            assert measurement is not None  # the recipe's validation
        elif plan.status == "not_sampled":

            def record_skip(conn: sqlite3.Connection) -> int | None:
                AuditLog.write(conn, self.db.device, now, "not_sampled", task_id=task_id, **common)
                return None

            try:
                self.budget.spend(recipe, record_skip, plan.verified.canonical)
            except BudgetRefusedError as exc:
                return self._refused_at_commit(plan, exc)
            return Outcome("not_sampled")

        assert measurement is not None
        donation = self.config.donation.donation_time(now, self.rng)
        fetch_at = self.config.donation.token_fetch_time(now, donation, self.rng)

        def record_pending(conn: sqlite3.Connection) -> int | None:
            conn.execute(
                "INSERT OR IGNORE INTO recipe_cache (recipe_id, version, canonical) "
                "VALUES (?, ?, ?)",
                (recipe.recipe_id, recipe.version, plan.verified.canonical),
            )
            cursor = conn.execute(
                "INSERT INTO pending_upload (device, recipe_id, version, task_id, measurement, "
                "donation_time, token_fetch_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (
                    self.db.device,
                    recipe.recipe_id,
                    recipe.version,
                    task_id,
                    json.dumps(measurement),
                    donation,
                    fetch_at,
                ),
            )
            AuditLog.write(
                conn,
                self.db.device,
                now,
                "answered",
                task_id=task_id,
                donation_time=donation,
                **common,
            )
            return cursor.lastrowid

        try:
            pending_id = self.budget.spend(recipe, record_pending, plan.verified.canonical)
        except BudgetRefusedError as exc:
            return self._refused_at_commit(plan, exc)
        # The recipe the canonical bytes just stored decode to (parsing them again per report
        # is most of a simulated device's recipe handling).
        key = (recipe.recipe_id, recipe.version)
        self._parsed.setdefault(key, recipe)
        self._bindings.setdefault(key, RecipeBinding(plan.verified.digest, recipe.min_batch_size))
        return Outcome("dummy" if plan.dummy else "queued", pending_id=pending_id)

    def _refused_at_commit(self, plan: Plan, exc: BudgetRefusedError) -> Outcome:
        # Another query consumed the budget between `plan` and `commit`.
        reason = "budget: " + "; ".join(exc.reasons)
        self._refuse(plan.verified, plan.now, reason)
        return Outcome("refused", reason)

    def answer(self, verified: VerifiedRecipe, now: int | None = None) -> Outcome:
        """Steps 2-5 for one recipe."""
        plan = self.plan(verified, now)
        measurement = None
        if plan.status == "answer":
            assert plan.index is not None
            measurement = randomize_indices(plan.verified.recipe, [plan.index], self.numpy_rng())[0]
        return self.commit(plan, measurement)

    # --- tokens and uploads ---------------------------------------------------------------

    def _canonical(self, recipe_id: str, version: int) -> bytes:
        """The canonical bytes of a recipe this device verified and stored."""
        with self.db.lock:
            row = self.db.conn.execute(
                "SELECT canonical FROM recipe_cache WHERE recipe_id = ? AND version = ?",
                (recipe_id, version),
            ).fetchone()
        return bytes(row[0])

    def recipe(self, recipe_id: str, version: int) -> Recipe:
        key = (recipe_id, version)
        found = self._parsed.get(key)
        if found is None:
            found = Recipe.model_validate_json(self._canonical(recipe_id, version))
            self._parsed[key] = found
        return found

    def _binding(self, recipe_id: str, version: int) -> RecipeBinding:
        # The digest of the canonical bytes the device verified and stored (not a re-encoding).
        key = (recipe_id, version)
        found = self._bindings.get(key)
        if found is None:
            recipe = self.recipe(recipe_id, version)
            canonical = self._canonical(recipe_id, version)
            found = RecipeBinding(recipe_digest(canonical), recipe.min_batch_size)
            self._bindings[key] = found
        return found

    def token_policy(self, recipe: Recipe) -> TokenPolicy:
        # The recipe's issuer name and window (signed, logged, and what the recipe server
        # provisioned the aggregators' TokenPolicy with); older recipes get the defaults there.
        return recipe.token_issuer.token_policy()

    def attester_url(self, recipe: Recipe) -> str:
        """The configured attester, else the recipe's issuer (joint mode) if the policy pins
        it: enrolling presents the device's certificate, so never to a party it distrusts."""
        if self.config.attester_url is not None:
            return self.config.attester_url
        url = recipe.token_issuer.url
        if url.rstrip("/") not in {p.rstrip("/") for p in self.policy.trusted.token_issuers}:
            raise TokenError(f"token issuer {url} is not pinned by the device policy")
        return url

    def enroll(self, attester_url: str) -> None:
        self.tokens.enroll(attester_url)

    def pending(self, *, due: int | None = None) -> list[PendingUpload]:
        query = (
            f"SELECT {_PENDING_COLUMNS} FROM pending_upload WHERE device = ? AND state = 'pending'"
        )
        args: tuple[int, ...] = (self.db.device,)
        if due is not None:
            query += " AND donation_time <= ?"
            args += (due,)
        with self.db.lock:
            rows = self.db.conn.execute(query + " ORDER BY id", args).fetchall()
        return [_pending(r) for r in rows]

    @staticmethod
    def wire(recipe: Recipe) -> ReportWire:
        """How the reports of the recipe's task look: its DAP draft, and for DAP-19 the signed
        TaskConfiguration bytes every input share's AAD binds."""
        task = recipe.task
        return ReportWire.of(
            task.task_id, task.time_precision, task.dap_version, task.task_configuration
        )

    def config_for(self, recipe: Recipe, role: Literal["leader", "helper"]) -> HpkeConfig:
        found = self._configs.get((recipe.task.task_id, role))
        return found if found is not None else choose_config(recipe.task.hpke_configs(role))

    def _follow_recipe(self, recipe: Recipe, refused: AnyReport) -> UploadResult | None:
        """After ``outdatedConfig``: adopt the HPKE configs that the recipe, fetched again and
        verified as at first fetch (signature, log inclusion and consistency), now lists for
        the same task and aggregators. A bare ``/hpke_config`` answer is never trusted: a
        network attacker or a malicious aggregator would choose the key the shares are sealed
        to. None when there are new configs to seal to, else the outcome: ``failed`` (tried
        again in a later round: the recipe server may be down) when the recipe does not
        verify, ``rejected`` (final: the leader and the signed recipe disagree) otherwise."""
        why = "the leader answered outdatedConfig"
        try:
            latest = self.recipes.fetch(recipe.recipe_id).recipe.task
        except RecipeRefusedError as exc:
            return UploadResult(
                "failed", f"{why} and the recipe could not be verified again: {exc.reason}"
            )
        task = recipe.task
        if (latest.task_id, latest.leader, latest.helper) != (
            task.task_id,
            task.leader,
            task.helper,
        ):
            return UploadResult(
                "rejected", f"{why} and the latest signed recipe is for another task or aggregators"
            )
        try:
            leader, helper = (choose_config(latest.hpke_configs(role)) for role in _ROLE_NAMES)
        except ValueError as exc:
            return UploadResult(
                "rejected", f"{why} and the signed recipe lists no usable config: {exc}"
            )
        if leader.id == refused.leader_encrypted_input_share.config_id:
            return UploadResult(
                "rejected", f"{why} but the signed recipe still lists leader config {leader.id}"
            )
        self._configs[(task.task_id, "leader")] = leader
        self._configs[(task.task_id, "helper")] = helper
        return None

    def _ensure_tokens(
        self, item: PendingUpload, recipe: Recipe, now: int
    ) -> tuple[Token, Token] | None:
        """A token for each aggregator's share, each from its own issuance: when neither share
        has one cached, both fetched in one round trip and attached to the pending row (the
        pair, or None: the tokens are cached for `_take_tokens`)."""
        task_id = TaskId.from_b64url(item.task_id)
        policy = self.token_policy(recipe)
        missing = tuple(
            role
            for role in TOKEN_ROLES
            if self.tokens.available(task_id, item.donation_time, policy, role) == 0
        )
        if not missing:
            return None
        args = (self.attester_url(recipe), now, recipe.token_issuer.key_ids)
        if len(missing) == 1:
            self.tokens.fetch(task_id, item.donation_time, policy, missing[0], *args)
            return None
        # One round trip for both shares' tokens (two independent blindings).
        tokens = self.tokens.request_batch(task_id, item.donation_time, policy, missing, *args)
        pair = dict(tokens)
        leader, helper = pair.get(TOKEN_ROLES[0]), pair.get(TOKEN_ROLES[1])
        with self.db.transaction() as conn:
            attached = (
                leader is not None
                and helper is not None
                and conn.execute(
                    "UPDATE pending_upload SET token = ?, helper_token = ? "
                    "WHERE id = ? AND token IS NULL AND helper_token IS NULL",
                    (leader.encode(), helper.encode(), item.id),
                ).rowcount
                == 1
            )
            # Taken for this report in the transaction that attaches them (no later `take`:
            # one transaction a device fewer); a partial answer is cached for the next fetch.
            self.tokens.store(conn, task_id, item.donation_time, policy, tokens, used=attached)
        return (leader, helper) if attached and leader and helper else None

    def prefetch(self, item: PendingUpload, now: int) -> PendingUpload:
        """Step 6 for one pending upload whose token fetch time has come: `item` with its two
        tokens attached (as unchanged when they are cached instead, or already attached)."""
        if item.token is not None or not self.config.use_tokens:
            return item
        taken = self._ensure_tokens(item, self.recipe(item.recipe_id, item.version), now)
        if taken is None:
            return item
        return replace(item, token=taken[0].encode(), helper_token=taken[1].encode())

    def prefetch_tokens(self, now: int | None = None) -> int:
        """Step 6 for every pending upload whose token fetch time has come; the number of
        uploads whose two tokens are now cached or attached (failures are retried at upload
        time)."""
        if not self.config.use_tokens:
            return 0
        now = self.clock() if now is None else now
        fetched = 0
        for item in self.pending():
            if item.token is None and item.token_fetch_at <= now:
                try:
                    self.prefetch(item, now)
                    fetched += 1
                except TokenError:
                    continue
        return fetched

    def report_input(self, item: PendingUpload, now: int) -> ReportInput:
        """The report's measurement, time and each share's extensions; the tokens attached to
        the pending row (`prefetch`), else takes (marks used) a cached token for each
        aggregator's share, fetching what is missing."""
        recipe = self.recipe(item.recipe_id, item.version)
        binding = self._binding(item.recipe_id, item.version) if self.config.bind_recipe else None
        leader: Token | None = None
        helper: Token | None = None
        if item.token is not None and item.helper_token is not None:
            leader, helper = Token.decode(item.token), Token.decode(item.helper_token)
        elif self.config.use_tokens:
            # Take first: the tokens are usually prefetched (step 6), and counting them first
            # would cost two more queries a report.
            taken = self._take_tokens(item, recipe)
            if taken is None:
                taken = self._ensure_tokens(item, recipe, now) or self._take_tokens(item, recipe)
                if taken is None:
                    raise TokenError("no token for this window")
            leader, helper = taken
        return ReportInput(
            item.measurement,
            item.donation_time,
            encode_extensions(binding, leader),
            encode_extensions(binding, helper),
        )

    def _take_tokens(self, item: PendingUpload, recipe: Recipe) -> tuple[Token, Token] | None:
        """Mark a cached token of each aggregator's share used and record both in the pending
        row, in one transaction; None (nothing taken) unless both shares have one."""
        task_id = TaskId.from_b64url(item.task_id)
        policy = self.token_policy(recipe)
        try:
            with self.db.transaction() as conn:
                leader, helper = (
                    self.tokens.take(conn, task_id, item.donation_time, policy, role)
                    for role in TOKEN_ROLES
                )
                if leader is None or helper is None:
                    # Rolls the transaction back: a token taken for one share stays unused.
                    raise _NoTokenError
                conn.execute(
                    "UPDATE pending_upload SET token = ?, helper_token = ? WHERE id = ?",
                    (leader.encode(), helper.encode(), item.id),
                )
        except _NoTokenError:
            return None
        return leader, helper

    def store_report(self, item: PendingUpload, report: AnyReport) -> PendingUpload:
        """Persist the sealed report before it is sent: a resumed upload re-sends it."""
        data = report.encode()
        with self.db.transaction() as conn:
            conn.execute(
                "UPDATE pending_upload SET report = ?, report_id = ? WHERE id = ?",
                (data, report.report_metadata.report_id.to_b64url(), item.id),
            )
            row = conn.execute(
                f"SELECT {_PENDING_COLUMNS} FROM pending_upload WHERE id = ?", (item.id,)
            ).fetchone()
        return _pending(row)

    def seal(self, item: PendingUpload, now: int) -> PendingUpload:
        """Build, seal and store the report of one pending upload."""
        recipe = self.recipe(item.recipe_id, item.version)
        report_input = self.report_input(item, now)
        (report,) = build_reports(
            recipe.task.vdaf.instance(),
            self.wire(recipe),
            [report_input],
            self.config_for(recipe, "leader"),
            self.config_for(recipe, "helper"),
        )
        return self.store_report(item, report)

    @staticmethod
    def announcement(recipe: Recipe) -> bytes | None:
        """What uploads for the recipe's task announce: a taskprov task's TaskConfiguration
        (digest §11), else nothing."""
        return Device.wire(recipe).configuration if recipe.task.taskprov else None

    def send(self, item: PendingUpload, now: int) -> UploadResult:
        """Upload one stored report (`send_many`)."""
        (result,) = self.send_many([item], now)
        return result

    def send_many(self, items: Sequence[PendingUpload], now: int) -> list[UploadResult]:
        """Upload stored reports and record their outcomes (`deliver_many`, `finish`), one
        result each in order."""
        delivered = self.deliver_many(items, now)
        for item, recipe, result in delivered:
            self.finish(item, recipe, result, now)
        return [result for _, _, result in delivered]

    def deliver(self, item: PendingUpload, now: int) -> tuple[PendingUpload, Recipe, UploadResult]:
        """Upload one stored report (`deliver_many`), its outcome not recorded yet."""
        (delivered,) = self.deliver_many([item], now)
        return delivered

    def deliver_many(
        self, items: Sequence[PendingUpload], now: int
    ) -> list[tuple[PendingUpload, Recipe, UploadResult]]:
        """Upload stored reports, the reports of one recipe (one task) together
        (`_send_group`); each as sent last (sealed again after outdatedConfig), its recipe and
        its result, in order. The caller records them (`finish`): until then they are
        pending, and a resumed run re-sends the same bytes."""
        groups: dict[tuple[str, int], list[int]] = {}
        for index, item in enumerate(items):
            groups.setdefault((item.recipe_id, item.version), []).append(index)
        out: list[tuple[PendingUpload, Recipe, UploadResult] | None] = [None] * len(items)
        for (recipe_id, version), indices in groups.items():
            recipe = self.recipe(recipe_id, version)
            sent, results = self._send_group([items[i] for i in indices], recipe, now)
            for index, item, result in zip(indices, sent, results, strict=True):
                out[index] = (item, recipe, result)
        return [delivered for delivered in out if delivered is not None]

    def _send_group(
        self, items: list[PendingUpload], recipe: Recipe, now: int
    ) -> tuple[list[PendingUpload], list[UploadResult]]:
        """Upload stored reports of one task (DAP-19: in one UploadRequest of up to
        `client_sdk.upload.DEFAULT_REPORTS_PER_REQUEST`); on outdatedConfig
        one fresh report for each refused one, sealed to the configs the signed recipe
        authenticates (`_follow_recipe`), if they changed. The items as sent, and outcomes."""
        wire = self.wire(recipe)
        announce = self.announcement(recipe)

        def upload(batch: list[PendingUpload]) -> list[UploadResult]:
            reports = [item.report for item in batch if item.report is not None]
            assert len(reports) == len(batch)
            return self.uploader.upload(
                wire.dap,
                recipe.task.leader,
                recipe.task.task_id,
                reports,
                announce=announce,
                resent=[item.attempts > 0 for item in batch],
            )

        items = list(items)
        results = upload(items)
        stale = [i for i, result in enumerate(results) if result.status == "outdated_config"]
        if stale:
            first = items[stale[0]].report
            assert first is not None
            refusal = self._follow_recipe(recipe, wire.decode_report(first))
            if refusal is not None:
                for i in stale:
                    results[i] = refusal
            else:
                for i in stale:
                    items[i] = self.seal(items[i], now)
                for i, result in zip(stale, upload([items[i] for i in stale]), strict=True):
                    results[i] = result
        return items, results

    def finish(self, item: PendingUpload, recipe: Recipe, result: UploadResult, now: int) -> None:
        """Record the outcome of a stored report's upload (sent, or one more failed round)."""
        assert item.report is not None
        wire = self.wire(recipe)
        report = wire.decode_report(item.report)
        report_id = report.report_metadata.report_id.to_b64url()
        common: dict[str, Any] = {
            "recipe_id": item.recipe_id,
            "version": item.version,
            "task_id": item.task_id,
            "report_id": report_id,
        }
        with self.db.transaction() as conn:
            if result.status == "sent":
                conn.execute("UPDATE pending_upload SET state = 'sent' WHERE id = ?", (item.id,))
                AuditLog.write(
                    conn,
                    self.db.device,
                    now,
                    "sent",
                    report_time=wire.seconds(report.report_metadata.time),
                    report_bytes=len(item.report),
                    public_share_bytes=len(report.public_share),
                    leader_share_bytes=len(report.leader_encrypted_input_share.payload),
                    helper_share_bytes=len(report.helper_encrypted_input_share.payload),
                    measurement=item.measurement,
                    leader=recipe.task.leader,
                    **common,
                )
                return
            attempts = item.attempts + 1
            final = result.status == "rejected" or attempts >= self.config.max_upload_rounds
            conn.execute(
                "UPDATE pending_upload SET attempts = ?, state = ? WHERE id = ?",
                (attempts, "failed" if final else "pending", item.id),
            )
            if final:
                AuditLog.write(conn, self.db.device, now, "failed", reason=result.detail, **common)

    def run_due(self, now: int | None = None) -> list[UploadResult]:
        """Steps 6-7 for everything due (also resumes uploads interrupted by a crash); one
        result per due upload, in order."""
        now = self.clock() if now is None else now
        self.prefetch_tokens(now)
        due = self.pending(due=now)
        results: dict[int, UploadResult] = {}
        sealed: list[PendingUpload] = []
        for item in due:
            try:
                sealed.append(item if item.report is not None else self.seal(item, now))
            except (TokenError, ValueError) as exc:
                self._give_up_later(item, str(exc), now)
                results[item.id] = UploadResult("failed", str(exc))
        for item, result in zip(sealed, self.send_many(sealed, now), strict=True):
            results[item.id] = result
        return [results[item.id] for item in due]

    def _give_up_later(self, item: PendingUpload, reason: str, now: int) -> None:
        attempts = item.attempts + 1
        final = attempts >= self.config.max_upload_rounds
        with self.db.transaction() as conn:
            conn.execute(
                "UPDATE pending_upload SET attempts = ?, state = ? WHERE id = ?",
                (attempts, "failed" if final else "pending", item.id),
            )
            if final:
                AuditLog.write(
                    conn,
                    self.db.device,
                    now,
                    "failed",
                    recipe_id=item.recipe_id,
                    version=item.version,
                    task_id=item.task_id,
                    reason=reason,
                )

    def close(self) -> None:
        self.db.close()
        self.events.close()
        if self._own_http:
            self.http.close()
