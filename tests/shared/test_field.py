"""Field64 / Field128 kernels against plain Python integer arithmetic mod p (VDAF-08 §6.1).

Every result is compared with a reference computed on Python ints, elementwise through numpy
object arrays so that broadcasting is checked too. Edge values (0, 1, p - 1, limb boundaries)
are mixed into every strategy because they drive the carry and reduction branches.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shared.codec import DecodeError
from shared.vdaf.field import Field, Field64, Field128

FIELDS = [Field64, Field128]
SETTINGS = settings(deadline=None, max_examples=40)


def edges(F: type[Field]) -> list[int]:
    p = F.MODULUS
    vals = {0, 1, 2, 3, p - 1, p - 2, p - 3, (p - 1) // 2, (p + 1) // 2, 2**32 - 1, 2**32}
    vals |= {2**32 + 1, 2**63, 2**64 - 2**32, p - 2**32, p - 2**32 - 1}
    # (u*2^k - 1)(u*2^k + 1) = u^2*2^(2k) - 1: products whose low words are all ones, so that
    # adding anything carries through every word.
    half = 32 * F.LIMBS
    for u in (1, 2 ** (half // 2 - 1), 2 ** (half // 2) - 2):
        vals |= {(u << half) - 1, (u << half) + 1}
    if F.LIMBS == 2:
        top = p >> 64
        vals |= {2**64 - 1, 2**64, 2**64 + 1, 2**127, 2**127 - 1, p - 2**64, p - 2**64 - 1}
        vals |= {(top << 64) - 1, ((top - 1) << 64) | (2**64 - 1), 2**128 - 2**70}
    return sorted(v for v in vals if 0 <= v < p)


def elements(F: type[Field]) -> st.SearchStrategy[int]:
    return st.one_of(st.sampled_from(edges(F)), st.integers(0, F.MODULUS - 1))


def vectors(F: type[Field], min_size: int = 0, max_size: int = 24) -> st.SearchStrategy[list[int]]:
    return st.lists(elements(F), min_size=min_size, max_size=max_size)


def obj(F: type[Field], a: np.ndarray) -> np.ndarray:
    """Python-int object array with `a`'s element shape."""
    return np.array(F.to_ints(a), dtype=object).reshape(a.shape[:-1])


def arr(F: type[Field], values: Any) -> np.ndarray:
    """Field array from a (nested) list or object array of ints, keeping its shape."""
    o = np.array(values, dtype=object)
    return F.from_ints(o.ravel().tolist()).reshape((*o.shape, F.LIMBS))


def same(F: type[Field], got: np.ndarray, want: Any) -> None:
    want = np.array(want, dtype=object)
    assert got.dtype == np.uint64
    assert got.shape == (*want.shape, F.LIMBS)
    assert got.flags.c_contiguous
    assert F.to_ints(got) == [int(v) % F.MODULUS for v in want.ravel()]


fields = pytest.mark.parametrize("F", FIELDS, ids=lambda F: F.__name__)


# --- parameters -----------------------------------------------------------------------------


