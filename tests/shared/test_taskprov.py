"""Taskprov's header, task id and verify key (digest dap-19.md §11): the draft's example header
decoded to the digest's configuration, the digest's known answers for the id and the key, and
the RFC 9651 rules for what the header must be to count."""

from __future__ import annotations

import base64
import hashlib
import hmac

import pytest

from shared.dap.ids import TaskId
from shared.dap.messages import Interval
from shared.dap.messages19 import TaskConfiguration, TaskExtension
from shared.dap.taskprov import encode_header, must_opt_out, parse_header, task_id_of, verify_key
from tests.common.test_provisioning19 import TASKPROV_EXAMPLE

#: The example of taskprov §"DAP-Taskprov Structured Header" (editor's copy b58b4d7).
DRAFT_HEADER = (
    ":BHRlc3QAG2h0dHBzOi8vbGVhZGVyLmV4YW1wbGUuY29tLwAbaHR0cHM6Ly9oZWxwZXIuZXhhbXBsZS5jb20vAAAAAA"
    "AAADwAAAAAAAAACgEAAAAAAAEAAAAUAAEAEAAAAAAAAAA8AAAAAAAAAGQ=:"
)
#: Digest §11's known answers.
TASK_ID = "35848a898adb146b559385247c7e49db1cbd28af52e3c11cfb01d4fc4b490479"
VERIFY_KEY_INIT = bytes(range(32))
VERIFY_KEY = "b8e92261737fbd368b4cd5b17fdafd6d8fe587f2696df6cd07b618167c2c83d0"


def _hkdf_by_hand(salt: bytes, ikm: bytes, info: bytes, length: int) -> bytes:
    """RFC 5869 §2.2-2.3 with HMAC-SHA256, written out."""
    prk = hmac.new(salt, ikm, hashlib.sha256).digest()
    okm, block, counter = b"", b"", 1
    while len(okm) < length:
        block = hmac.new(prk, block + info + bytes([counter]), hashlib.sha256).digest()
        okm += block
        counter += 1
    return okm[:length]


def test_draft_header_known_answer() -> None:
    raw = parse_header({"DAP-Taskprov": DRAFT_HEADER})
    assert raw == TASKPROV_EXAMPLE
    assert task_id_of(raw).value.hex() == TASK_ID
    assert encode_header(raw) == DRAFT_HEADER
    key = verify_key(VERIFY_KEY_INIT, task_id_of(raw), 32)
    assert key.hex() == VERIFY_KEY
    salt = hashlib.sha256(b"dap-taskprov").digest()
    assert key == _hkdf_by_hand(salt, VERIFY_KEY_INIT, bytes.fromhex(TASK_ID), 32)
    # Any VERIFY_KEY_SIZE: a prefix of the same HKDF output.
    assert verify_key(VERIFY_KEY_INIT, task_id_of(raw), 16) == key[:16]
    with pytest.raises(ValueError, match="32 bytes"):
        verify_key(VERIFY_KEY_INIT[:31], task_id_of(raw), 32)


def test_header_names_are_case_insensitive_as_received() -> None:
    assert parse_header({"dap-taskprov": DRAFT_HEADER}) == TASKPROV_EXAMPLE


@pytest.mark.parametrize(
    "value",
    [
        DRAFT_HEADER + ";a=1",
        DRAFT_HEADER + ';a=%"back\\slash"',
        DRAFT_HEADER + ';a="x";b;c=?0;d=tok;e=:AA==:;f=1.5;g=@17;h=%"%c3%a9"',
        "  " + DRAFT_HEADER + " ",
        DRAFT_HEADER.rstrip(":").rstrip("=") + ":",  # unpadded base64: SHOULD NOT fail
    ],
)
def test_parameters_and_padding_are_ignored(value: str) -> None:
    assert parse_header({"DAP-Taskprov": value}) == TASKPROV_EXAMPLE


@pytest.mark.parametrize(
    "value",
    [
        "",
        '"' + DRAFT_HEADER.strip(":") + '"',  # a String
        "?1",  # a Boolean
        "token",  # a Token
        "42",  # an Integer
        DRAFT_HEADER.strip(":"),  # a Token again (no colons)
        ":not base64!:",
        ":" + base64.b64encode(b"not a task configuration").decode() + ":",
        DRAFT_HEADER + ";Upper=1",  # a parameter key is lowercase
        DRAFT_HEADER + " ;a=1",  # no space before a parameter
        DRAFT_HEADER + ';a=%"%C3"',  # a display string's escapes are lowercase hex
        DRAFT_HEADER + ", " + DRAFT_HEADER,  # a List, not an Item
        DRAFT_HEADER + "x",
        ":====:",
    ],
)
def test_other_values_are_ignored(value: str) -> None:
    assert parse_header({"DAP-Taskprov": value}) is None


def test_no_header() -> None:
    assert parse_header({}) is None


def _config(**changes: object) -> TaskConfiguration:
    fields = {
        name: getattr(TaskConfiguration.decode(TASKPROV_EXAMPLE), name)
        for name in TaskConfiguration.__dataclass_fields__
    }
    return TaskConfiguration(**{**fields, **changes})


def test_must_opt_out() -> None:
    """Taskprov §"Opting into a Task": an ended task, an unimplemented batch mode, VDAF or
    task extension; the example task runs [60, 160) units of 60 s."""
    config = _config()
    assert must_opt_out(config, 60 * 159) == []
    assert must_opt_out(config, 60 * 160) == ["the task has ended (task_interval)"]
    assert must_opt_out(_config(batch_mode=3), 0) == ["unknown batch mode 3"]
    assert must_opt_out(_config(vdaf_type=0xFFFF0042), 0) == ["unknown VDAF type 0xffff0042"]
    poplar = must_opt_out(_config(vdaf_type=6, vdaf_configuration=b"\x00\x10"), 0)
    assert len(poplar) == 1 and poplar[0].startswith("VDAF not implemented")
    extension = (
        TaskExtension.task_interval(Interval(60, 100)),
        TaskExtension(0x0FF0, b""),
    )
    assert must_opt_out(_config(extensions=extension), 0) == ["unsupported task extension 0x0ff0"]
    assert must_opt_out(_config(extensions=()), 10**12) == []  # no task_interval: no end


def test_task_id_is_over_the_exact_bytes() -> None:
    assert task_id_of(TASKPROV_EXAMPLE) != task_id_of(TASKPROV_EXAMPLE + b"\x00")
    assert isinstance(task_id_of(b""), TaskId)
