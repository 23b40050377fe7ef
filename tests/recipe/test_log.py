"""Transparency log: RFC 6962/9162 known answers, proofs for every size, and the device verifier.

Known answers: the reference tree of Google's certificate-transparency test suites (8 leaves),
as published in transparency-dev/merkle, proof/verify_test.go (`leaves`, `roots`,
`inclusionProofs`, `consistencyProofs`; leaf numbers there are 1-based) — the same values as
certificate-transparency-go's merkletree tests and the CT C++ merkle_tree_test.cc.
"""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shared.recipe.log import (
    EMPTY_ROOT,
    ForkError,
    LogVerificationError,
    LogVerifier,
    SignedTreeHead,
    consistency_proof,
    inclusion_proof,
    leaf_hash,
    root_hash,
    sign_tree_head,
    verify_consistency,
    verify_inclusion,
    verify_tree_head,
)
from shared.recipe.signing import RecipeSigner, recipe_bytes
from tests.recipe.helpers import example_recipe

LEAVES = [
    bytes.fromhex(h)
    for h in (
        "",
        "00",
        "10",
        "2021",
        "3031",
        "40414243",
        "5051525354555657",
        "606162636465666768696a6b6c6d6e6f",
    )
]
# roots[i] is the root of the tree of the first i + 1 leaves.
ROOTS = [
    bytes.fromhex(h)
    for h in (
        "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
        "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
        "aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
        "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
        "4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
        "76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
        "ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
        "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328",
    )
]
EMPTY_TREE = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"


def _h(*hexes: str) -> list[bytes]:
    return [bytes.fromhex(h) for h in hexes]


# (leaf number, 1-based; tree size; proof)
INCLUSION = [
    (1, 1, []),
    (
        1,
        8,
        _h(
            "96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
            "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
            "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4",
        ),
    ),
    (
        6,
        8,
        _h(
            "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
            "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
            "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
        ),
    ),
    (3, 3, _h("fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125")),
    (
        2,
        5,
        _h(
            "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
            "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
            "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
        ),
    ),
]
# (size1, size2, proof)
CONSISTENCY = [
    (1, 1, []),
    (
        1,
        8,
        _h(
            "96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
            "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
            "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4",
        ),
    ),
    (
        6,
        8,
        _h(
            "0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a",
            "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
            "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
        ),
    ),
    (
        2,
        5,
        _h(
            "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
            "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
        ),
    ),
    (
        6,
        7,
        _h(
            "0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a",
            "b08693ec2e721597130641e8211e7eedccb4c26413963eee6c1e2ed16ffb1a5f",
            "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
        ),
    ),
]

HASHES = [leaf_hash(x) for x in LEAVES]


def test_empty_tree_and_leaf_hash() -> None:
    assert root_hash([]) == EMPTY_ROOT == bytes.fromhex(EMPTY_TREE)
    assert leaf_hash(b"") == ROOTS[0]  # a one-leaf tree's root is its leaf hash


@pytest.mark.parametrize("size", range(1, 9))
def test_known_roots(size: int) -> None:
    assert root_hash(HASHES[:size]) == ROOTS[size - 1]


@pytest.mark.parametrize(("leaf", "size", "proof"), INCLUSION)
def test_known_inclusion_proofs(leaf: int, size: int, proof: list[bytes]) -> None:
    assert inclusion_proof(HASHES[:size], leaf - 1) == proof
    verify_inclusion(HASHES[leaf - 1], leaf - 1, size, proof, ROOTS[size - 1])
    # Go's corruptInclusionProof probes, the ones that apply to every vector.
    bad = [
        (leaf, size, proof, ROOTS[size - 1], HASHES[leaf - 1]),
        (leaf - 1, 2 * size, proof, ROOTS[size - 1], HASHES[leaf - 1]),
        (leaf - 1, size, proof, EMPTY_ROOT, HASHES[leaf - 1]),
        (leaf - 1, size, proof, ROOTS[size - 1], leaf_hash(b"WrongLeaf")),
        (leaf - 1, size, [*proof, ROOTS[size - 1]], ROOTS[size - 1], HASHES[leaf - 1]),
        (leaf - 1, size, [ROOTS[size - 1], *proof], ROOTS[size - 1], HASHES[leaf - 1]),
    ]
    if proof:
        bad.append((leaf - 1, size, proof[:-1], ROOTS[size - 1], HASHES[leaf - 1]))
        for i in range(len(proof)):
            flipped = list(proof)
            flipped[i] = bytes([flipped[i][0] ^ 8]) + flipped[i][1:]
            bad.append((leaf - 1, size, flipped, ROOTS[size - 1], HASHES[leaf - 1]))
    for index, n, p, root, lh in bad:
        with pytest.raises(LogVerificationError):
            verify_inclusion(lh, index, n, p, root)


