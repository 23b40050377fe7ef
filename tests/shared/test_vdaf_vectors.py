"""Every VDAF-08 Prio3 and XOF test vector, reproduced byte for byte.

The vectors are cfrg/draft-irtf-cfrg-vdaf@draft-irtf-cfrg-vdaf-08:poc/test_vec/08, read from the
workplace's shared/test-vectors/vdaf-08 (never copied here). `_1` files use three shares.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from shared.vdaf.field import Field64, Field128
from shared.vdaf.prio3 import PrepStatus
from shared.vdaf.xof import XofTurboShake128
from tests.shared.vectors import load_vector, prio3_of_vector, vector_names

PRIO3_VECTORS = vector_names("Prio3")


def test_every_prio3_vector_file_is_covered() -> None:
    assert len(PRIO3_VECTORS) == 11, PRIO3_VECTORS


@pytest.mark.parametrize("name", PRIO3_VECTORS)
def test_prio3_vector(name: str) -> None:
    vec = load_vector(name)
    vdaf = prio3_of_vector(name, vec)
    verify_key = bytes.fromhex(vec["verify_key"])
    preps = vec["prep"]

    # Client: sharding each measurement with the vector's randomness.
    for prep in preps:
        public_share, input_shares = vdaf.shard(
            prep["measurement"], bytes.fromhex(prep["nonce"]), bytes.fromhex(prep["rand"])
        )
        assert public_share.hex() == prep["public_share"]
        assert [s.hex() for s in input_shares] == prep["input_shares"]

    # Aggregators: all of the vector's reports prepared as one batch per aggregator.
    nonces = [bytes.fromhex(p["nonce"]) for p in preps]
    public_shares = [bytes.fromhex(p["public_share"]) for p in preps]
    batches = [
        vdaf.prep_init_batch(
            verify_key,
            agg_id,
            nonces,
            public_shares,
            [bytes.fromhex(p["input_shares"][agg_id]) for p in preps],
        )
        for agg_id in range(vdaf.SHARES)
    ]
    for agg_id, batch in enumerate(batches):
        assert batch.ok.all()
        assert [s.hex() for s in batch.prep_shares] == [p["prep_shares"][0][agg_id] for p in preps]

    prep_msgs = vdaf.prep_shares_to_prep_batch(
        [[batch.prep_shares[r] for batch in batches] for r in range(len(preps))]
    )
    assert [m.hex() if m is not None else None for m in prep_msgs] == [
        p["prep_messages"][0] for p in preps
    ]

    agg_shares = []
    for agg_id, batch in enumerate(batches):
        finished = vdaf.prep_next_batch(batch, prep_msgs)
        assert finished.all()
        for r, prep in enumerate(preps):
            assert vdaf.field.encode(batch.out_shares[r]).hex() == "".join(
                prep["out_shares"][agg_id]
            )
        agg_share = vdaf.encode_agg_share(vdaf.aggregate(batch.out_shares))
        assert agg_share.hex() == vec["agg_shares"][agg_id]
        agg_shares.append(agg_share)

    assert vdaf.unshard(agg_shares, len(preps)) == vec["agg_result"]


def test_xof_turboshake128_vector() -> None:
    vec = load_vector("XofTurboShake128")
    seed, dst, binder = (bytes.fromhex(vec[k]) for k in ("seed", "dst", "binder"))
    assert XofTurboShake128.derive_seed(seed, dst, binder).hex() == vec["derived_seed"]
    values = XofTurboShake128.expand_into_vec(Field128, seed, dst, binder, vec["length"])
    assert Field128.encode(values).hex() == vec["expanded_vec_field128"]


def test_xof_rejection_sampling_continues_the_stream(monkeypatch: pytest.MonkeyPatch) -> None:
    """A rejected element is replaced by the next one in the stream, as in VDAF-08 §6.2."""
    seed, dst, binder = bytes(16), b"dst", b"binder"
    stream = XofTurboShake128(seed, dst, binder).next(8 * 12)
    words = np.frombuffer(stream, dtype="<u8")
    real = Field64.candidates
    rejected = {int(words[1]), int(words[4])}

    def candidates(data: bytes) -> Any:
        values, ok = real(data)
        return values, ok & ~np.isin(values[:, 0], list(rejected))

    monkeypatch.setattr(Field64, "candidates", candidates)
    got = XofTurboShake128.expand_into_vec(Field64, seed, dst, binder, 8)
    expected = [int(w) for w in words if int(w) not in rejected][:8]
    assert Field64.to_ints(got) == expected


def test_prep_statuses_are_distinct() -> None:
    assert len({s.value for s in PrepStatus}) == len(PrepStatus)
