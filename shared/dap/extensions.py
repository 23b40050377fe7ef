"""sagg's private report extensions: the contract between devices and the aggregators.

DAP-09 §4.4.2 lets a client attach `Extension`s to each `PlaintextInputShare`; the aggregators
must reject a report whose extensions they do not recognize or that repeat (DAP-09 §4.5.1.4).
sagg defines two, in the private-use range (defined below), each present in *both* input
shares so that each aggregator checks them on its own:

- ``EXTENSION_RECIPE_BINDING`` (0xFE01): a `RecipeBinding`, the SHA-256 of the recipe's
  canonical bytes (`shared.recipe.signing.recipe_bytes`) and the minimum batch size B the
  device's privacy check assumed (001 §4.8: the servers must enforce the B the device relied
  on, so a report of one recipe cannot be aggregated under another task configuration).
- ``EXTENSION_PRIVACY_PASS_TOKEN`` (0xFE00): an RFC 9577 `Token` (type 2, RFC 9578) whose
  challenge is `token_challenge(task_id, report_time, policy, role)`: the token is good for one
  task, one time window and one aggregator role, and each aggregator accepts each token nonce
  once (001 §4.1: only attested devices contribute; a device can contribute at most its quota
  of tokens per window).

Unlike the binding, the token differs between the two shares: each share carries its own
token, bound to that aggregator's role, and each aggregator verifies and spends only the token
of the share it decrypts. A token the leader sees (in its own share) therefore never verifies
at the helper: a malicious leader cannot copy an honest report's token into a helper share of
its own making (HPKE is public-key, anyone can seal to the helper) and so cannot replace
honest reports by its own. RFC 9577 §2.1.1.2 asks origins that share a redemption context to
share double-spend state; the two aggregators share none, so they must not share a context. The
device obtains the two tokens by two separate blind issuances, so the issuer and the attester
see two ordinary token requests and never the role, which is inside the blinded challenge.

The token challenge is never sent: both sides recompute it. Its fields:

- ``token_type`` 2 (blind RSA, publicly verifiable, so each aggregator checks its token with
  the issuer's public key);
- ``issuer_name`` the policy's issuer name (RFC 9577 §2.1.1);
- ``redemption_context = SHA-256("sagg token context v2" || task_id || uint64 window_start ||
  uint8 role)`` with ``window_start = report_time - report_time % window_seconds`` and ``role``
  the DAP `Role` of the aggregator that redeems it (leader 2, helper 3): binds the task, the
  window and the redeeming aggregator without a per-report value, so tokens can be fetched
  ahead of need (000 §4.4, 001 appendix A: token fetches must not coincide with uploads). (v1
  had no role: its tokens verify nowhere now.)
- ``origin_info`` empty: the token is not tied to an origin name; the task id and the role in
  the context do that job.

`decode_extensions` is strict but does not decide: it reports duplicates and unknown types and
leaves the verdict (DAP-09's ``invalid_message``) to the aggregator.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final, Self
from urllib.parse import urlsplit

from shared.codec import DecodeError, Decoder, Encoder, TlsStruct
from shared.dap.ids import TaskId
from shared.dap.messages import Extension, Role
from shared.dap.task import TokenPolicy
from shared.privacypass.messages import TOKEN_TYPE_BLIND_RSA, Token, TokenChallenge

#: A Privacy Pass token (RFC 9577 §2.2 `Token`) that the report spends, in both input shares.
EXTENSION_PRIVACY_PASS_TOKEN: Final = 0xFE00

#: The recipe the device answered and its minimum batch size B, in both input shares (001 §4.8).
EXTENSION_RECIPE_BINDING: Final = 0xFE01


__all__ = [
    "KNOWN_EXTENSIONS",
    "TOKEN_CONTEXT_LABEL",
    "TOKEN_ROLES",
    "ParsedExtensions",
    "RecipeBinding",
    "decode_extensions",
    "encode_extensions",
    "recipe_binding_extension",
    "recipe_digest",
    "token_challenge",
    "token_extension",
    "token_policy_for_issuer",
    "token_window_start",
]

TOKEN_CONTEXT_LABEL = b"sagg token context v2"
TOKEN_ROLES = (Role.LEADER, Role.HELPER)
DIGEST_SIZE = 32
KNOWN_EXTENSIONS = frozenset({EXTENSION_PRIVACY_PASS_TOKEN, EXTENSION_RECIPE_BINDING})


def recipe_digest(canonical: bytes) -> bytes:
    """SHA-256 of a recipe's canonical bytes (what `TaskDefinition.recipe_digest` holds)."""
    return hashlib.sha256(canonical).digest()


