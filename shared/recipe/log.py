"""The recipe transparency log: an append-only Merkle tree as RFC 6962 / RFC 9162 define it.

001 §4.x ("Public Recipes and Server Information") asks that collection parameters be placed on
a public transparency log, so that every client sees the same recipe and a server cannot show
one device a recipe it hides from others. Every published recipe is a leaf; the leaf data is
the recipe's canonical encoding (`shared.recipe.signing.recipe_bytes`).

Hashes (RFC 9162 §2.1.1, SHA-256):

- leaf: ``SHA-256(0x00 || leaf)``; node: ``SHA-256(0x01 || left || right)``;
- MTH of n leaves: ``SHA-256("")`` for n = 0; otherwise split at k, the largest power of two
  below n (RFC 9162 §2.1.1), so the tree is the left-filled, non-balanced one of CT.

Proofs: inclusion (PATH, §2.1.3.1; verified by §2.1.3.2) and consistency (PROOF/SUBPROOF,
§2.1.4.1; verified by §2.1.4.2). Functions here take the list of leaf hashes; the server keeps
that list in its database.

Signed tree heads: Ed25519 over ``TREE_HEAD_SIGNATURE_CONTEXT || uint64 tree_size ||
uint64 timestamp (ms) || root_hash[32]`` (network byte order, as RFC 6962 §3.5 orders its
TreeHeadSignature fields). `LogVerifier` is the device side: it remembers the last tree head it
accepted, takes a new one only with a valid consistency proof from it (so a forked view, two
heads of one size with different roots or a later head that does not extend the earlier one,
is refused), and accepts a recipe only with an inclusion proof against an accepted head.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Mapping, Sequence
from typing import Any, Final

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from pydantic import BaseModel, ConfigDict, Field, field_validator

from shared.b64url import b64url_decode, b64url_encode
from shared.recipe.model import Recipe
from shared.recipe.signing import (
    RecipeSigner,
    RecipeVerificationError,
    key_id,
    public_key_bytes,
    verify_signed_recipe,
)

TREE_HEAD_SIGNATURE_CONTEXT: Final = b"sagg recipe log tree head v1\x00"

#: SHA-256 output length: leaf and node hashes of the recipe log (RFC 9162 §2.1.1).
LOG_HASH_SIZE: Final = 32


__all__ = [
    "EMPTY_ROOT",
    "ForkError",
    "LogVerificationError",
    "LogVerifier",
    "SignedTreeHead",
    "consistency_proof",
    "inclusion_proof",
    "leaf_hash",
    "node_hash",
    "root_hash",
    "sign_tree_head",
    "tree_head_bytes",
    "verify_consistency",
    "verify_inclusion",
    "verify_tree_head",
]


class LogVerificationError(ValueError):
    """A proof, tree head or signature does not verify."""


class ForkError(LogVerificationError):
    """The log showed two views that cannot both be true (a split view or a rewritten past)."""


def leaf_hash(leaf: bytes) -> bytes:
    return hashlib.sha256(b"\x00" + leaf).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(b"\x01" + left + right).digest()


EMPTY_ROOT = hashlib.sha256(b"").digest()


def _split(n: int) -> int:
    """The largest power of two strictly below n (n >= 2)."""
    return 1 << ((n - 1).bit_length() - 1)


def root_hash(leaf_hashes: Sequence[bytes]) -> bytes:
    """MTH over the leaves whose hashes are given (RFC 9162 §2.1.1)."""
    n = len(leaf_hashes)
    if n == 0:
        return EMPTY_ROOT
    if n == 1:
        return leaf_hashes[0]
    k = _split(n)
    return node_hash(root_hash(leaf_hashes[:k]), root_hash(leaf_hashes[k:]))


def inclusion_proof(leaf_hashes: Sequence[bytes], index: int) -> list[bytes]:
    """PATH(m, D[n]) of RFC 9162 §2.1.3.1, for the tree of these leaves."""
    n = len(leaf_hashes)
    if not 0 <= index < n:
        raise ValueError(f"leaf index {index} is not in a tree of size {n}")
    if n == 1:
        return []
    k = _split(n)
    if index < k:
        return [*inclusion_proof(leaf_hashes[:k], index), root_hash(leaf_hashes[k:])]
    return [*inclusion_proof(leaf_hashes[k:], index - k), root_hash(leaf_hashes[:k])]


def _subproof(m: int, leaves: Sequence[bytes], complete: bool) -> list[bytes]:
    n = len(leaves)
    if m == n:
        return [] if complete else [root_hash(leaves)]
    k = _split(n)
    if m <= k:
        return [*_subproof(m, leaves[:k], complete), root_hash(leaves[k:])]
    return [*_subproof(m - k, leaves[k:], False), root_hash(leaves[:k])]


def consistency_proof(leaf_hashes: Sequence[bytes], first: int) -> list[bytes]:
    """PROOF(m, D[n]) of RFC 9162 §2.1.4.1 (empty for m = 0 and m = n)."""
    n = len(leaf_hashes)
    if not 0 <= first <= n:
        raise ValueError(f"tree size {first} is not in 0..{n}")
    if first in (0, n):
        return []
    return _subproof(first, leaf_hashes, True)


def _check_hash(value: bytes, what: str) -> None:
    if len(value) != LOG_HASH_SIZE:
        raise LogVerificationError(f"{what} must be {LOG_HASH_SIZE} bytes")


def verify_inclusion(
    leaf: bytes, index: int, tree_size: int, proof: Sequence[bytes], root: bytes
) -> None:
    """RFC 9162 §2.1.3.2 for a leaf hash; LogVerificationError unless it proves inclusion."""
    _check_hash(leaf, "leaf hash")
    _check_hash(root, "root hash")
    if not 0 <= index < tree_size:
        raise LogVerificationError("leaf index is not below the tree size")
    fn, sn = index, tree_size - 1
    r = leaf
    for p in proof:
        _check_hash(p, "proof node")
        if sn == 0:
            raise LogVerificationError("inclusion proof too long")
        if fn & 1 or fn == sn:
            r = node_hash(p, r)
            if not fn & 1:
                while fn and not fn & 1:
                    fn >>= 1
                    sn >>= 1
        else:
            r = node_hash(r, p)
        fn >>= 1
        sn >>= 1
    if sn != 0:
        raise LogVerificationError("inclusion proof too short")
    if r != root:
        raise LogVerificationError("inclusion proof does not lead to the root")


def verify_consistency(
    first: int, second: int, first_root: bytes, second_root: bytes, proof: Sequence[bytes]
) -> None:
    """RFC 9162 §2.1.4.2; LogVerificationError unless the first tree is a prefix of the second.

    Edge cases as in RFC 9162's algorithm and CT's verifiers: equal sizes need equal roots and
    an empty proof; a first size of 0 is consistent with anything and takes an empty proof.
    """
    _check_hash(first_root, "first root")
    _check_hash(second_root, "second root")
    if not 0 <= first <= second:
        raise LogVerificationError("the first tree must not be larger than the second")
    if first == second:
        if proof:
            raise LogVerificationError("equal sizes take an empty proof")
        if first_root != second_root:
            raise ForkError(f"two different roots for tree size {first}")
        return
    if first == 0:
        if proof:
            raise LogVerificationError("a proof from the empty tree must be empty")
        return
    if not proof:
        raise LogVerificationError("consistency proof is empty")
    for p in proof:
        _check_hash(p, "proof node")
    path = list(proof)
    if first & (first - 1) == 0:
        path.insert(0, first_root)
    fn, sn = first - 1, second - 1
    while fn & 1:
        fn >>= 1
        sn >>= 1
    fr = sr = path[0]
    for c in path[1:]:
        if sn == 0:
            raise LogVerificationError("consistency proof too long")
        if fn & 1 or fn == sn:
            fr = node_hash(c, fr)
            sr = node_hash(c, sr)
            if not fn & 1:
                while fn and not fn & 1:
                    fn >>= 1
                    sn >>= 1
        else:
            sr = node_hash(sr, c)
        fn >>= 1
        sn >>= 1
    if sn != 0:
        raise LogVerificationError("consistency proof too short")
    if fr != first_root or sr != second_root:
        raise ForkError(f"tree of size {second} does not extend the tree of size {first}")


# --- signed tree heads ---------------------------------------------------------------------------


def tree_head_bytes(tree_size: int, timestamp: int, root: bytes) -> bytes:
    """The signed bytes after the context: uint64 size, uint64 timestamp (ms), 32-byte root."""
    if len(root) != LOG_HASH_SIZE:
        raise ValueError("root hash must be 32 bytes")
    return struct.pack(">QQ", tree_size, timestamp) + root


class SignedTreeHead(BaseModel):
    """An STH as JSON: sizes and times as integers, hashes and signature unpadded base64url."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    tree_size: int = Field(ge=0, lt=2**63)
    #: Milliseconds since the UNIX epoch (RFC 6962 §3.5).
    timestamp: int = Field(ge=0, lt=2**63)
    root_hash: str
    key_id: str
    signature: str

    @field_validator("root_hash")
    @classmethod
    def _root_size(cls, value: str) -> str:
        if len(b64url_decode(value, "root_hash")) != LOG_HASH_SIZE:
            raise ValueError("root_hash must be 32 bytes")
        return value

    @property
    def root(self) -> bytes:
        return b64url_decode(self.root_hash, "root_hash")


