"""One validation of a report share for both aggregators and both DAP versions (DAP-09
§4.4.2, §4.5.1.3-§4.5.1.4, digest §8; DAP-19 §4.4.2.2, §4.5.3.3-§4.5.3.4, dap-19.md digest §9
"who checks what").

The task's `wire` supplies what the versions do differently: the info label and AAD (DAP-19
binds the TaskConfiguration), the PlaintextInputShare, time units (checks compare seconds),
the lifetime (`task_expiration`, or DAP-19's `task_interval`: before it is task_not_started,
after it task_expired, both DAP-19's report_dropped) and DAP-19's report-extension rules (order,
a type in both lists, unsupported types: `unsupported_extension`), checked before sagg's own.

The leader checks its own input share at upload and the helper its own at aggregation-job
init, with the same checks in the order DAP-09 §4.5.1.4 gives the helper: the HPKE config id,
decryption under the role's info string and the report's AAD, decoding (and the VDAF's share
sizes), the report time against the clock and the task's window, then sagg's extensions
(`shared.dap.extensions`) against this aggregator's own task definition:
- a task with `recipe_digest` needs a RecipeBinding of that digest and of the task's
  min_batch_size (001 §4.8: a leader provisioned with a lower B gets every report refused by
  the helper);
- a task with `tokens` needs a Privacy Pass token under one of the task's pinned issuer keys
  (`TokenPolicy.key_ids`: the same for every device, so no key tags a report) that verifies
  for the task, the report's time window and this aggregator's role (a token of the leader's
  share never verifies at the helper, so a leader cannot reuse the tokens it sees); whether it
  was spent before is the datastore's, in the transaction that accepts the report.

A failed check is a `Refusal`, one vocabulary for both roles: its `problem` is what the leader
answers a DAP-09 upload (DAP-09 §4.4.2), its `prepare_error` what the helper answers in the
PrepareResp (DAP-09 §4.5.1.4), its `report_error` DAP-19's code in UploadErrors and VerifyResp,
and its `reason` the counter label (`rejection_counts`; at aggregation the PrepareError's name
unless that is invalid_message, which many checks give).
The leader's upload (`Aggregator.upload`) checks the whole Report first (its encoding, the
helper ciphertext's size); the datastore adds replays, collected batches and spent tokens.
"""

from __future__ import annotations

import hmac
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, Final, NamedTuple

from services.aggregator.crypto_cpu import CryptoCpu
from services.aggregator.datastore import TokenSpend, UploadOutcome
from services.aggregator.datastore.uploads import REASON_TOKEN_SPENT
from services.aggregator.settings import AggregatorSettings
from services.aggregator.tokens import IssuerKeyCache
from services.aggregator.wire import REPORT_ERROR_OF
from shared import hpke
from shared.codec import DecodeError
from shared.dap.extensions import decode_extensions, token_challenge, token_window_start
from shared.dap.messages import PlaintextInputShare, PrepareError, Role, SealedShare
from shared.dap.messages19 import ReportError
from shared.dap.problems import REPORT_REPLAYED_DETAIL, ProblemType
from shared.privacypass.verify import InvalidTokenError, verify_token

if TYPE_CHECKING:
    from services.aggregator.service import Task

_INVALID, _REJECTED = ProblemType.INVALID_MESSAGE, ProblemType.REPORT_REJECTED


