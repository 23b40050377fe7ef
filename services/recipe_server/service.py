"""Publication and the device-facing reads of the recipe server, without HTTP.

Publishing a draft (000 §4.1; 001 §4.1 and its "public recipes" hardening):

1. the draft parses (`RecipeDraft`: known fields, sane ranges: 0 < q <= 1, eps0 > 0,
   0 < delta <= 1e-3, B >= 1, ...);
2. the analyst may publish under its analysis id;
3. the same id and version with the same draft returns the stored result (idempotent); with
   another draft it is a conflict;
4. the VDAF the randomizer maps to (`shared.dp.vdaf_mapping`) equals the draft's, if given;
5. B reaches the claimed (epsilon, delta) under `shared.recipe.accounting` (amplification by
   aggregation of B eps0-LDP reports, then by sampling at q, or the aggregators' noise if the
   draft has some and it is stronger: the OAMC guarantee); if not, the error gives the B that
   would; a draft's noise must be accountable on its VDAF (`accounting.noise_problems`);
   the token issuer is one the operator allows (a draft names none, or one of them by URL;
   RFC 9576 §2: origins, here the aggregators, trust issuers), and the recipe gets the
   operator's pinned key ids for it (the leader and helper are the operator's too: a draft
   cannot name any);
6. the task id is chosen and the aggregators' HPKE configs fetched; with them (and the token
   issuer with its name, window and keys spelled out) the recipe is final, and its digest is
   known;
7. the task is created on collector, leader and helper bound to that digest and the issuer's
   token policy (`TaskDefinition.recipe_digest`, `.tokens`), so both aggregators refuse
   reports without a token or without this recipe's binding, with the recipe's rate
   validation (001 §4.8: R = q N tp / W from the draft's population estimate, published in
   the recipe; `shared.recipe.rate`) and the draft's aggregator noise (`.aggregator_noise`,
   004 §5: both aggregators add it) (or an analyst-named existing task is checked: it must
   require tokens and the recipe binding, be bound to this recipe and token policy, and
   have its query type, query limit, rate validation and noise; else 422);
8. the recipe is signed and appended to the log, with a signed tree head for the new size, in
   one transaction.

Retries. Step 7 talks to three other services and step 8 to the database, so a publication can
fail after the task exists. Before creating a task the service records it as pending (task id
and final recipe bytes, `RecipeStore.put_pending`); the append of step 8 clears it in its
transaction. A retry of the same draft finds the pending task: if leader and helper hold it,
it is reused with the recorded bytes (the digest the task is bound to), so a retry never
creates a second task for one recipe; if either does not know it (the earlier attempt stopped
within step 7), a fresh id replaces it and the half-made task is left unused: no recipe names
it, so no device reports to it. An outage while checking is a 502 and keeps the pending task.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from services.common.clock import Clock
from services.common.problems import InternalError, ServiceError
from services.common.provisioning import new_configuration
from services.recipe_server.provision import (
    NewTask,
    Provisioner,
    ProvisionError,
    TaskMismatchError,
    TaskMissingError,
    TaskRequest,
)
from services.recipe_server.store import (
    KeyConflictError,
    PendingTask,
    RecipeRecord,
    RecipeStore,
    StoredHead,
)
from shared.b64url import b64url_decode, b64url_encode
from shared.dap.extensions import recipe_digest
from shared.dap.task import VDAF_OF_DAP
from shared.dap.taskprov import task_id_of
from shared.dp.aggregator_noise import noise_guarantee
from shared.recipe.accounting import assess_privacy, expected_vdaf, noise_problems
from shared.recipe.canonical import canonical_json
from shared.recipe.log import (
    TREE_HEAD_SIGNATURE_CONTEXT,
    consistency_proof,
    inclusion_proof,
    leaf_hash,
    root_hash,
    tree_head_bytes,
)
from shared.recipe.model import Recipe, RecipeDraft, RecipeTask, TokenIssuerRef
from shared.recipe.signing import RecipeSigner, recipe_bytes
from shared.vdaf.spec import VdafVersion

__all__ = [
    "Analyst",
    "ConflictError",
    "ForbiddenError",
    "InvalidDraftError",
    "BadRequestError",
    "NotFoundError",
    "ProvisioningFailedError",
    "PublishResult",
    "RecipeService",
]


@dataclass(frozen=True)
class Analyst:
    name: str
    #: Allowed analysis-id prefixes; empty allows any.
    analysis_prefixes: tuple[str, ...] = ()

    def may_publish(self, analysis_id: str) -> bool:
        return not self.analysis_prefixes or analysis_id.startswith(self.analysis_prefixes)


class InvalidDraftError(ServiceError):
    """422: problems as (field path, message), in the `errors` member."""

    status: int = 422

    def __init__(self, problems: list[tuple[str, str]]) -> None:
        super().__init__(
            "Invalid recipe draft",
            detail="; ".join(f"{f}: {m}" for f, m in problems),
            members={"errors": [{"field": f, "message": m} for f, m in problems]},
        )
        self.problems = problems


class ForbiddenError(ServiceError):
    """The analyst may not publish this analysis."""

    status: int = 403


class ConflictError(ServiceError):
    """The recipe id and version are taken by other content, or being published."""

    status: int = 409


class NotFoundError(ServiceError):
    status: int = 404


class BadRequestError(ServiceError):
    """Malformed query parameters."""

    status: int = 400


class ProvisioningFailedError(ServiceError):
    """A DAP party refused the task or could not be reached."""

    status: int = 502

    def __init__(self, reason: str) -> None:
        super().__init__(f"Task provisioning failed: {reason}")


class _RacedError(InternalError):
    """A concurrent publication of the same recipe key recorded its pending task first."""


#: How long a publication waits for a concurrent one of the same draft (it provisions a task:
#: three services, each with its own request timeout).
_AWAIT_SECONDS = 60.0


@dataclass(frozen=True)
class PublishResult:
    record: RecipeRecord
    created: bool


def draft_hash(draft: RecipeDraft) -> bytes:
    return hashlib.sha256(canonical_json(draft.model_dump(mode="json", exclude_none=True))).digest()


def _shown(url: str) -> str:
    """A URL as a refusal names it: scheme, host, port and path, never user info or query
    (which could hold credentials)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    try:
        port = f":{parts.port}" if parts.port is not None else ""
    except ValueError:
        port = ""
    return f"{parts.scheme}://{host}{port}{parts.path}"


