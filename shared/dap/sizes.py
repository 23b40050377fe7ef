"""Exact size bounds of a task's reports, from its VDAF and its extensions (DAP-09 §4.4.2).

A `Report` is ``ReportMetadata || public_share<0..2^32-1> || HpkeCiphertext (leader) ||
HpkeCiphertext (helper)``, and each ciphertext seals a ``PlaintextInputShare``
(``extensions<0..2^16-1> || payload<0..2^32-1>``) under sagg's one HPKE suite (X25519 /
HKDF-SHA256 / AES-128-GCM: the encapsulated key and the tag have fixed sizes). For a Prio3
task the public share and each aggregator's input share have exact lengths, and the only
extensions an aggregator accepts are sagg's two (`shared.dap.extensions`): a Privacy Pass
token when the task takes tokens and a RecipeBinding when it is bound to a recipe. So a report
of a task has an exact largest size, and a helper ciphertext an exact smallest and largest
one: anything outside is not a report of this task, whatever its length prefixes claim (the
4 GiB "poison" helper share).

The leader caps its upload bodies at `max_report_len` and refuses a helper ciphertext outside
`helper_ciphertext_bounds` at upload, before it is stored and re-sent in aggregation jobs.
"""

from __future__ import annotations

from typing import Final

from shared.dap.ids import REPORT_ID_SIZE
from shared.hpke import ENC_SIZE, TAG_SIZE
from shared.privacypass.keys import TOKEN_KEY_ID_SIZE
from shared.privacypass.messages import CHALLENGE_DIGEST_SIZE, TOKEN_NONCE_SIZE
from shared.privacypass.rsabssa import BLIND_RSA_NK
from shared.vdaf.prio3 import Prio3

__all__ = [
    "ciphertext_len",
    "helper_ciphertext_bounds",
    "max_extensions_len",
    "max_report_len",
]

#: ``ReportMetadata``: report id and a uint64 time.
_METADATA_LEN: Final = REPORT_ID_SIZE + 8
#: ``Extension`` header: uint16 type and uint16 length of its data.
_EXTENSION_HEADER_LEN: Final = 4
#: RFC 9577 §2.2 `Token` of type 2: uint16 type, nonce, challenge digest, key id, authenticator.
_TOKEN_LEN: Final = 2 + TOKEN_NONCE_SIZE + CHALLENGE_DIGEST_SIZE + TOKEN_KEY_ID_SIZE + BLIND_RSA_NK
#: `RecipeBinding`: a SHA-256 digest and a uint64 batch size.
_BINDING_LEN: Final = 32 + 8
#: ``HpkeCiphertext`` framing: config id, uint16 length of enc, uint32 length of the payload.
_CIPHERTEXT_FRAMING_LEN: Final = 1 + 2 + 4
#: ``PlaintextInputShare`` framing: uint16 length of the extensions, uint32 of the payload.
_PLAINTEXT_FRAMING_LEN: Final = 2 + 4


def max_extensions_len(*, token: bool, binding: bool) -> int:
    """Bytes of the extensions an aggregator of a task with (or without) a token policy and a
    recipe binding accepts in one input share: each at most once, nothing else."""
    size = 0
    if token:
        size += _EXTENSION_HEADER_LEN + _TOKEN_LEN
    if binding:
        size += _EXTENSION_HEADER_LEN + _BINDING_LEN
    return size


def ciphertext_len(input_share_len: int, extensions_len: int) -> int:
    """Encoded ``HpkeCiphertext`` sealing a PlaintextInputShare of these sizes."""
    plaintext = _PLAINTEXT_FRAMING_LEN + extensions_len + input_share_len
    return _CIPHERTEXT_FRAMING_LEN + ENC_SIZE + plaintext + TAG_SIZE


def helper_ciphertext_bounds(vdaf: Prio3, *, token: bool, binding: bool) -> tuple[int, int]:
    """Smallest and largest encoded helper ``HpkeCiphertext`` of the task: its exact input
    share with no extensions, and with every extension the task accepts."""
    share = vdaf.input_share_len(1)
    return (
        ciphertext_len(share, 0),
        ciphertext_len(share, max_extensions_len(token=token, binding=binding)),
    )


def max_report_len(vdaf: Prio3, *, token: bool, binding: bool) -> int:
    """Largest encoded `Report` of the task: the upload body cap."""
    extensions = max_extensions_len(token=token, binding=binding)
    return (
        _METADATA_LEN
        + 4
        + vdaf.public_share_len()
        + ciphertext_len(vdaf.input_share_len(0), extensions)
        + ciphertext_len(vdaf.input_share_len(1), extensions)
    )
