"""Taskprov for DAP-19 tasks: the `DAP-Taskprov` header, the task id and verify key derived
from a TaskConfiguration, and the opt-out rules every party applies (taskprov editor's copy
after -03, the one paired with DAP-19; digest dap-19.md §11).

- Header (taskprov §"DAP-Taskprov Structured Header"): an RFC 9651 Item whose value is a Byte
  Sequence, ``:<base64 of the encoded TaskConfiguration>:``. A value of another type, one
  that does not parse as an Item, one whose bytes are no TaskConfiguration, and every
  parameter are ignored: `parse_header` gives None for each, and the request goes on as if
  the header were absent.
- Task id (§"Deriving the DAP Task ID"): ``SHA-256(SHA-256("dap-taskprov task id") ||
  task_config)``, over the exact bytes (never a re-encoding). sagg gives every DAP-19 task it
  creates this id, so any of them could be announced by the header unchanged.
- Verify key (§"Deriving the VDAF Verification Key"): ``HKDF-Expand(HKDF-Extract(salt =
  SHA-256("dap-taskprov"), IKM = verify_key_init), info = task_id, L = VERIFY_KEY_SIZE)`` with
  SHA-256, from the 32-byte `verify_key_init` the aggregators share out of band.
- Opt-out (§"Opting into a Task"): a party MUST opt out of a task that has ended (its
  `task_interval`) or whose batch mode or VDAF it does not implement (`must_opt_out`); the
  MAY reasons are each party's policy (`services.aggregator.taskprov`).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from collections.abc import Mapping
from typing import Final

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from shared.codec import DecodeError
from shared.dap.ids import TaskId
from shared.dap.messages19 import TaskConfiguration, seconds_from_time
from shared.dap.vdaf_codepoints import vdaf_spec

#: The HTTP header that carries a task's configuration (taskprov §"DAP-Taskprov Structured
#: Header"); header names are case-insensitive.
HEADER: Final = "DAP-Taskprov"
#: The label hashed into the task id derivation (taskprov §"Deriving the DAP Task ID").
TASK_ID_LABEL: Final = b"dap-taskprov task id"
#: The label whose hash salts the verify key derivation (§"Deriving the VDAF Verification Key").
VERIFY_KEY_SALT_LABEL: Final = b"dap-taskprov"
#: The length of `verify_key_init` (taskprov: "The length of this secret MUST be 32 bytes").
VERIFY_KEY_INIT_SIZE: Final = 32

__all__ = [
    "HEADER",
    "TASK_ID_LABEL",
    "VERIFY_KEY_INIT_SIZE",
    "encode_header",
    "must_opt_out",
    "parse_header",
    "task_id_of",
    "verify_key",
]


def task_id_of(task_configuration: bytes) -> TaskId:
    """The task id of an encoded TaskConfiguration (its exact bytes, never a re-encoding)."""
    prefix = hashlib.sha256(TASK_ID_LABEL).digest()
    return TaskId(hashlib.sha256(prefix + task_configuration).digest())


def verify_key(verify_key_init: bytes, task_id: TaskId, size: int) -> bytes:
    """The task's VDAF verify key of `size` bytes (VERIFY_KEY_SIZE: 32 for VDAF-20 Prio3)."""
    if len(verify_key_init) != VERIFY_KEY_INIT_SIZE:
        raise ValueError(f"verify_key_init must be {VERIFY_KEY_INIT_SIZE} bytes")
    salt = hashlib.sha256(VERIFY_KEY_SALT_LABEL).digest()
    # `HKDF.derive` is HKDF-Extract(salt, IKM) then HKDF-Expand(PRK, info, L) (RFC 5869 §2).
    hkdf = HKDF(algorithm=hashes.SHA256(), length=size, salt=salt, info=task_id.value)
    return hkdf.derive(verify_key_init)


def encode_header(task_configuration: bytes) -> str:
    """The header value announcing a task: an RFC 9651 Byte Sequence (§3.3.5, padded base64)."""
    return ":" + base64.b64encode(task_configuration).decode("ascii") + ":"


# RFC 9651 §3.1.2 parameters after the bare item: ``*( ";" *SP key [ "=" bare-item ] )``, where
# a key is ``( lcalpha / "*" ) *( lcalpha / DIGIT / "_" / "-" / "." / "*" )``. The values are
# bare items (§3.3): integer or decimal, string, token, byte sequence, boolean, date (RFC 9651
# §3.3.7) or display string (§3.3.8). Parameters are ignored, but a value whose parameters do
# not parse is no Item at all, so the grammar is checked.
_BARE_ITEM: Final = (
    r"(?:-?[0-9]{1,15}(?:\.[0-9]{1,3})?"  # integer, decimal (§3.3.1, §3.3.2)
    r'|"(?:[\x20-\x21\x23-\x5b\x5d-\x7e]|\\["\\])*"'  # string (§3.3.3)
    r"|[A-Za-z*][!#$%&'*+\-.^_`|~0-9A-Za-z:/]*"  # token (§3.3.4)
    r"|:[A-Za-z0-9+/=]*:"  # byte sequence (§3.3.5)
    r"|\?[01]"  # boolean (§3.3.6)
    r"|@-?[0-9]{1,15}"  # date (§3.3.7)
    r'|%"(?:[\x20-\x21\x23-\x24\x26-\x7e]|%[0-9a-f]{2})*")'  # display string
)
_PARAMETERS: Final = rf"(?:; *[a-z*][a-z0-9_\-.*]*(?:={_BARE_ITEM})?)*"
_BYTE_SEQUENCE_ITEM: Final = re.compile(rf" *:([A-Za-z0-9+/=]*):{_PARAMETERS} *")


def _decode_base64(text: str) -> bytes | None:
    """RFC 9651 §4.2.7: base64 (RFC 4648 §4) whose padding may be absent; None if invalid."""
    bare = text.rstrip("=")
    if "=" in bare or len(text) - len(bare) > 2 or len(bare) % 4 == 1:
        return None
    try:
        return base64.b64decode(bare + "=" * (-len(bare) % 4), validate=True)
    except (binascii.Error, ValueError):
        return None


def parse_header(headers: Mapping[str, str]) -> bytes | None:
    """The encoded TaskConfiguration a request announces in its `DAP-Taskprov` header, or None
    when it has none or one that must be ignored (module docstring)."""
    value = headers.get(HEADER) or headers.get(HEADER.lower())
    if value is None:
        return None
    match = _BYTE_SEQUENCE_ITEM.fullmatch(value)
    if match is None:
        return None
    raw = _decode_base64(match.group(1))
    if raw is None:
        return None
    try:
        TaskConfiguration.decode(raw)
    except DecodeError:
        return None
    return raw


def must_opt_out(config: TaskConfiguration, now: int) -> list[str]:
    """Why every party MUST opt out of the task at `now` (seconds): it has ended, or its batch
    mode, VDAF or a task extension is not implemented here (taskprov §"Opting into a Task",
    DAP-19 §4.2). Empty: it may opt in."""
    reasons = config.opt_out_reasons()
    if config.vdaf is not None:
        try:
            vdaf_spec(config.vdaf_type, config.vdaf_configuration)
        except ValueError as exc:
            reasons.append(f"VDAF not implemented: {exc}")
    interval = config.task_interval
    if interval is not None and now >= seconds_from_time(interval.end, config.time_precision):
        reasons.append("the task has ended (task_interval)")
    return reasons