def sign_tree_head(
    signer: RecipeSigner, tree_size: int, timestamp: int, root: bytes
) -> SignedTreeHead:
    signature = signer.sign(
        TREE_HEAD_SIGNATURE_CONTEXT, tree_head_bytes(tree_size, timestamp, root)
    )
    return SignedTreeHead(
        tree_size=tree_size,
        timestamp=timestamp,
        root_hash=b64url_encode(root),
        key_id=signer.key_id,
        signature=b64url_encode(signature),
    )


def verify_tree_head(sth: SignedTreeHead, public_key: Ed25519PublicKey | bytes) -> None:
    key = public_key if isinstance(public_key, Ed25519PublicKey) else _load(public_key)
    if sth.key_id != key_id(public_key_bytes(key)):
        raise LogVerificationError("tree head signed by another key")
    try:
        signature = b64url_decode(sth.signature, "signature")
        key.verify(
            signature,
            TREE_HEAD_SIGNATURE_CONTEXT + tree_head_bytes(sth.tree_size, sth.timestamp, sth.root),
        )
    except (InvalidSignature, ValueError):
        raise LogVerificationError("tree head signature does not verify") from None


def _load(raw: bytes) -> Ed25519PublicKey:
    try:
        return Ed25519PublicKey.from_public_bytes(raw)
    except ValueError as exc:
        raise LogVerificationError("not an Ed25519 public key") from exc