class Refusal(Enum):
    """Why a report share is refused: the counter reason, the upload's problem type, the
    helper's PrepareError (by default those of a binding or token refusal: reportRejected,
    invalid_message), and the upload problem's `detail`."""

    MALFORMED_REPORT = ("invalid_message", _INVALID)
    #: Leader only: a helper ciphertext no report of the task can have (`shared.dap.sizes`);
    #: the leader would otherwise store it and re-send it in every aggregation job.
    HELPER_SHARE_SIZE = ("helper_share_size", _INVALID)
    UNKNOWN_CONFIG = (
        "hpke_unknown_config_id",
        ProblemType.OUTDATED_CONFIG,
        PrepareError.HPKE_UNKNOWN_CONFIG_ID,
    )
    UNDECRYPTABLE = ("hpke_decrypt_error", _REJECTED, PrepareError.HPKE_DECRYPT_ERROR)
    MALFORMED_SHARE = ("invalid_message", _INVALID)
    TOO_EARLY = ("report_too_early", ProblemType.REPORT_TOO_EARLY, PrepareError.REPORT_TOO_EARLY)
    TASK_EXPIRED = ("task_expired", _REJECTED, PrepareError.TASK_EXPIRED)
    #: DAP-19 only: before the task's `task_interval` (-18's task_not_started).
    TASK_NOT_STARTED = ("task_not_started", _REJECTED, PrepareError.REPORT_DROPPED)
    #: Older than `report_expiry_age`: its id may already have left the replay set
    #: (`drivers.garbage`), so a replay could not be told.
    REPORT_EXPIRED = ("report_expired", _REJECTED, PrepareError.REPORT_DROPPED)
    EXTENSION = ("invalid_extension", _INVALID)
    #: DAP-19 only (#789): an extension type this aggregator does not implement.
    UNSUPPORTED_EXTENSION = ("unsupported_extension", _INVALID)
    BINDING_MISSING = "binding_missing"
    BINDING_MISMATCH = "binding_mismatch"
    TOKEN_MISSING = "token_missing"
    TOKEN_INVALID = "token_invalid"
    TOKEN_EXPIRED = "token_expired"
    #: A token under a key the task does not pin (a per-device key would tag the report), or of
    #: an issuer this aggregator is not configured to trust (a task stored before the setting).
    TOKEN_KEY_NOT_PINNED = "token_key_not_pinned"
    TOKEN_ISSUER_NOT_ALLOWED = "token_issuer_not_allowed"
    # What the datastore finds when it stores an accepted share (`put_reports`,
    # `helper_init_job`): a replayed id, a batch collected already, a token spent before.
    REPLAYED = ("report_replayed", _REJECTED, PrepareError.REPORT_REPLAYED)
    BATCH_COLLECTED = ("batch_collected", _REJECTED, PrepareError.BATCH_COLLECTED)
    TOKEN_SPENT = REASON_TOKEN_SPENT

    def __new__(
        cls,
        reason: str,
        problem: ProblemType = _REJECTED,
        prepare_error: PrepareError = PrepareError.INVALID_MESSAGE,
    ) -> Refusal:
        # Numbered, not valued by the tuple: refusals may share a reason (two malformed kinds).
        member = object.__new__(cls)
        member._value_ = len(cls.__members__)
        member.reason = reason
        member.problem = problem
        member.prepare_error = prepare_error
        return member

    reason: str
    problem: ProblemType
    prepare_error: PrepareError

    @property
    def detail(self) -> str:
        # Every binding and token refusal has the same detail: a client learns no more from it.
        return _DETAILS.get(self, "report binding or token refused")

    @property
    def report_error(self) -> ReportError:
        """DAP-19's per-report error for this refusal (UploadErrors and VerifyResp)."""
        return _REPORT_ERRORS.get(self) or REPORT_ERROR_OF[self.prepare_error]

    @property
    def aggregation_reason(self) -> str | None:
        """The counter reason at aggregation: None for the PrepareError's own name (what the
        leader counts of the helper's answers too), refined only for invalid_message, which
        many checks give."""
        return self.reason if self.prepare_error == PrepareError.INVALID_MESSAGE else None


_DETAILS: Final = {
    Refusal.MALFORMED_REPORT: "malformed Report",
    Refusal.HELPER_SHARE_SIZE: "the helper's input share has a size no report of the task can have",
    Refusal.UNKNOWN_CONFIG: "unknown HPKE config id",
    Refusal.UNDECRYPTABLE: "input share does not decrypt",
    Refusal.MALFORMED_SHARE: "malformed PlaintextInputShare, or a share of the wrong size",
    Refusal.TOO_EARLY: "report time is in the future",
    Refusal.TASK_EXPIRED: "task expired",
    Refusal.REPORT_EXPIRED: "report older than the expiry age",
    Refusal.EXTENSION: "unrecognized or repeated report extension",
    Refusal.REPLAYED: REPORT_REPLAYED_DETAIL,
    Refusal.BATCH_COLLECTED: "the report's batch was already collected",
}


#: DAP-19 codes where the DAP-09 PrepareError does not say it (digest §5.4, §6.5): a helper
#: share of impossible size and an unsupported extension (#789). A report into a collected
#: batch gets `batch_collected` at upload too (ambiguity 9: the text MAY answer
#: report_replayed), the code the helper gives it at commit: a client then reads
#: `report_replayed` on a resend as "stored by an earlier attempt" (`client_sdk.upload`).
_REPORT_ERRORS: Final = {
    Refusal.HELPER_SHARE_SIZE: ReportError.INVALID_MESSAGE,
    Refusal.UNSUPPORTED_EXTENSION: ReportError.UNSUPPORTED_EXTENSION,
}