@fields
def test_parameters(F: type[Field]) -> None:
    p = F.MODULUS
    if F is Field64:
        assert p == 2**32 * 4294967295 + 1 == 2**64 - 2**32 + 1
        assert (F.ENCODED_SIZE, F.LIMBS, F.GEN_ORDER) == (8, 1, 2**32)
        assert pow(7, 4294967295, p) == F.GENERATOR
    else:
        assert p == 2**66 * 4611686018427387897 + 1 == 2**128 - 7 * 2**66 + 1
        assert (F.ENCODED_SIZE, F.LIMBS, F.GEN_ORDER) == (16, 2, 2**66)
        assert pow(7, 4611686018427387897, p) == F.GENERATOR
    assert (p - 1) % F.GEN_ORDER == 0
    g = F.from_int(F.GENERATOR)
    # Exact order GEN_ORDER: a power of two, so it suffices that g^(order/2) != 1.
    assert pow(F.GENERATOR, F.GEN_ORDER // 2, p) == p - 1
    assert pow(F.GENERATOR, F.GEN_ORDER, p) == 1
    assert F.to_ints(F.pow(g, F.GEN_ORDER // 2)) == [p - 1]
    assert F.to_ints(F.pow(g, F.GEN_ORDER)) == [1]


@fields
def test_root(F: type[Field]) -> None:
    p = F.MODULUS
    assert F.root(1) == 1
    for n in (2, 4, 64, 2**20, F.GEN_ORDER):
        w = F.root(n)
        assert pow(w, n, p) == 1
        assert pow(w, n // 2, p) == p - 1
    assert F.root(F.GEN_ORDER) == F.GENERATOR
    for bad in (0, 3, 6, 2 * F.GEN_ORDER):
        with pytest.raises(ValueError):
            F.root(bad)


# --- construction, conversion, encoding --------------------------------------------------------


@fields
def test_construction(F: type[Field]) -> None:
    p, L = F.MODULUS, F.LIMBS
    assert F.zeros(3).shape == (3, L)
    assert F.zeros((2, 0, 4)).shape == (2, 0, 4, L)
    assert F.to_ints(F.ones((2, 3))) == [1] * 6
    assert F.from_int(-1).shape == (L,)
    assert F.to_ints(F.from_int(-1)) == [p - 1]
    assert F.to_ints(F.from_int(p + 5)) == [5]
    mixed: list[Any] = [p, -2, 2**200, np.int64(7), np.uint64(2**64 - 1)]
    assert F.to_ints(F.from_ints(mixed)) == [0, p - 2, 2**200 % p, 7, (2**64 - 1) % p]
    assert F.from_ints([]).shape == (0, L)
    assert F.to_ints(F.zeros(0)) == []
    with pytest.raises(TypeError):
        F.from_ints([1.5])  # type: ignore[list-item]


@fields
def test_random(F: type[Field]) -> None:
    rng = np.random.default_rng(5)
    a = F.random((50, 40), rng)
    assert a.shape == (50, 40, F.LIMBS)
    vals = F.to_ints(a)
    assert all(0 <= v < F.MODULUS for v in vals)
    assert len(set(vals)) == len(vals)
    # The top limb covers its whole range, up to p's own top limb.
    top = np.asarray(a[..., -1])
    assert int(top.max()) > (F.MODULUS >> (64 * (F.LIMBS - 1))) * 0.9


@fields
@SETTINGS
@given(data=st.data())
def test_encode_decode_round_trip(F: type[Field], data: st.DataObject) -> None:
    values = data.draw(vectors(F))
    a = F.from_ints(values)
    enc = F.encode(a)
    assert enc == b"".join(v.to_bytes(F.ENCODED_SIZE, "little") for v in values)
    dec = F.decode(enc, len(values))
    assert dec.shape == (len(values), F.LIMBS)
    assert F.to_ints(dec) == values
    assert F.to_ints(F.decode(bytearray(enc))) == values
    assert np.array_equal(np.frombuffer(enc, "<u8").reshape(-1, F.LIMBS), a)


@fields
def test_encode_layout(F: type[Field]) -> None:
    assert F.encode(F.from_int(1)) == b"\x01" + bytes(F.ENCODED_SIZE - 1)
    a = F.from_ints([[1, 2], [3, 4]][i][j] for i in range(2) for j in range(2)).reshape(2, 2, -1)
    assert F.encode(a) == F.encode(F.from_ints([1, 2, 3, 4]))
    # Row-major over a non-contiguous view.
    assert F.encode(a.transpose(1, 0, 2)) == F.encode(F.from_ints([1, 3, 2, 4]))
    if F is Field128:
        assert F.encode(F.from_int(2**64)) == bytes(8) + b"\x01" + bytes(7)


@fields
@pytest.mark.parametrize("where", [0, 3, 6])
def test_decode_rejects_values_not_below_p(F: type[Field], where: int) -> None:
    p, size = F.MODULUS, F.ENCODED_SIZE
    bad_values = [p, p + 1, 2 ** (8 * size) - 1, p + 2**64 if F is Field128 else p + 2**31]
    for bad in bad_values:
        parts = [v.to_bytes(size, "little") for v in range(7)]
        parts[where] = bad.to_bytes(size, "little")
        with pytest.raises(DecodeError, match=rf"element {where}\b.*modulus"):
            F.decode(b"".join(parts))
    # p - 1 is the largest valid value.
    assert F.to_ints(F.decode((p - 1).to_bytes(size, "little"))) == [p - 1]


@fields
def test_decode_rejects_bad_lengths(F: type[Field]) -> None:
    size = F.ENCODED_SIZE
    good = F.encode(F.from_ints([1, 2, 3]))
    with pytest.raises(DecodeError, match="multiple"):
        F.decode(good[:-1])
    with pytest.raises(DecodeError, match="multiple"):
        F.decode(good + b"\x00")
    with pytest.raises(DecodeError, match="expected 4 elements"):
        F.decode(good, 4)
    with pytest.raises(DecodeError, match="expected 2 elements"):
        F.decode(good, 2)
    with pytest.raises(DecodeError):
        F.decode(good[: size - 1], 1)
    assert F.decode(b"", 0).shape == (0, F.LIMBS)
    assert issubclass(DecodeError, ValueError)


@fields
def test_candidates(F: type[Field]) -> None:
    p, size = F.MODULUS, F.ENCODED_SIZE
    values = [0, p - 1, p, 5, 2 ** (8 * size) - 1, p + 1, 1]
    data = b"".join(v.to_bytes(size, "little") for v in values)
    words, ok = F.candidates(data)
    # Both moduli have p's bit length equal to 8 * ENCODED_SIZE, so the mask keeps every bit.
    assert F.to_ints(words) == values
    assert ok.tolist() == [v < p for v in values]
    assert F.candidates(b"")[0].shape == (0, F.LIMBS)
    with pytest.raises(ValueError):
        F.candidates(data[:-1])


@fields
def test_validation(F: type[Field]) -> None:
    a = F.ones(3)
    wrong_limbs = np.zeros((3, F.LIMBS + 1), np.uint64)
    for call in (
        lambda: F.add(a, wrong_limbs),
        lambda: F.mul(wrong_limbs, a),
        lambda: F.sum(wrong_limbs),
        lambda: F.ntt(wrong_limbs),
        lambda: F.to_ints(wrong_limbs),
        lambda: F.add(a, np.zeros((), np.uint64)),
        lambda: F.add(a, F.ones(4)),
        lambda: F.sum(F.from_int(1)),
        lambda: F.ntt(F.ones(3)),
        lambda: F.inner(F.ones(3), F.ones(4)),
        lambda: F.poly_mul(F.ones(0), F.ones(2)),
    ):
        with pytest.raises(ValueError):
            call()
    with pytest.raises(TypeError):
        F.add(a, np.ones((3, F.LIMBS), np.int64))


# --- element-wise arithmetic ---------------------------------------------------------------------


@fields
@SETTINGS
@given(data=st.data())
def test_elementwise_sum_inner(F: type[Field], data: st.DataObject) -> None:
    p = F.MODULUS
    pairs = data.draw(st.lists(st.tuples(elements(F), elements(F)), max_size=30))
    x, y = [u for u, _ in pairs], [v for _, v in pairs]
    a, b = F.from_ints(x), F.from_ints(y)
    same(F, F.add(a, b), [(u + v) % p for u, v in pairs])
    same(F, F.sub(a, b), [(u - v) % p for u, v in pairs])
    same(F, F.mul(a, b), [u * v % p for u, v in pairs])
    same(F, F.neg(a), [-u % p for u in x])
    same(F, F.sum(a), sum(x) % p)
    same(F, F.inner(a, b), sum(u * v for u, v in pairs) % p)
    # Inputs are not modified.
    assert F.to_ints(a) == x
    assert F.to_ints(b) == y


@fields
def test_all_edge_pairs(F: type[Field]) -> None:
    """Every pair of edge values, as an outer product through (m, 1) x (1, m) broadcasting."""
    e = np.array(edges(F), dtype=object)
    a, b = arr(F, e[:, None]), arr(F, e[None, :])
    p = F.MODULUS
    same(F, F.add(a, b), (e[:, None] + e[None, :]) % p)
    same(F, F.sub(a, b), (e[:, None] - e[None, :]) % p)
    same(F, F.mul(a, b), (e[:, None] * e[None, :]) % p)
    same(F, F.neg(a), (-e[:, None]) % p)


@fields
@pytest.mark.parametrize(
    ("sa", "sb"),
    [
        ((3, 4), (4,)),
        ((4,), (3, 4)),
        ((3, 1), (1, 4)),
        ((3, 4), (3, 1)),
        ((2, 3, 4), (3, 1)),
        ((2, 1, 4), (3, 1)),
        ((2, 3, 4), ()),
        ((), (5,)),
        ((), ()),
        ((0, 3), (3,)),
        ((2, 3, 4), (2, 3, 4)),
    ],
)
def test_broadcasting(F: type[Field], sa: tuple[int, ...], sb: tuple[int, ...]) -> None:
    rng = np.random.default_rng(1)
    a, b = F.random(sa, rng), F.random(sb, rng)
    oa, ob = obj(F, a), obj(F, b)
    p = F.MODULUS
    same(F, F.add(a, b), (oa + ob) % p)
    same(F, F.sub(a, b), (oa - ob) % p)
    same(F, F.mul(a, b), (oa * ob) % p)


@fields
def test_views(F: type[Field]) -> None:
    """Transposed, strided, broadcast and read-only inputs."""
    rng = np.random.default_rng(2)
    p = F.MODULUS
    a = F.random((6, 5), rng)
    b = F.random((5, 6), rng)
    t = b.transpose(1, 0, 2)
    same(F, F.mul(a, t), (obj(F, a) * obj(F, b).T) % p)
    same(F, F.add(a[::2, 1:4], a[1::2, :3]), (obj(F, a)[::2, 1:4] + obj(F, a)[1::2, :3]) % p)
    row = F.random(5, rng)
    wide = np.broadcast_to(row, (6, 5, F.LIMBS))
    same(F, F.sub(a, wide), (obj(F, a) - obj(F, row)[None, :]) % p)
    ro = np.frombuffer(F.encode(a), "<u8").reshape(6, 5, F.LIMBS)
    assert not ro.flags.writeable
    same(F, F.mul(ro, ro), (obj(F, a) ** 2) % p)
    same(F, F.inv(ro), [[pow(int(v), -1, p) if v else 0 for v in r] for r in obj(F, a)])


@fields
@SETTINGS
@given(data=st.data())
def test_pow(F: type[Field], data: st.DataObject) -> None:
    p = F.MODULUS
    x = data.draw(vectors(F, max_size=8))
    e = data.draw(
        st.one_of(
            st.sampled_from([0, 1, 2, 3, p - 2, p - 1, p, p + 1, 2 * p - 1, -1, -2, -(p - 1)]),
            st.integers(-(2**200), 2**200),
        )
    )

    def ref(v: int) -> int:
        if e < 0:
            return pow(pow(v, -1, p), -e, p) if v else 0
        return pow(v, e, p)

    same(F, F.pow(F.from_ints(x), e), [ref(v) for v in x])


@fields
def test_pow_multiples_of_group_order(F: type[Field]) -> None:
    """Exponents reduced modulo p - 1 must keep 0^e = 0 for e > 0."""
    p = F.MODULUS
    a = F.from_ints([0, 1, 2, p - 1])
    for e in (p - 1, 2 * (p - 1), 5 * (p - 1), 2**300 * (p - 1)):
        same(F, F.pow(a, e), [0, 1, 1, 1])
    same(F, F.pow(a, 0), [1, 1, 1, 1])
    same(F, F.pow(a, 2 * (p - 1) + 3), [0, 1, 8, p - 1])


@fields
@SETTINGS
@given(data=st.data())
def test_inv(F: type[Field], data: st.DataObject) -> None:
    p = F.MODULUS
    x = data.draw(vectors(F, max_size=40))
    got = F.inv(F.from_ints(x))
    same(F, got, [pow(v, -1, p) if v else 0 for v in x])
    same(F, F.mul(got, F.from_ints(x)), [1 if v else 0 for v in x])


@fields
def test_inv_shapes(F: type[Field]) -> None:
    assert F.to_ints(F.inv(F.from_int(0))) == [0]
    assert F.inv(F.zeros((2, 0))).shape == (2, 0, F.LIMBS)
    a = F.random((3, 4), np.random.default_rng(3))
    a[1, 2] = 0
    same(
        F, F.mul(F.inv(a), a), [[0 if (i, j) == (1, 2) else 1 for j in range(4)] for i in range(3)]
    )


# --- reductions ---------------------------------------------------------------------------------


@fields
@pytest.mark.parametrize("shape", [(7,), (3, 5), (2, 3, 4), (4, 0, 2), (1,)])
def test_sum_axes(F: type[Field], shape: tuple[int, ...]) -> None:
    a = F.random(shape, np.random.default_rng(4))
    o = obj(F, a)
    for axis in range(-len(shape), len(shape)):
        same(F, F.sum(a, axis=axis), o.sum(axis=axis) % F.MODULUS)
    same(F, F.sum(a), o.sum(axis=-1) % F.MODULUS)
    with pytest.raises(ValueError):
        F.sum(a, axis=len(shape))


@fields
@pytest.mark.parametrize("n", [1, 2, 3, 17, 1000])
def test_accumulator_overflow(F: type[Field], n: int) -> None:
    """Sums of maximal terms overflow the lazy accumulators' low words."""
    p = F.MODULUS
    for v in (p - 1, p - 2, (p - 1) // 2 + 1):
        a = F.from_ints([v] * n)
        same(F, F.sum(a), n * v % p)
        same(F, F.inner(a, a), n * v * v % p)
        same(F, F.poly_mul(a, a), [min(k + 1, 2 * n - 1 - k) * v * v % p for k in range(2 * n - 1)])
    big = F.from_ints([p - 1] * n)
    same(F, F.sum(big.reshape(n, 1, F.LIMBS), axis=0), [(p - 1) * n % p])


@fields
def test_inner_broadcasting(F: type[Field]) -> None:
    rng = np.random.default_rng(6)
    p = F.MODULUS
    m = F.random((4, 3, 6), rng)
    v = F.random(6, rng)
    om, ov = obj(F, m), obj(F, v)
    same(F, F.inner(m, v), (om * ov).sum(axis=-1) % p)
    same(F, F.inner(v, m), (om * ov).sum(axis=-1) % p)
    w = F.random((3, 1), rng)
    same(F, F.inner(m, w), (om * obj(F, w)).sum(axis=-1) % p)
    c = F.random((4, 1, 6), rng)
    same(F, F.inner(m, c), (om * obj(F, c)).sum(axis=-1) % p)
    same(F, F.inner(F.zeros(0), F.zeros(0)), 0)


@fields
def test_equal_is_zero(F: type[Field]) -> None:
    a = F.from_ints([0, 1, 2, F.MODULUS - 1])
    b = F.from_ints([0, 1, 3, 0])
    assert F.equal(a, b).tolist() == [True, True, False, False]
    assert F.equal(a, F.from_int(1)).tolist() == [False, True, False, False]
    assert F.is_zero(a).tolist() == [True, False, False, False]
    assert F.is_zero(F.from_int(0)).shape == ()
    assert bool(F.is_zero(F.from_int(0)))
    if F is Field128:
        # Differs in the high limb only.
        assert not F.equal(F.from_int(2**64 + 1), F.from_int(1))
        assert not F.is_zero(F.from_int(2**64))


@fields
@SETTINGS
@given(data=st.data())
def test_powers(F: type[Field], data: st.DataObject) -> None:
    p = F.MODULUS
    x = data.draw(vectors(F, max_size=5))
    n = data.draw(st.integers(0, 12))
    want = np.array([pow(v, k, p) for v in x for k in range(n)], dtype=object)
    same(F, F.powers(F.from_ints(x), n), want.reshape(len(x), n))
    same(
        F,
        F.powers(F.from_int(x[0] if x else 3), n),
        [pow(x[0] if x else 3, k, p) for k in range(n)],
    )


# --- polynomials ----------------------------------------------------------------------------------


def ref_eval(coeffs: list[int], x: int, p: int) -> int:
    return sum(c * pow(x, k, p) for k, c in enumerate(coeffs)) % p


def ref_mul(a: list[int], b: list[int], p: int) -> list[int]:
    out = [0] * (len(a) + len(b) - 1)
    for i, u in enumerate(a):
        for j, v in enumerate(b):
            out[i + j] += u * v
    return [v % p for v in out]


@fields
@SETTINGS
@given(data=st.data())
def test_poly_eval(F: type[Field], data: st.DataObject) -> None:
    p = F.MODULUS
    polys = data.draw(st.lists(vectors(F, max_size=10), min_size=1, max_size=4))
    d = max(len(c) for c in polys)
    polys = [c + [0] * (d - len(c)) for c in polys]
    xs = data.draw(st.lists(elements(F), min_size=len(polys), max_size=len(polys)))
    c = arr(F, polys).reshape(len(polys), d, F.LIMBS)
    same(
        F,
        F.poly_eval(c, F.from_ints(xs)),
        [ref_eval(cs, x, p) for cs, x in zip(polys, xs, strict=True)],
    )
    # One polynomial at many points, and many polynomials at one point.
    same(F, F.poly_eval(c[0], F.from_ints(xs)), [ref_eval(polys[0], x, p) for x in xs])
    same(F, F.poly_eval(c, F.from_int(xs[0])), [ref_eval(cs, xs[0], p) for cs in polys])


@fields
def test_poly_eval_edge_pairs(F: type[Field]) -> None:
    """c0 + c1 * x for every pair of edge values (c1, x) and a few c0."""
    p = F.MODULUS
    e = np.array(edges(F), dtype=object)
    for c0 in (1, p - 1, 2**64 - 1 if F is Field128 else 2**32):
        coeffs = F.zeros((len(e), 2))
        coeffs[:, 0] = F.from_int(c0)
        coeffs[:, 1] = arr(F, e)
        got = F.poly_eval(coeffs[:, None], arr(F, e)[None, :])
        same(F, got, (c0 + e[:, None] * e[None, :]) % p)


@fields
def test_poly_eval_broadcasting(F: type[Field]) -> None:
    """The FLP shape: (reports, wires, degree) coefficients at one point per report."""
    rng = np.random.default_rng(7)
    p = F.MODULUS
    c = F.random((3, 2, 5), rng)
    t = F.random(3, rng)
    got = F.poly_eval(c, t[:, None])
    oc, ot = obj(F, c), F.to_ints(t)
    same(F, got, [[ref_eval(list(oc[i, j]), ot[i], p) for j in range(2)] for i in range(3)])
    # A polynomial of degree 0 and the empty polynomial.
    same(F, F.poly_eval(c[..., :1, :], t[:, None]), oc[..., 0])
    same(F, F.poly_eval(c[..., :0, :], t[:, None]), np.zeros((3, 2), dtype=object))


@fields
@SETTINGS
@given(data=st.data())
def test_poly_mul_small(F: type[Field], data: st.DataObject) -> None:
    p = F.MODULUS
    a = data.draw(vectors(F, min_size=1, max_size=12))
    b = data.draw(vectors(F, min_size=1, max_size=12))
    same(F, F.poly_mul(F.from_ints(a), F.from_ints(b)), ref_mul(a, b, p))


@fields
@pytest.mark.parametrize(("la", "lb"), [(1, 300), (64, 64), (200, 150), (257, 256), (3, 2)])
def test_poly_mul_sizes(F: type[Field], la: int, lb: int) -> None:
    """Sizes on both sides of the schoolbook / NTT switch, batched and broadcast."""
    rng = np.random.default_rng(la * 1000 + lb)
    p = F.MODULUS
    a = F.random((2, la), rng)
    b = F.random(lb, rng)
    got = F.poly_mul(a, b)
    ob = F.to_ints(b)
    same(F, got, [ref_mul(F.to_ints(a[i]), ob, p) for i in range(2)])
    same(F, F.poly_mul(b, a[1]), ref_mul(ob, F.to_ints(a[1]), p))


# --- NTT ----------------------------------------------------------------------------------------


@fields
@pytest.mark.parametrize("n", [1, 2, 4, 8, 16, 64])
def test_ntt_direct(F: type[Field], n: int) -> None:
    p = F.MODULUS
    rng = np.random.default_rng(n)
    a = F.random((3, n), rng)
    a[0] = F.from_ints([p - 1] * n)
    w = F.root(n)
    got = F.ntt(a)
    want = [[ref_eval(F.to_ints(a[r]), pow(w, i, p), p) for i in range(n)] for r in range(3)]
    same(F, got, want)
    same(F, F.intt(got), obj(F, a))
    # intt is evaluation at the inverse root, divided by n.
    n_inv, w_inv = pow(n, -1, p), pow(w, -1, p)
    want_inv = [ref_eval(F.to_ints(a[1]), pow(w_inv, i, p), p) * n_inv % p for i in range(n)]
    same(F, F.intt(a[1]), want_inv)


@fields
@SETTINGS
@given(data=st.data())
def test_ntt_round_trip(F: type[Field], data: st.DataObject) -> None:
    log_n = data.draw(st.integers(0, 9))
    values = data.draw(st.lists(elements(F), min_size=1 << log_n, max_size=1 << log_n))
    a = F.from_ints(values)
    same(F, F.intt(F.ntt(a)), values)
    same(F, F.ntt(F.intt(a)), values)


@fields
def test_ntt_batched_views(F: type[Field]) -> None:
    rng = np.random.default_rng(8)
    a = F.random((2, 3, 16), rng)
    got = F.ntt(a)
    for i, j in itertools.product(range(2), range(3)):
        assert np.array_equal(got[i, j], F.ntt(a[i, j]))
    t = F.ntt(a.transpose(1, 0, 2, 3))
    assert np.array_equal(t, got.transpose(1, 0, 2, 3))
    # Product of polynomials is pointwise after the transform.
    x, y = a[0, 0, :8], a[0, 1, :8]
    pad = F.zeros(16)
    pad[:8] = x
    pad2 = F.zeros(16)
    pad2[:8] = y
    prod = F.intt(F.mul(F.ntt(pad), F.ntt(pad2)))
    same(F, prod[:15], ref_mul(F.to_ints(x), F.to_ints(y), F.MODULUS))