class LogVerifier:
    """A device's view of the log: the latest signed tree head it has accepted.

    Without a starting head the first valid one is trusted (trust on first use); a device
    that ships with a pinned head passes it as `latest`. Persist `latest.model_dump_json()`.
    """

    def __init__(
        self, public_key: Ed25519PublicKey | bytes, latest: SignedTreeHead | None = None
    ) -> None:
        self._key = public_key if isinstance(public_key, Ed25519PublicKey) else _load(public_key)
        if latest is not None:
            verify_tree_head(latest, self._key)
        self.latest = latest

    def update(self, sth: SignedTreeHead, proof: Sequence[bytes] = ()) -> SignedTreeHead:
        """Accept `sth` if it extends the latest accepted head (`proof`: the consistency proof
        from the smaller to the larger tree). Returns the head now held.

        An older head (smaller tree) is checked for consistency but does not replace the
        latest. Raises `ForkError` on a split view, `LogVerificationError` otherwise.
        """
        verify_tree_head(sth, self._key)
        old = self.latest
        if old is None:
            self.latest = sth
            return sth
        if sth.tree_size < old.tree_size:
            verify_consistency(sth.tree_size, old.tree_size, sth.root, old.root, proof)
            return old
        verify_consistency(old.tree_size, sth.tree_size, old.root, sth.root, proof)
        if sth.tree_size > old.tree_size and sth.timestamp < old.timestamp:
            raise LogVerificationError("a larger tree head must not be older")
        if sth.tree_size > old.tree_size:
            self.latest = sth
            return sth
        return old

    def verify_inclusion(self, leaf: bytes, index: int, proof: Sequence[bytes]) -> None:
        """The leaf data (not its hash) is in the tree of the latest accepted head."""
        if self.latest is None:
            raise LogVerificationError("no tree head accepted yet")
        verify_inclusion(leaf_hash(leaf), index, self.latest.tree_size, proof, self.latest.root)

    def verify_recipe(
        self,
        signed_recipe: bytes | str | Mapping[str, Any],
        recipe_key: Ed25519PublicKey | bytes,
        leaf_index: int,
        inclusion: Sequence[bytes],
        sth: SignedTreeHead | None = None,
        consistency: Sequence[bytes] = (),
    ) -> Recipe:
        """Device side in one call: accept `sth` (if given) through its consistency proof, check
        the recipe's signature, and require its inclusion in the latest accepted tree.

        `inclusion` must be a proof for the latest accepted head's tree size (ask the server
        for ``tree_size=<latest.tree_size>``).
        """
        if sth is not None:
            self.update(sth, consistency)
        try:
            recipe, canonical = verify_signed_recipe(signed_recipe, recipe_key)
        except RecipeVerificationError as exc:
            raise LogVerificationError(str(exc)) from exc
        self.verify_inclusion(canonical, leaf_index, inclusion)
        return recipe
