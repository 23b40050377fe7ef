"""The report extensions of `shared.dap.extensions`: known encodings and strict decoding."""

from __future__ import annotations

import hashlib

import pytest

from shared.codec import DecodeError
from shared.dap.extensions import (
    EXTENSION_PRIVACY_PASS_TOKEN,
    EXTENSION_RECIPE_BINDING,
    RecipeBinding,
    decode_extensions,
    encode_extensions,
    token_challenge,
    token_policy_for_issuer,
    token_window_start,
)
from shared.dap.ids import TaskId
from shared.dap.messages import Extension, PlaintextInputShare, Role
from shared.dap.task import TokenPolicy
from shared.privacypass.messages import Token

TASK = TaskId(bytes(range(32)))
POLICY = TokenPolicy(
    issuer_url="http://issuer.test", issuer_name="issuer.test", window_seconds=3600
)


def test_recipe_binding_known_encoding_and_round_trip() -> None:
    binding = RecipeBinding(b"\xab" * 32, 1000)
    assert binding.encode() == b"\xab" * 32 + (1000).to_bytes(8, "big")
    assert RecipeBinding.decode(binding.encode()) == binding
    with pytest.raises(ValueError):
        RecipeBinding(b"\x00" * 31, 1)
    with pytest.raises(DecodeError):
        RecipeBinding.decode(b"\x00" * 39)
    with pytest.raises(DecodeError):
        RecipeBinding.decode(b"\x00" * 41)


def test_token_challenge_known_value() -> None:
    challenge = token_challenge(TASK, 1_700_000_123, POLICY, Role.LEADER)
    # window start 1_699_999_200 = 0x6553EDE0, computed by hand from 1_700_000_123 - 923.
    assert token_window_start(1_700_000_123, 3600) == 1_699_999_200
    context = hashlib.sha256(
        b"sagg token context v2" + bytes(range(32)) + bytes.fromhex("000000006553ede0") + b"\x02"
    ).digest()
    assert challenge.redemption_context == context
    assert challenge.encode().hex() == (
        "0002000b" + b"issuer.test".hex() + "20" + context.hex() + "0000"
    )
    assert context.hex() == "8caacd21afb591250f3e9a6428fdfbae4f5dec5d9897c2bfae718f6d4367af19"
    helper = token_challenge(TASK, 1_700_000_123, POLICY, Role.HELPER).redemption_context
    assert helper.hex() == "4e6562cded1b686972be98c5f55f9d17ce8981a6a2f78462f4fb791c819c4e73"


def test_token_challenge_binds_task_window_and_role() -> None:
    base = token_challenge(TASK, 1_699_999_200, POLICY, Role.LEADER)
    assert token_challenge(TASK, 1_699_999_200 + 3599, POLICY, Role.LEADER) == base
    assert token_challenge(TASK, 1_699_999_200 + 3600, POLICY, Role.LEADER) != base
    assert token_challenge(TaskId(b"\x01" * 32), 1_699_999_200, POLICY, Role.LEADER) != base
    # The helper's token answers another challenge: the leader's never verifies there.
    assert token_challenge(TASK, 1_699_999_200, POLICY, Role.HELPER) != base
    for role in (Role.CLIENT, Role.COLLECTOR):
        with pytest.raises(ValueError):
            token_challenge(TASK, 1_699_999_200, POLICY, role)
    other = TokenPolicy(issuer_url="http://x", issuer_name="other", window_seconds=3600)
    assert token_challenge(TASK, 1_699_999_200, other, Role.LEADER).issuer_name == b"other"


def test_policy_from_issuer_url() -> None:
    policy = token_policy_for_issuer("http://issuer.test:8090/")
    assert policy.issuer_name == "issuer.test:8090"
    assert policy.window_seconds == 86_400
    with pytest.raises(ValueError):
        token_policy_for_issuer("nohost")


def _token() -> Token:
    return Token(b"\x01" * 32, b"\x02" * 32, b"\x03" * 32, b"\x04" * 256)


def test_extensions_round_trip_in_a_plaintext_input_share() -> None:
    binding = RecipeBinding(b"\x07" * 32, 5)
    token = _token()
    share = PlaintextInputShare(encode_extensions(binding, token), b"payload")
    decoded = PlaintextInputShare.decode(share.encode())
    assert [e.extension_type for e in decoded.extensions] == [
        EXTENSION_PRIVACY_PASS_TOKEN,
        EXTENSION_RECIPE_BINDING,
    ]
    parsed = decode_extensions(decoded.extensions)
    assert parsed.ok and parsed.binding == binding and parsed.token == token
    assert decode_extensions(()).ok and decode_extensions(()).binding is None


def test_duplicates_unknown_and_malformed_are_reported() -> None:
    binding_ext = encode_extensions(RecipeBinding(b"\x07" * 32, 5))[0]
    parsed = decode_extensions([binding_ext, binding_ext, Extension(0x1234, b"")])
    assert not parsed.ok
    assert parsed.duplicates == (EXTENSION_RECIPE_BINDING,)
    assert parsed.unknown == (0x1234,)
    assert parsed.binding is not None
    bad = decode_extensions(
        [Extension(EXTENSION_RECIPE_BINDING, b"\x00"), Extension(EXTENSION_PRIVACY_PASS_TOKEN, b"")]
    )
    assert len(bad.problems) == 2 and bad.binding is None and bad.token is None