@dataclass(frozen=True, slots=True)
class RecipeBinding(TlsStruct):
    """``struct { opaque recipe_digest[32]; uint64 min_batch_size; } RecipeBinding``."""

    recipe_digest: bytes
    min_batch_size: int

    def __post_init__(self) -> None:
        if len(self.recipe_digest) != DIGEST_SIZE:
            raise ValueError("RecipeBinding.recipe_digest must be 32 bytes")

    def _encode_into(self, enc: Encoder) -> None:
        enc.fixed(self.recipe_digest, DIGEST_SIZE, "RecipeBinding.recipe_digest")
        enc.u64(self.min_batch_size, "RecipeBinding.min_batch_size")

    @classmethod
    def _decode_from(cls, dec: Decoder) -> Self:
        digest = dec.fixed(DIGEST_SIZE, "RecipeBinding.recipe_digest")
        return cls(digest, dec.u64("RecipeBinding.min_batch_size"))


def recipe_binding_extension(binding: RecipeBinding) -> Extension:
    return Extension(EXTENSION_RECIPE_BINDING, binding.encode())


def token_extension(token: Token) -> Extension:
    return Extension(EXTENSION_PRIVACY_PASS_TOKEN, token.encode())


def token_window_start(report_time: int, window_seconds: int) -> int:
    if window_seconds < 1 or report_time < 0:
        raise ValueError("need report_time >= 0 and window_seconds >= 1")
    return report_time - report_time % window_seconds


def token_challenge(
    task_id: TaskId, report_time: int, policy: TokenPolicy, role: Role
) -> TokenChallenge:
    """The challenge the token of `role`'s input share answers (module docstring): task,
    window and redeeming aggregator bound."""
    if role not in TOKEN_ROLES:
        raise ValueError("only the leader and the helper redeem tokens")
    start = token_window_start(report_time, policy.window_seconds)
    context = hashlib.sha256(
        TOKEN_CONTEXT_LABEL + task_id.value + start.to_bytes(8, "big") + bytes([role])
    ).digest()
    return TokenChallenge(TOKEN_TYPE_BLIND_RSA, policy.issuer_name.encode(), context, b"")


def token_policy_for_issuer(issuer_url: str, window_seconds: int = 86_400) -> TokenPolicy:
    """The policy a device derives from a recipe's issuer URL: issuer_name is the URL's
    authority (host[:port]), as RFC 9577 §2.1.1 names issuers by host name. The recipe format
    carries no window, so both sides must use the same (default a day)."""
    authority = urlsplit(issuer_url).netloc
    if not authority:
        raise ValueError("the issuer URL has no host")
    return TokenPolicy(issuer_url=issuer_url, issuer_name=authority, window_seconds=window_seconds)


def encode_extensions(
    binding: RecipeBinding | None = None, token: Token | None = None
) -> tuple[Extension, ...]:
    """The extensions of one input share, in codepoint order (token, then binding)."""
    out: list[Extension] = []
    if token is not None:
        out.append(token_extension(token))
    if binding is not None:
        out.append(recipe_binding_extension(binding))
    return tuple(out)


@dataclass(frozen=True, slots=True)
class ParsedExtensions:
    """What `decode_extensions` found; `problems` empty means well-formed and unique."""

    binding: RecipeBinding | None = None
    token: Token | None = None
    duplicates: tuple[int, ...] = ()
    unknown: tuple[int, ...] = ()
    problems: tuple[str, ...] = field(default=())

    @property
    def ok(self) -> bool:
        return not self.problems


#: What a share without extensions parses to; it runs once per report on both aggregators.
_NO_EXTENSIONS: Final = ParsedExtensions()


def decode_extensions(extensions: Sequence[Extension]) -> ParsedExtensions:
    """Parse a PlaintextInputShare's extensions. Never raises for content: a duplicate, an
    unknown type or a malformed body is listed in `problems` (and the first well-formed
    instance of each known type is still returned) so the aggregator can decide."""
    if not extensions:
        return _NO_EXTENSIONS
    seen: set[int] = set()
    duplicates: list[int] = []
    unknown: list[int] = []
    problems: list[str] = []
    binding: RecipeBinding | None = None
    token: Token | None = None
    for ext in extensions:
        kind = ext.extension_type
        if kind in seen:
            if kind not in duplicates:
                duplicates.append(kind)
                problems.append(f"extension 0x{kind:04x} repeats")
            continue
        seen.add(kind)
        if kind == EXTENSION_RECIPE_BINDING:
            try:
                binding = RecipeBinding.decode(ext.extension_data)
            except DecodeError as exc:
                problems.append(f"malformed recipe binding: {exc}")
        elif kind == EXTENSION_PRIVACY_PASS_TOKEN:
            try:
                token = Token.decode(ext.extension_data)
            except (DecodeError, ValueError) as exc:
                problems.append(f"malformed token: {exc}")
        else:
            unknown.append(kind)
            problems.append(f"unknown extension 0x{kind:04x}")
    return ParsedExtensions(binding, token, tuple(duplicates), tuple(unknown), tuple(problems))