#: The refusal of an upload the datastore did not store (`UploadOutcome`), for both versions'
#: answers (DAP-09's problem document, DAP-19's UploadErrors entry).
STORE_REFUSALS: Final[dict[str, Refusal]] = {
    UploadOutcome.REPLAYED: Refusal.REPLAYED,
    UploadOutcome.COLLECTED: Refusal.BATCH_COLLECTED,
    UploadOutcome.TOKEN_SPENT: Refusal.TOKEN_SPENT,
}


class Accepted(NamedTuple):
    """A share that passed every check: its VDAF payload, the token to spend, if any, and the
    report's time in seconds. (A tuple: one is made per report on both aggregators, at a
    third of a frozen dataclass's cost.)"""

    payload: bytes
    spend: TokenSpend | None
    time_s: int

    def __repr__(self) -> str:
        # The payload is an input share: it has no place in a log line.
        return f"Accepted(spend={self.spend!r}, time_s={self.time_s})"


@dataclass(frozen=True, slots=True)
class _Bounds:
    """What one `check_all` checks every share against, worked out once: the share sizes of
    the task's VDAF, the report times no time check refuses, and whether extensions matter."""

    now: int
    input_share_len: int
    public_share_len: int
    #: Past the clock's tolerance: `reportTooEarly`.
    too_early_after_s: int
    #: The task's lifetime (`Wire.lifetime_s`): before it task_not_started, after it
    #: task_expired.
    first_s: int | None
    last_s: int | None
    #: Before this the report is older than `report_expiry_age`: its replay record may be gone.
    expired_before_s: int | None
    #: Every time check passes in [earliest_s, latest_s].
    earliest_s: float
    latest_s: int
    #: The task asks nothing of a report's extensions (no recipe binding, no token).
    plain: bool

    @classmethod
    def of(cls, task: Task, role: Role, settings: AggregatorSettings, now: int) -> _Bounds:
        first_s, last_s = task.wire.lifetime_s
        age = task.report_expiry_age
        expired_before_s = None if age is None else now - age
        too_early_after_s = now + settings.clock_skew_s
        lows = [t for t in (first_s, expired_before_s) if t is not None]
        return cls(
            now,
            task.vdaf.input_share_len(0 if role == Role.LEADER else 1),
            task.vdaf.public_share_len(),
            too_early_after_s,
            first_s,
            last_s,
            expired_before_s,
            max(lows, default=-math.inf),
            too_early_after_s if last_s is None else min(too_early_after_s, last_s),
            task.recipe_digest is None and task.tokens is None,
        )

    def time_refusal(self, time_s: int) -> Refusal | None:
        """The time checks in the order DAP-09 §4.5.1.4 gives them."""
        if time_s > self.too_early_after_s:
            return Refusal.TOO_EARLY
        if self.last_s is not None and time_s > self.last_s:
            return Refusal.TASK_EXPIRED
        if self.first_s is not None and time_s < self.first_s:
            return Refusal.TASK_NOT_STARTED
        if self.expired_before_s is not None and time_s < self.expired_before_s:
            return Refusal.REPORT_EXPIRED
        return None