class RecipeService:
    def __init__(
        self,
        store: RecipeStore,
        signer: RecipeSigner,
        provisioner: Provisioner,
        clock: Clock,
        token_issuers: Sequence[TokenIssuerRef] = (),
    ) -> None:
        """`token_issuers`: the issuers the operator allows, each with its pinned key ids; the
        first is the one a draft naming none gets."""
        self.store = store
        self.signer = signer
        self.provisioner = provisioner
        self.clock = clock
        # Published with name and window spelled out: devices and aggregators read the same.
        self.token_issuers = {issuer.url.rstrip("/"): issuer.explicit() for issuer in token_issuers}

    def _sign_head(self, tree_size: int, timestamp: int, root: bytes) -> tuple[str, bytes]:
        message = tree_head_bytes(tree_size, timestamp, root)
        return self.signer.key_id, self.signer.sign(TREE_HEAD_SIGNATURE_CONTEXT, message)

    def _now_ms(self) -> int:
        return self.clock.now() * 1000

    def start(self) -> None:
        self.store.migrate()
        self.store.ensure_empty_head(self._sign_head, self._now_ms())

    # --- publication -----------------------------------------------------------------------

    def validate(self, draft: RecipeDraft) -> list[tuple[str, str]]:
        """Checks beyond the model's: VDAF consistency, the privacy claim, the issuer."""
        problems: list[tuple[str, str]] = []
        expected = expected_vdaf(draft.randomizer, draft.encoding, _vdaf_draft(draft))
        if draft.task.vdaf is not None and draft.task.vdaf != expected:
            problems.append(
                (
                    "task.vdaf",
                    f"{draft.task.vdaf.describe()} does not match the randomizer's "
                    f"{expected.describe()}",
                )
            )
        noise = draft.aggregator_noise
        if noise is not None:
            problems += [
                ("aggregator_noise", m)
                for m in noise_problems(noise, expected, draft.privacy.delta)
            ]
        assessment = assess_privacy(draft, expected)
        if not assessment.claim_met:
            needed = (
                f"min_batch_size >= {assessment.required_batch_size} is needed"
                if assessment.required_batch_size is not None
                else "no batch size up to 10^9 reaches it"
            )
            problems.append(
                (
                    "min_batch_size",
                    f"B={draft.min_batch_size} at q={draft.sampling_rate:g} gives "
                    f"epsilon={assessment.epsilon:.4g} at delta={draft.privacy.delta:g} "
                    f"({assessment.basis}), more than the claimed "
                    f"epsilon={draft.privacy.epsilon:g}; {needed}",
                )
            )
            central = noise_guarantee(noise, expected, draft.privacy.delta) if noise else None
            if central is not None:
                problems.append(
                    (
                        "aggregator_noise",
                        f"alone gives epsilon={central.eps:.4g} at delta={central.delta:g} "
                        f"({central.basis}), more than the claimed epsilon="
                        f"{draft.privacy.epsilon:g}",
                    )
                )
        problems += self._issuer(draft)[1]
        return problems

    def _issuer(self, draft: RecipeDraft) -> tuple[TokenIssuerRef | None, list[tuple[str, str]]]:
        """The configured issuer the draft gets, or why it gets none. The operator, not the
        analyst, decides whose tokens count (RFC 9576 §2: origins, here the aggregators,
        trust issuers): a draft may name an allowed issuer by URL and repeat its settings,
        never change them."""
        named = draft.token_issuer
        if named is None:
            default = next(iter(self.token_issuers.values()), None)
            if default is None:
                return None, [("token_issuer", "required: the server allows no token issuer")]
            return default, []
        allowed = self.token_issuers.get(named.url.rstrip("/"))
        if allowed is None:
            return None, [
                (
                    "token_issuer.url",
                    f"{_shown(named.url)} is not a token issuer this server's operator allows",
                )
            ]
        problems = [
            (f"token_issuer.{name}", "differs from the operator's setting for this issuer")
            for name, given, configured in (
                ("token_type", named.token_type, allowed.token_type),
                ("key_ids", named.key_ids or allowed.key_ids, allowed.key_ids),
                ("issuer_name", named.issuer_name or allowed.issuer_name, allowed.issuer_name),
                (
                    "window_seconds",
                    named.window_seconds or allowed.window_seconds,
                    allowed.window_seconds,
                ),
            )
            if given != configured
        ]
        return (None, problems) if problems else (allowed, [])

    def publish(self, draft: RecipeDraft, analyst: Analyst) -> PublishResult:
        if not analyst.may_publish(draft.analysis_id):
            raise ForbiddenError(f"{analyst.name} may not publish analysis {draft.analysis_id!r}")
        digest = draft_hash(draft)
        existing = self.store.get(draft.recipe_id, draft.version)
        if existing is not None:
            if existing.draft_hash != digest:
                raise ConflictError(
                    f"recipe {draft.recipe_id} version {draft.version} exists with other content"
                )
            return PublishResult(existing, False)
        problems = self.validate(draft)
        if problems:
            raise InvalidDraftError(problems)
        try:
            recipe = self._provision(draft, digest)
        except _RacedError:
            return self._await_publication(draft, digest)
        signed = self.signer.sign_recipe(recipe)
        canonical = recipe_bytes(recipe)
        record = RecipeRecord(
            recipe_id=recipe.recipe_id,
            version=recipe.version,
            draft_hash=digest,
            analysis_id=recipe.analysis_id,
            analyst=analyst.name,
            task_id=recipe.task.task_id,
            canonical=canonical,
            key_id=signed.key_id,
            signature=b64url_decode(signed.signature, "signature"),
            leaf_index=-1,
            created_at=self.clock.now(),
        )
        try:
            stored, created = self.store.append(
                record, leaf_hash(canonical), self._sign_head, self._now_ms()
            )
        except KeyConflictError:
            # A concurrent publication of another draft under this key won the race; the task
            # just created stays unused on the aggregators.
            raise ConflictError(
                f"recipe {draft.recipe_id} version {draft.version} exists with other content"
            ) from None
        return PublishResult(stored, created)

    def _provision(self, draft: RecipeDraft, draft_digest: bytes) -> Recipe:
        """Steps 6-7: the final recipe, its task existing and bound to its digest."""
        vdaf = expected_vdaf(draft.randomizer, draft.encoding, _vdaf_draft(draft))
        rate = draft.task.published_rate(draft.sampling_rate)
        request = TaskRequest(
            dap=draft.task.dap or "dap-09",
            vdaf=vdaf,
            query_type=draft.task.query_type,
            min_batch_size=draft.min_batch_size,
            time_precision=draft.task.time_precision,
            expires_in=draft.task.expires_in,
            rate_validation=None if rate is None else rate.setting(),
            aggregator_noise=draft.aggregator_noise,
        )
        issuer = self._issuer(draft)[0]
        assert issuer is not None  # validate() refused drafts without an allowed one
        try:
            if draft.task.task_id is not None:
                try:
                    return self._bind_existing(draft, request, issuer)
                except TaskMismatchError as exc:
                    raise InvalidDraftError([("task.task_id", str(exc))]) from None
            pending = self.store.pending(draft.recipe_id, draft.version)
            if pending is not None and pending.draft_hash == draft_digest:
                reused = self._resume(pending, request)
                if reused is not None:
                    return reused
            return self._create(draft, request, issuer, pending, draft_digest)
        except ProvisionError as exc:
            raise ProvisioningFailedError(str(exc)) from None

    def _await_publication(self, draft: RecipeDraft, draft_digest: bytes) -> PublishResult:
        """Another publication of this key got its pending task in first: if it is this
        draft, its result is ours (publication stays idempotent under concurrency)."""
        deadline = time.monotonic() + _AWAIT_SECONDS
        while True:
            # The pending task first: the winner's commit turns it into the record in one
            # transaction, so the record read after it sees that commit if the pending read
            # missed it (the other order let a commit fall between the reads: neither seen).
            pending = self.store.pending(draft.recipe_id, draft.version)
            record = self.store.get(draft.recipe_id, draft.version)
            if record is not None:
                if record.draft_hash != draft_digest:
                    break
                return PublishResult(record, False)
            if pending is None or pending.draft_hash != draft_digest:
                break
            if time.monotonic() > deadline:
                raise ConflictError(
                    f"recipe {draft.recipe_id} version {draft.version} is being published; retry"
                )
            time.sleep(0.05)
        raise ConflictError(
            f"recipe {draft.recipe_id} version {draft.version} exists with other content"
        )

    def _task(
        self,
        draft: RecipeDraft,
        request: TaskRequest,
        task_id: str,
        expiration: int | None,
        configs: tuple[str, str],
        task_configuration: str | None = None,
    ) -> RecipeTask:
        return RecipeTask(
            dap=None if request.dap == "dap-09" else request.dap,
            task_configuration=task_configuration,
            task_id=task_id,
            leader=self.provisioner.leader_url,
            helper=self.provisioner.helper_url,
            query_type=draft.task.query_type,
            vdaf=request.vdaf,
            time_precision=draft.task.time_precision,
            task_expiration=expiration,
            leader_hpke_configs=configs[0],
            helper_hpke_configs=configs[1],
            rate_validation=draft.task.published_rate(draft.sampling_rate),
        )

    def _bind_existing(
        self, draft: RecipeDraft, request: TaskRequest, issuer: TokenIssuerRef
    ) -> Recipe:
        """An analyst-named task: checked, never re-provisioned (its definition is fixed).

        The task must enforce what the recipe promises devices: tokens of the recipe's issuer
        under its pinned keys, and the recipe binding (without them, both aggregators would
        take reports of any client or recipe into the batch); its parameters must match
        (`Provisioner.existing`: VDAF, B, query type and limit, ...)."""
        assert draft.task.task_id is not None
        task = self.provisioner.existing(draft.task.task_id, request)
        if task.tokens is None:
            raise TaskMismatchError(
                f"task {task.task_id} does not require tokens: it would count reports of any client"
            )
        if task.recipe_digest is None:
            raise TaskMismatchError(f"task {task.task_id} does not bind reports to a recipe")
        recipe = draft.complete(
            self._task(
                draft,
                request,
                task.task_id,
                task.task_expiration,
                (task.leader_hpke_configs, task.helper_hpke_configs),
                task.task_configuration,
            ),
            issuer,
        )
        digest = b64url_encode(recipe_digest(recipe_bytes(recipe)))
        # A task bound to another recipe or token policy would refuse every report of this one.
        if task.recipe_digest != digest:
            raise TaskMismatchError(f"task {task.task_id} is bound to another recipe")
        if task.tokens != issuer.token_policy():
            raise TaskMismatchError(
                f"task {task.task_id} requires tokens of another issuer, name, window or keys"
            )
        return recipe

    def _resume(self, pending: PendingTask, request: TaskRequest) -> Recipe | None:
        """The recipe of an earlier attempt whose task exists, or None if it does not."""
        recipe = Recipe.model_validate_json(pending.canonical)
        try:
            task = self.provisioner.existing(pending.task_id, request)
        except TaskMissingError:
            return None  # stopped within create: start over under a fresh id
        if task.recipe_digest != b64url_encode(recipe_digest(pending.canonical)) or (
            task.tokens != recipe.token_issuer.token_policy()
        ):
            raise ProvisionError(f"pending task {pending.task_id} is bound otherwise")
        return recipe

    def _create(
        self,
        draft: RecipeDraft,
        request: TaskRequest,
        issuer: TokenIssuerRef,
        pending: PendingTask | None,
        draft_digest: bytes,
    ) -> Recipe:
        # The id and configs come first: the digest the task is bound to covers them. A dap-19
        # task's id is the taskprov derivation from its TaskConfiguration (which the recipe
        # publishes), so that comes first of all.
        now = self.clock.now()
        configuration: bytes | None = None
        if request.dap == "dap-19":
            configuration = new_configuration(
                request.vdaf,
                request.query_type,
                request.min_batch_size,
                request.time_precision,
                (self.provisioner.leader_url, self.provisioner.helper_url),
                request.expiration(now),
            )
            task_id = task_id_of(configuration).to_b64url()
        else:
            task_id = self.provisioner.new_task_id()
        configs = self.provisioner.hpke_configs()
        published = None if configuration is None else b64url_encode(configuration)
        recipe = draft.complete(
            self._task(draft, request, task_id, request.expiration(now), configs, published),
            issuer,
        )
        canonical = recipe_bytes(recipe)
        try:
            self.store.put_pending(
                PendingTask(draft.recipe_id, draft.version, draft_digest, task_id, canonical, now),
                replaces=None if pending is None else pending.task_id,
            )
        except KeyConflictError:
            raise _RacedError from None
        self.provisioner.create(
            NewTask(
                task_id=task_id,
                request=request,
                now=now,
                recipe_digest=b64url_encode(recipe_digest(canonical)),
                tokens=issuer.token_policy(),
                task_configuration=configuration,
            )
        )
        return recipe

    # --- reads -----------------------------------------------------------------------------

    def latest_head(self) -> StoredHead:
        head = self.store.latest_head()
        assert head is not None  # start() signs the empty tree
        return head

    def head(self, tree_size: int | None) -> StoredHead:
        """The signed head of `tree_size` (the latest if None)."""
        if tree_size is None:
            return self.latest_head()
        # The store keeps sizes as signed 64-bit integers; nothing larger can exist.
        head = self.store.head(tree_size) if 0 <= tree_size < 1 << 63 else None
        if head is None:
            raise NotFoundError(f"no tree head of size {tree_size}")
        return head

    def signed_document(self, record: RecipeRecord) -> dict[str, Any]:
        return {
            "recipe": Recipe.model_validate_json(record.canonical).model_dump(
                mode="json", exclude_none=True
            ),
            "key_id": record.key_id,
            "signature": b64url_encode(record.signature),
        }

    def recipe_with_proof(
        self, recipe_id: str, version: int | None, tree_size: int | None
    ) -> dict[str, Any]:
        record = self.store.get(recipe_id, version)
        if record is None:
            raise NotFoundError(
                f"no recipe {recipe_id}" + (f" version {version}" if version else "")
            )
        head = self.head(tree_size)
        if head.tree_size <= record.leaf_index:
            raise NotFoundError(f"the tree of size {head.tree_size} does not contain the recipe")
        hashes = self.store.leaf_hashes(head.tree_size)
        return {
            "signed_recipe": self.signed_document(record),
            "leaf_index": record.leaf_index,
            "tree_head": head.signed().model_dump(),
            "inclusion_proof": [
                b64url_encode(p) for p in inclusion_proof(hashes, record.leaf_index)
            ],
        }

    def listing(self) -> dict[str, Any]:
        head = self.latest_head()
        return {
            "tree_head": head.signed().model_dump(),
            "recipes": [
                {
                    "recipe_id": r.recipe_id,
                    "version": r.version,
                    "analysis_id": r.analysis_id,
                    "task_id": r.task_id,
                    "leaf_index": r.leaf_index,
                }
                for r in self.store.all_recipes()
                if r.leaf_index < head.tree_size
            ],
        }

    def consistency(self, first: int, second: int | None) -> dict[str, Any]:
        latest = self.latest_head().tree_size
        second = latest if second is None else second
        if not 0 <= first <= second:
            raise BadRequestError("need 0 <= first <= second")
        if second > latest:
            raise NotFoundError(f"the log has {latest} entries")
        hashes = self.store.leaf_hashes(second)
        return {
            "first": first,
            "second": second,
            "proof": [b64url_encode(p) for p in consistency_proof(hashes, first)],
        }

    def inclusion(
        self, leaf_index: int | None, leaf_hash_value: bytes | None, tree_size: int | None
    ) -> dict[str, Any]:
        head = self.head(tree_size)
        if leaf_index is None:
            assert leaf_hash_value is not None
            leaf_index = self.store.leaf_index_of(leaf_hash_value)
            if leaf_index is None:
                raise NotFoundError("no leaf with this hash")
        if not 0 <= leaf_index < head.tree_size:
            raise NotFoundError(f"leaf {leaf_index} is not in the tree of size {head.tree_size}")
        hashes = self.store.leaf_hashes(head.tree_size)
        assert root_hash(hashes) == head.root, "stored head does not match stored leaves"
        return {
            "leaf_index": leaf_index,
            "tree_size": head.tree_size,
            "proof": [b64url_encode(p) for p in inclusion_proof(hashes, leaf_index)],
        }


def _vdaf_draft(draft: RecipeDraft) -> VdafVersion:
    """The VDAF draft of the task a draft asks for (VDAF-20 for a dap-19 task)."""
    return VDAF_OF_DAP[draft.task.dap or "dap-09"]