@pytest.mark.parametrize(("first", "second", "proof"), CONSISTENCY)
def test_known_consistency_proofs(first: int, second: int, proof: list[bytes]) -> None:
    assert consistency_proof(HASHES[:second], first) == proof
    r1, r2 = ROOTS[first - 1], ROOTS[second - 1]
    verify_consistency(first, second, r1, r2, proof)
    if not proof:
        return
    bad = [
        (first - 1, second, r1, r2, proof),
        (first + 1, second, r1, r2, proof),
        (first ^ 2, second, r1, r2, proof),
        (first, second * 2, r1, r2, proof),
        (first, second // 2, r1, r2, proof),
        (first, second, r2, r1, proof),
        (first, second, r1, r2, []),
        (first, second, r1, r2, [*proof, r1]),
        (first, second, r1, r2, [*proof, r2]),
        (first, second, r1, r2, [r1, *proof]),
        (first, second, r1, r2, [r2, *proof]),
        (first, second, r1, r2, [proof[0], *proof]),
        (first, second, r1, r2, proof[:-1]),
    ]
    for i in range(len(proof)):
        flipped = list(proof)
        flipped[i] = bytes([flipped[i][0] ^ 16]) + flipped[i][1:]
        bad.append((first, second, r1, r2, flipped))
    for f, s, a, b, p in bad:
        with pytest.raises(LogVerificationError):
            verify_consistency(f, s, a, b, p)


def test_consistency_edge_cases() -> None:
    # transparency-dev/merkle TestVerifyConsistency's fixed cases.
    r1, r2 = hashlib.sha256(b"1").digest(), hashlib.sha256(b"2").digest()
    verify_consistency(0, 0, r1, r1, [])
    verify_consistency(0, 1, r1, r2, [])
    verify_consistency(1, 1, r2, r2, [])
    for f, s, a, b, p in [
        (0, 0, r1, r2, []),
        (1, 1, r1, r2, []),
        (1, 0, r1, r2, []),
        (2, 1, r1, r2, []),
        (1, 2, r1, r2, []),
        (0, 0, EMPTY_ROOT, EMPTY_ROOT, [EMPTY_ROOT]),
        (0, 1, EMPTY_ROOT, EMPTY_ROOT, [EMPTY_ROOT]),
        (1, 1, EMPTY_ROOT, EMPTY_ROOT, [EMPTY_ROOT]),
    ]:
        with pytest.raises(LogVerificationError):
            verify_consistency(f, s, a, b, p)


def _tree(n: int) -> list[bytes]:
    return [leaf_hash(i.to_bytes(4, "big")) for i in range(n)]


@pytest.mark.parametrize("n", range(1, 41))
def test_every_inclusion_proof_up_to_40(n: int) -> None:
    hashes = _tree(n)
    root = root_hash(hashes)
    for i in range(n):
        proof = inclusion_proof(hashes, i)
        verify_inclusion(hashes[i], i, n, proof, root)
        with pytest.raises(LogVerificationError):
            verify_inclusion(hashes[(i + 1) % n] if n > 1 else EMPTY_ROOT, i, n, proof, root)


@pytest.mark.parametrize("n", range(1, 41))
def test_every_consistency_proof_up_to_40(n: int) -> None:
    hashes = _tree(n)
    for m in range(0, n + 1):
        verify_consistency(
            m, n, root_hash(hashes[:m]), root_hash(hashes), consistency_proof(hashes, m)
        )


@settings(max_examples=150, deadline=None)
@given(st.integers(1, 40), st.data())
def test_corrupted_proofs_fail(n: int, data: st.DataObject) -> None:
    hashes = _tree(n)
    m = data.draw(st.integers(1, n))
    root_m, root_n = root_hash(hashes[:m]), root_hash(hashes)
    proof = consistency_proof(hashes, m)
    i = data.draw(st.integers(0, n - 1))
    inc = inclusion_proof(hashes, i)
    if proof:
        j = data.draw(st.integers(0, len(proof) - 1))
        bit = data.draw(st.integers(0, 255))
        bad = list(proof)
        bad[j] = bytes([bad[j][bit // 8] ^ (1 << (bit % 8))]).join(
            [bad[j][: bit // 8], bad[j][bit // 8 + 1 :]]
        )
        with pytest.raises(LogVerificationError):
            verify_consistency(m, n, root_m, root_n, bad)
    # A different leaf list of the same size m (a rewritten past) is not consistent.
    if m < n:
        rewritten = list(hashes)
        k = data.draw(st.integers(0, m - 1))
        rewritten[k] = leaf_hash(b"forged")
        with pytest.raises(ForkError):
            verify_consistency(m, n, root_hash(rewritten[:m]), root_n, proof)
    if inc:
        j = data.draw(st.integers(0, len(inc) - 1))
        bad_inc = list(inc)
        bad_inc[j] = hashlib.sha256(bad_inc[j]).digest()
        with pytest.raises(LogVerificationError):
            verify_inclusion(hashes[i], i, n, bad_inc, root_n)
        # The same proof with a wrong index does not verify either (unless the paths coincide).
        if i + 1 < n and inclusion_proof(hashes, i + 1) != inc:
            with pytest.raises(LogVerificationError):
                verify_inclusion(hashes[i], i + 1, n, inc, root_n)


# --- signed tree heads and the device verifier ---------------------------------------------------

SIGNER = RecipeSigner.from_seed(b"\x11" * 32)


def _sth(hashes: list[bytes], t: int = 1000, signer: RecipeSigner = SIGNER) -> SignedTreeHead:
    return sign_tree_head(signer, len(hashes), t + len(hashes), root_hash(hashes))


def test_tree_head_signature() -> None:
    sth = _sth(_tree(5))
    verify_tree_head(sth, SIGNER.public_key)
    for change in ({"tree_size": 6}, {"timestamp": 1}, {"root_hash": _sth(_tree(4)).root_hash}):
        with pytest.raises(LogVerificationError):
            verify_tree_head(sth.model_copy(update=change), SIGNER.public_key)
    other = RecipeSigner.from_seed(b"\x22" * 32)
    with pytest.raises(LogVerificationError):
        verify_tree_head(_sth(_tree(5), signer=other), SIGNER.public_key)


def test_verifier_follows_a_growing_log() -> None:
    hashes = _tree(30)
    v = LogVerifier(SIGNER.public_key)
    v.update(_sth(hashes[:3]))
    for old, new in [(3, 7), (7, 8), (8, 8), (8, 21), (21, 30)]:
        v.update(_sth(hashes[:new]), consistency_proof(hashes[:new], old))
        assert v.latest is not None and v.latest.tree_size == new
    # An older head that is consistent is fine, and does not move the state back.
    v.update(_sth(hashes[:10]), consistency_proof(hashes, 10))
    assert v.latest is not None and v.latest.tree_size == 30
    # Persisted state round trip.
    again = LogVerifier(
        SIGNER.public_key, SignedTreeHead.model_validate_json(v.latest.model_dump_json())
    )
    again.verify_inclusion(b"\x00\x00\x00\x07", 7, inclusion_proof(hashes, 7))


def test_verifier_refuses_forks() -> None:
    hashes = _tree(12)
    forked = list(hashes)
    forked[4] = leaf_hash(b"a different recipe")
    v = LogVerifier(SIGNER.public_key, _sth(hashes[:8]))
    # Same size, different root: a split view.
    with pytest.raises(ForkError):
        v.update(_sth(forked[:8]), [])
    # A later head that does not extend the accepted one, with its own (honest) proof.
    with pytest.raises(ForkError):
        v.update(_sth(forked), consistency_proof(forked, 8))
    # A later head with no proof at all.
    with pytest.raises(LogVerificationError):
        v.update(_sth(hashes), [])
    assert v.latest is not None and v.latest.tree_size == 8
    v.update(_sth(hashes), consistency_proof(hashes, 8))
    assert v.latest.tree_size == 12


def test_verifier_inclusion_needs_an_accepted_head() -> None:
    hashes = _tree(6)
    v = LogVerifier(SIGNER.public_key)
    with pytest.raises(LogVerificationError, match="no tree head"):
        v.verify_inclusion(b"\x00\x00\x00\x01", 1, inclusion_proof(hashes, 1))
    v.update(_sth(hashes))
    v.verify_inclusion(b"\x00\x00\x00\x01", 1, inclusion_proof(hashes, 1))
    # An entry that is not in the log (same index, other data) is refused.
    with pytest.raises(LogVerificationError):
        v.verify_inclusion(b"unlogged", 1, inclusion_proof(hashes, 1))


def test_verify_recipe_needs_signature_and_inclusion() -> None:
    recipes = [example_recipe(version=v) for v in (1, 2, 3)]
    leaves = [leaf_hash(recipe_bytes(r)) for r in recipes]
    sth = _sth(leaves)
    v = LogVerifier(SIGNER.public_key)
    doc = SIGNER.sign_recipe(recipes[1]).to_json_value()
    got = v.verify_recipe(doc, SIGNER.public_key, 1, inclusion_proof(leaves, 1), sth)
    assert got == recipes[1]
    # Signed but never logged: no inclusion proof can place it.
    unlogged = SIGNER.sign_recipe(example_recipe(version=9)).to_json_value()
    for index in range(3):
        with pytest.raises(LogVerificationError):
            v.verify_recipe(unlogged, SIGNER.public_key, index, inclusion_proof(leaves, index))
    # Logged but signed by someone else.
    other = RecipeSigner.from_seed(b"\x33" * 32)
    with pytest.raises(LogVerificationError, match="another key"):
        v.verify_recipe(other.sign_recipe(recipes[1]).to_json_value(), SIGNER.public_key, 1, [])