@dataclass(frozen=True)
class ReportChecker:
    """The checks of one aggregator process: its HPKE keys, issuer keys and clock tolerances."""

    keypair: Callable[[int], hpke.HpkeKeyPair | None]
    issuer_keys: IssuerKeyCache
    #: `clock_skew_s`, and how long after its window a token is still accepted at upload and
    #: at aggregation (the leader may aggregate a report long after it was uploaded).
    settings: AggregatorSettings
    #: Counts the opens' CPU.
    cpu: CryptoCpu

    def check_all(
        self,
        task: Task,
        role: Role,
        shares: Sequence[SealedShare],
        now: int,
        *,
        wait: bool = True,
        fetch: bool = True,
    ) -> list[Accepted | Refusal]:
        """Check the input share of `role` (this aggregator's own) of each report, under the
        task's DAP version (`task.wire`: labels, AAD, time units, extension rules).

        Raises `IssuerUnavailableError` when the task's issuer keys cannot be had; `wait` and
        `fetch` are `IssuerKeyCache.keys`'s."""
        bounds = _Bounds.of(task, role, self.settings, now)
        return [
            opened
            if isinstance(opened, Refusal)
            else self._check_opened(task, role, share, opened, bounds, wait=wait, fetch=fetch)
            for share, opened in zip(shares, self._open_all(task, role, shares), strict=True)
        ]

    def _open_all(
        self, task: Task, role: Role, shares: Sequence[SealedShare]
    ) -> list[bytes | Refusal]:
        """Each share's plaintext, or why it has none. The opens run in one batch whose CPU is
        counted once: interleaved with the other checks, an open cost 1.6 times as much
        (X25519's code and tables fall out of cache; measured 68 against 42 us)."""
        wire = task.wire
        opened: list[bytes | Refusal] = []
        work: list[tuple[hpke.HpkeKeyPair, bytes, bytes, bytes]] = []
        at: list[int] = []
        for share in shares:
            keypair = self.keypair(share.config_id)
            if keypair is None:
                opened.append(Refusal.UNKNOWN_CONFIG)
                continue
            aad = wire.input_share_aad(share.metadata, share.public_share)
            at.append(len(opened))
            work.append((keypair, share.enc, aad, share.payload))
            opened.append(b"")
        plaintexts = self.cpu.hpke_open(
            "leader" if role == Role.LEADER else "helper",
            hpke.open_batch,
            work,
            wire.input_share_info(role),
        )
        for i, plaintext in zip(at, plaintexts, strict=True):
            opened[i] = Refusal.UNDECRYPTABLE if plaintext is None else plaintext
        return opened

    def _check_opened(
        self,
        task: Task,
        role: Role,
        sealed: SealedShare,
        plaintext: bytes,
        bounds: _Bounds,
        *,
        wait: bool,
        fetch: bool,
    ) -> Accepted | Refusal:
        wire = task.wire
        # Nothing in extensions and nothing the task asks of them: the payload is all there
        # is to read, without building the struct.
        payload = (
            wire.plain_payload(plaintext) if bounds.plain and not sealed.public_extensions else None
        )
        share = None
        if payload is None:
            try:
                share = wire.decode_plaintext_input_share(plaintext)
            except DecodeError:
                return Refusal.MALFORMED_SHARE
            payload = share.payload
        if (
            len(payload) != bounds.input_share_len
            or len(sealed.public_share) != bounds.public_share_len
        ):
            return Refusal.MALFORMED_SHARE
        time_s = wire.seconds(sealed.time)
        if not bounds.earliest_s <= time_s <= bounds.latest_s:
            refusal = bounds.time_refusal(time_s)
            if refusal is not None:
                return refusal
        if share is None or (
            bounds.plain and not share.extensions and not sealed.public_extensions
        ):
            return Accepted(payload, None, time_s)
        extension_error = wire.extension_error(sealed.public_extensions, share)
        if extension_error is not None:
            return (
                Refusal.UNSUPPORTED_EXTENSION
                if extension_error == ReportError.UNSUPPORTED_EXTENSION
                else Refusal.EXTENSION
            )
        grace_s = (
            self.settings.token_upload_grace_s
            if role == Role.LEADER
            else self.settings.token_aggregation_grace_s
        )
        refusal, spend = self._check_extensions(
            task, role, time_s, share, bounds.now, grace_s, wait=wait, fetch=fetch
        )
        return refusal if refusal is not None else Accepted(share.payload, spend, time_s)

    def _check_extensions(
        self,
        task: Task,
        role: Role,
        time_s: int,
        share: PlaintextInputShare,
        now: int,
        grace_s: int,
        *,
        wait: bool,
        fetch: bool,
    ) -> tuple[Refusal | None, TokenSpend | None]:
        parsed = decode_extensions(share.extensions)
        if not parsed.ok:
            return Refusal.EXTENSION, None
        if task.recipe_digest is not None:
            binding = parsed.binding
            if binding is None:
                return Refusal.BINDING_MISSING, None
            if (
                not hmac.compare_digest(binding.recipe_digest, task.recipe_digest)
                or binding.min_batch_size != task.min_batch_size
            ):
                return Refusal.BINDING_MISMATCH, None
        policy = task.tokens
        if policy is None:
            return None, None
        token = parsed.token
        if token is None:
            return Refusal.TOKEN_MISSING, None
        window_end = token_window_start(time_s, policy.window_seconds) + (policy.window_seconds)
        if now > window_end + grace_s:
            return Refusal.TOKEN_EXPIRED, None
        if not policy.pins(token.token_key_id):
            return Refusal.TOKEN_KEY_NOT_PINNED, None
        if not self.issuer_keys.allows(policy.issuer_url):
            return Refusal.TOKEN_ISSUER_NOT_ALLOWED, None
        challenge = token_challenge(task.id, time_s, policy, role)
        keys = self.issuer_keys.keys(policy.issuer_url, token.token_key_id, wait=wait, fetch=fetch)
        try:
            verify_token(token, keys, challenge.digest())
        except InvalidTokenError:
            return Refusal.TOKEN_INVALID, None
        return None, TokenSpend(token.token_key_id, challenge.redemption_context, token.nonce)
