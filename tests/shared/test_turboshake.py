"""The batched TurboSHAKE128 kernel and the XOF's batch API, against pycryptodome's TurboSHAKE128
(an independent implementation), RFC 9861's published output, and the one-stream XOF."""

from __future__ import annotations

import secrets
from typing import Any

import numpy as np
import pytest
from Crypto.Hash import TurboSHAKE128

from shared.vdaf.field import Field, Field64, Field128
from shared.vdaf.turboshake import RATE, turboshake128
from shared.vdaf.xof import XofTurboShake128, XofTurboShake128V20


def _oracle(message: bytes, domain: int, out_len: int) -> bytes:
    h = TurboSHAKE128.new(domain=domain)
    h.update(message)
    return bytes(h.read(out_len))


def test_rfc9861_empty_message() -> None:
    """RFC 9861 §5: TurboSHAKE128(M = empty, D = 0x1F, 32)."""
    out = turboshake128(np.zeros((1, 0), np.uint8), 0x1F, 32)
    assert out[0].tobytes().hex() == (
        "1e415f1c5983aff2169217277d17bb538cd945a397ddec541f1ce41af2c1b74c"
    )


# Around the rate: a message that fills a block exactly gets a padding block of its own, and an
# output of more than one block needs a permutation between blocks.
LENGTHS = (0, 1, RATE - 2, RATE - 1, RATE, RATE + 1, 2 * RATE, 2 * RATE + 1, 1000)
OUT_LENGTHS = (0, 1, 32, RATE - 1, RATE, RATE + 1, 3 * RATE + 5)


@pytest.mark.parametrize("length", LENGTHS)
def test_kernel_matches_pycryptodome(length: int) -> None:
    rng = np.random.default_rng(length)
    messages = rng.integers(0, 256, (4, length), dtype=np.uint8)
    for out_len in OUT_LENGTHS:
        got = turboshake128(messages, 0x01, out_len)
        assert got.shape == (4, out_len)
        for row, message in zip(got, messages, strict=True):
            assert row.tobytes() == _oracle(message.tobytes(), 0x01, out_len)


@pytest.mark.parametrize("domain", [0x01, 0x06, 0x0B, 0x1F, 0x7F])
def test_kernel_domain_bytes(domain: int) -> None:
    messages = np.frombuffer(secrets.token_bytes(3 * 50), np.uint8).reshape(3, 50)
    got = turboshake128(messages, domain, 64)
    assert [row.tobytes() for row in got] == [_oracle(m.tobytes(), domain, 64) for m in messages]


def test_kernel_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError, match="2-D"):
        turboshake128(np.zeros(5, np.uint8), 1, 8)
    for domain in (0x00, 0x80, 0xFF):
        with pytest.raises(ValueError, match="domain"):
            turboshake128(np.zeros((1, 5), np.uint8), domain, 8)
    with pytest.raises(ValueError, match="negative"):
        turboshake128(np.zeros((1, 5), np.uint8), 1, -1)


XOFS = [XofTurboShake128, XofTurboShake128V20]


@pytest.mark.parametrize("xof", XOFS, ids=lambda x: x.__name__)
@pytest.mark.parametrize("field", [Field64, Field128], ids=lambda f: f.__name__)
def test_batch_streams_equal_one_stream_each(
    xof: type[XofTurboShake128], field: type[Field]
) -> None:
    seeds = [secrets.token_bytes(xof.SEED_SIZE) for _ in range(9)]
    binders = [secrets.token_bytes(40) for _ in range(9)]
    dst = b"some dst"
    derived = xof.derive_seeds(seeds, dst, binders)
    assert [row.tobytes() for row in derived] == [
        xof.derive_seed(s, dst, b) for s, b in zip(seeds, binders, strict=True)
    ]
    # The batch API takes matrices as well as sequences of byte strings.
    as_rows = np.frombuffer(b"".join(binders), np.uint8).reshape(9, 40)
    vecs = xof.expand_into_vecs(field, seeds, dst, as_rows, 70)
    assert vecs.shape == (9, 70, field.LIMBS)
    for row, seed, binder in zip(vecs, seeds, binders, strict=True):
        assert field.encode(row) == field.encode(xof.expand_into_vec(field, seed, dst, binder, 70))


@pytest.mark.parametrize("xof", XOFS, ids=lambda x: x.__name__)
def test_batch_of_none(xof: type[XofTurboShake128]) -> None:
    assert xof.derive_seeds([], b"dst", []).shape == (0, xof.SEED_SIZE)
    assert xof.expand_into_vecs(Field128, [], b"dst", [], 4).shape == (0, 4, 2)


@pytest.mark.parametrize("xof", XOFS, ids=lambda x: x.__name__)
def test_batch_refuses_malformed_inputs(xof: type[XofTurboShake128]) -> None:
    seed = bytes(xof.SEED_SIZE)
    with pytest.raises(ValueError, match="one length"):
        xof.derive_seeds([seed, seed], b"dst", [b"ab", b"abc"])
    with pytest.raises(ValueError, match="seed must be"):
        xof.derive_seeds([seed + b"x"], b"dst", [b""])
    with pytest.raises(ValueError, match="one binder per seed"):
        xof.derive_seeds([seed, seed], b"dst", [b""])


def test_batch_rejection_sampling_continues_each_stream(monkeypatch: pytest.MonkeyPatch) -> None:
    """A rejected element in one stream of a batch is replaced by the next one of that stream
    (VDAF-08 §6.2), and the other streams are untouched."""
    seeds = [bytes([i]) * 16 for i in range(3)]
    binders = [b"binder"] * 3
    streams = [XofTurboShake128(s, b"dst", b"binder").next(8 * 12) for s in seeds]
    words = [np.frombuffer(s, dtype="<u8") for s in streams]
    rejected = {int(words[1][2]), int(words[1][5])}
    real = Field64.candidates

    def candidates(data: Any) -> Any:
        values, ok = real(data)
        return values, ok & ~np.isin(values[:, 0], list(rejected))

    monkeypatch.setattr(Field64, "candidates", candidates)
    # As Prio3 passes them too: matrices, the binder one row broadcast to every stream.
    seed_rows = np.frombuffer(b"".join(seeds), np.uint8).reshape(3, 16)
    binder_rows = np.broadcast_to(np.frombuffer(b"binder", np.uint8), (3, 6))
    for got in (
        XofTurboShake128.expand_into_vecs(Field64, seeds, b"dst", binders, 8),
        XofTurboShake128.expand_into_vecs(Field64, seed_rows, b"dst", binder_rows, 8),
    ):
        for r in range(3):
            expected = [int(w) for w in words[r] if int(w) not in rejected][:8]
            assert Field64.to_ints(got[r]) == expected
