"""The one-round ping-pong exchange DAP-09 carries in PrepareInit/PrepareResp (VDAF-08 §5.8)."""

from __future__ import annotations

import pytest

from shared.codec import DecodeError
from shared.dap.messages import MessageType, PingPongMessage
from shared.vdaf import ping_pong
from shared.vdaf.prio3 import PrepStatus, Prio3, prio3_count, prio3_sum
from tests.shared.vectors import load_vector


def _prep_inputs(name: str) -> tuple[bytes, list[bytes], list[bytes], list[list[bytes]]]:
    vec = load_vector(name)
    preps = vec["prep"]
    return (
        bytes.fromhex(vec["verify_key"]),
        [bytes.fromhex(p["nonce"]) for p in preps],
        [bytes.fromhex(p["public_share"]) for p in preps],
        [[bytes.fromhex(p["input_shares"][a]) for p in preps] for a in range(2)],
    )


@pytest.mark.parametrize(
    ("name", "vdaf", "leader_prefix", "helper_payload"),
    [
        # Payloads of the DAP-09 digest §6.3, built from the VDAF-08 vectors.
        ("Prio3Count_0", prio3_count(), "0000000020f6340e60", "0200000000"),
        (
            "Prio3Sum_0",
            prio3_sum(8),
            "00000000405e6f3152",
            "0200000010aac7d7306c0cdbbd7e23ef394322d54a",
        ),
    ],
)
def test_one_round_trip_payloads(
    name: str, vdaf: Prio3, leader_prefix: str, helper_payload: str
) -> None:
    verify_key, nonces, publics, shares = _prep_inputs(name)
    leader, to_helper = ping_pong.leader_init(vdaf, verify_key, nonces, publics, shares[0])
    assert to_helper[0] is not None and to_helper[0].hex().startswith(leader_prefix)
    helper, to_leader = ping_pong.helper_init(
        vdaf, verify_key, nonces, publics, shares[1], [m or b"" for m in to_helper]
    )
    assert [m.hex() if m else None for m in to_leader] == [helper_payload]
    assert helper.ok.all()
    assert ping_pong.leader_continued(vdaf, leader, to_leader).all()


@pytest.mark.parametrize(
    ("inbound", "status"),
    [
        (b"", PrepStatus.DECODE_ERROR),
        (b"\x07\x00\x00\x00\x00", PrepStatus.DECODE_ERROR),
        (b"\x00\x00\x00\x00\x05abc", PrepStatus.DECODE_ERROR),
        (PingPongMessage.finish(b"").encode(), PrepStatus.PREP_ERROR),
        (PingPongMessage.continued(b"", b"").encode(), PrepStatus.PREP_ERROR),
        (PingPongMessage.initialize(b"\x01" * 32).encode(), PrepStatus.PREP_ERROR),
    ],
)
def test_helper_rejects_a_bad_leader_message(inbound: bytes, status: PrepStatus) -> None:
    vdaf = prio3_count()
    verify_key, nonces, publics, shares = _prep_inputs("Prio3Count_0")
    helper, to_leader = ping_pong.helper_init(
        vdaf, verify_key, nonces, publics, shares[1], [inbound]
    )
    assert to_leader == [None]
    assert helper.status[0] == status
    assert not helper.out_shares.any()


@pytest.mark.parametrize(
    "inbound",
    [None, b"", PingPongMessage.initialize(b"").encode(), PingPongMessage.finish(b"x").encode()],
)
def test_leader_rejects_a_bad_helper_message(inbound: bytes | None) -> None:
    vdaf = prio3_sum(8)
    verify_key, nonces, publics, shares = _prep_inputs("Prio3Sum_0")
    leader, _ = ping_pong.leader_init(vdaf, verify_key, nonces, publics, shares[0])
    assert not ping_pong.leader_continued(vdaf, leader, [inbound]).any()
    assert leader.status[0] == PrepStatus.PREP_ERROR
    assert not leader.out_shares.any()


@pytest.mark.parametrize("kind", [MessageType.INITIALIZE, MessageType.FINISH])
@pytest.mark.parametrize("field", [b"", b"\x02", bytes(range(200))])
def test_one_field_framing_is_the_message_encoding(kind: MessageType, field: bytes) -> None:
    """`encode_one` writes what the dataclass encodes; `one_field` reads it back and answers
    as `decode` does for everything else: None for another type, DecodeError for no message."""
    message = (
        PingPongMessage.initialize(field)
        if kind == MessageType.INITIALIZE
        else PingPongMessage.finish(field)
    )
    encoded = PingPongMessage.encode_one(kind, field)
    assert encoded == message.encode()
    assert PingPongMessage.one_field(encoded, kind) == field
    other = MessageType.FINISH if kind == MessageType.INITIALIZE else MessageType.INITIALIZE
    assert PingPongMessage.one_field(encoded, other) is None
    continued = PingPongMessage.continued(field, field).encode()
    assert PingPongMessage.one_field(continued, kind) is None
    for broken in (
        encoded[:-1] if field else encoded[:4],
        encoded + b"\x00",
        b"\x07" + encoded[1:],
    ):
        with pytest.raises(DecodeError):
            PingPongMessage.one_field(broken, kind)
    with pytest.raises(ValueError, match="not one field"):
        PingPongMessage.encode_one(MessageType.CONTINUE, field)
