"""Malformed input to every VDAF entry point gives a typed outcome, never another exception.

Preparation reports malformed shares as a per-report status (DECODE_ERROR) and never accepts
them; combining malformed prep shares rejects the report; decoding an aggregate share raises
DecodeError. Inputs are truncated, extended, random, or carry field values >= p.
"""

from __future__ import annotations

import random
import secrets

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shared.codec import DecodeError
from shared.vdaf.prio3 import PrepStatus, Prio3
from tests.shared.vectors import SMALL_VDAFS, small_measurement

INSTANCES: dict[str, Prio3] = {name: make() for name, make in SMALL_VDAFS.items()}
#: One valid measurement of each (the seed only picks which).
MEASUREMENTS = {name: small_measurement(name, random.Random(7)) for name in SMALL_VDAFS}
VERIFY_KEY = bytes(16)


def _valid_report(name: str) -> tuple[bytes, bytes, list[bytes]]:
    vdaf = INSTANCES[name]
    nonce = secrets.token_bytes(16)
    public, shares = vdaf.shard(MEASUREMENTS[name], nonce, secrets.token_bytes(vdaf.RAND_SIZE))
    return nonce, public, shares


def _mutations(data: bytes) -> list[bytes]:
    return [
        b"",
        data[:-1],
        data[: len(data) // 2],
        data + b"\x00",
        secrets.token_bytes(len(data) + 3),
    ]


@pytest.mark.parametrize("name", sorted(INSTANCES))
@pytest.mark.parametrize("agg_id", [0, 1])
def test_malformed_input_shares_are_decode_errors(name: str, agg_id: int) -> None:
    vdaf = INSTANCES[name]
    nonce, public, shares = _valid_report(name)
    bad_shares = _mutations(shares[agg_id])
    bad_publics = _mutations(public) if public else [b"\x00"]
    n = len(bad_shares) + len(bad_publics) + 1
    batch = vdaf.prep_init_batch(
        VERIFY_KEY,
        agg_id,
        [nonce] * (n - 1) + [nonce[:15]],
        [public] * len(bad_shares) + bad_publics + [public],
        bad_shares + [shares[agg_id]] * (len(bad_publics) + 1),
    )
    assert list(batch.status) == [PrepStatus.DECODE_ERROR] * n
    assert batch.prep_shares == [b""] * n
    assert not batch.out_shares.any()


@pytest.mark.parametrize("name", sorted(INSTANCES))
def test_leader_share_with_value_not_below_p_is_rejected(name: str) -> None:
    vdaf = INSTANCES[name]
    nonce, public, shares = _valid_report(name)
    size = vdaf.field.ENCODED_SIZE
    for index in (0, vdaf.flp.MEAS_LEN, vdaf.flp.MEAS_LEN + vdaf.flp.PROOF_LEN - 1):
        for value in (vdaf.field.MODULUS, (1 << (8 * size)) - 1):
            pos = index * size
            share = shares[0][:pos] + value.to_bytes(size, "little") + shares[0][pos + size :]
            batch = vdaf.prep_init_batch(VERIFY_KEY, 0, [nonce], [public], [share])
            assert batch.status[0] == PrepStatus.DECODE_ERROR


@settings(max_examples=40, deadline=None)
@given(
    name=st.sampled_from(sorted(INSTANCES)),
    agg_id=st.integers(0, 1),
    public=st.binary(max_size=80),
    share=st.binary(max_size=700),
)
def test_random_bytes_never_raise_and_never_pass(
    name: str, agg_id: int, public: bytes, share: bytes
) -> None:
    vdaf = INSTANCES[name]
    batch = vdaf.prep_init_batch(VERIFY_KEY, agg_id, [bytes(16)], [public], [share])
    if batch.ok[0]:
        # A random share of the right length can decode; it must then fail verification.
        other = vdaf.prep_init_batch(VERIFY_KEY, 1 - agg_id, [bytes(16)], [public], [share])
        shares = [batch.prep_shares[0], other.prep_shares[0]]
        if not other.ok[0]:
            return
        msgs = vdaf.prep_shares_to_prep_batch([shares if agg_id == 0 else shares[::-1]])
        assert msgs == [None] or not vdaf.prep_next_batch(batch, msgs).any()


@pytest.mark.parametrize("name", sorted(INSTANCES))
def test_malformed_prep_shares_reject_the_report(name: str) -> None:
    vdaf = INSTANCES[name]
    nonce, public, shares = _valid_report(name)
    batches = [vdaf.prep_init_batch(VERIFY_KEY, a, [nonce], [public], [shares[a]]) for a in (0, 1)]
    leader_share, helper_share = batches[0].prep_shares[0], batches[1].prep_shares[0]
    size = vdaf.field.ENCODED_SIZE
    too_big = vdaf.field.MODULUS.to_bytes(size, "little") + leader_share[size:]
    cases = [
        [leader_share],
        [leader_share, helper_share, helper_share],
        [leader_share[:-1], helper_share],
        [leader_share, helper_share + b"\x00"],
        [too_big, helper_share],
    ]
    combined = vdaf.prep_shares_to_prep_batch([*cases, [leader_share, helper_share]])
    assert combined[:-1] == [None] * len(cases)
    assert combined[-1] is not None
    assert vdaf.prep_shares_to_prep_batch([[leader_share, helper_share]])[0] is not None


@pytest.mark.parametrize("name", sorted(INSTANCES))
def test_aggregate_share_decoding_is_strict(name: str) -> None:
    vdaf = INSTANCES[name]
    good = vdaf.encode_agg_share(vdaf.field.zeros(vdaf.flp.OUTPUT_LEN))
    assert vdaf.decode_agg_share(good).shape[0] == vdaf.flp.OUTPUT_LEN
    size = vdaf.field.ENCODED_SIZE
    for bad in (
        good[:-1],
        good + b"\x00",
        vdaf.field.MODULUS.to_bytes(size, "little") + good[size:],
    ):
        with pytest.raises(DecodeError):
            vdaf.decode_agg_share(bad)
    with pytest.raises(ValueError, match="aggregate shares"):
        vdaf.unshard([good], 1)


@pytest.mark.parametrize(
    ("name", "measurement"),
    [
        ("count", 2),
        ("sum", 256),
        ("sum", -1),
        ("sumvec", [16, 0, 0, 0, 0]),
        ("sumvec", [1, 2, 3]),
        ("histogram", 7),
        ("multihot", [1, 1, 1, 1, 0, 0]),
        ("multihot", [2, 0, 0, 0, 0, 0]),
        ("multiproof", [1, 1, 1, 16, 0]),
    ],
)
def test_out_of_range_measurements_are_refused_by_the_client(
    name: str, measurement: object
) -> None:
    vdaf = INSTANCES[name]
    with pytest.raises(ValueError):
        vdaf.shard(measurement, bytes(16), bytes(vdaf.RAND_SIZE))
