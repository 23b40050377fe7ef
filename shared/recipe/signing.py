"""Canonical bytes of a recipe, its Ed25519 signature (RFC 8032), and device-side verification.

The signed bytes are ``RECIPE_SIGNATURE_CONTEXT || JCS(recipe)``, JCS being RFC 8785 canonical
JSON (`shared.recipe.canonical`) of the recipe's JSON form with absent optional members
omitted. The same canonical bytes are the recipe's leaf in the transparency log
(`shared.recipe.log`), so one encoding is both signed and logged.

A device verifies the bytes it received, not a re-serialization of its own parse: it
canonicalizes the received JSON value, checks the signature over that, and only then parses it,
requiring that the parse encodes back to the same bytes (so no member was dropped, coerced or
defaulted on the way).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any, Final

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding as KeyEncoding
from cryptography.hazmat.primitives.serialization import PublicFormat
from pydantic import BaseModel, ConfigDict, ValidationError

from shared.b64url import b64url_decode, b64url_encode
from shared.recipe.canonical import CanonicalizationError, canonical_json
from shared.recipe.model import Recipe

#: Ed25519 signature contexts (prepended to the signed bytes, each ends with a NUL).
RECIPE_SIGNATURE_CONTEXT: Final = b"sagg recipe v1\x00"

#: Signature algorithm name as the key directory (`GET /keys`) states it.
SIGNATURE_ALGORITHM: Final = "Ed25519"


__all__ = [
    "RecipeSigner",
    "RecipeVerificationError",
    "SignedRecipe",
    "key_id",
    "public_key_bytes",
    "recipe_bytes",
    "verify_recipe_signature",
    "verify_signed_recipe",
]


class RecipeVerificationError(ValueError):
    """The recipe is malformed, not canonical, or not signed by the expected key."""


def recipe_bytes(recipe: Recipe) -> bytes:
    """The canonical encoding of a recipe: what is signed and what the log stores."""
    return canonical_json(recipe.model_dump(mode="json", exclude_none=True))


def public_key_bytes(key: Ed25519PublicKey) -> bytes:
    return key.public_bytes(KeyEncoding.Raw, PublicFormat.Raw)


def key_id(public_key: bytes) -> str:
    """base64url(SHA-256(raw 32-byte Ed25519 public key)), as `GET /keys` lists it."""
    return b64url_encode(hashlib.sha256(public_key).digest())


class SignedRecipe(BaseModel):
    """``{"recipe": {...}, "key_id": ..., "signature": ...}`` (signature unpadded base64url)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    recipe: Recipe
    key_id: str
    signature: str

    def to_json_value(self) -> dict[str, Any]:
        return {
            "recipe": self.recipe.model_dump(mode="json", exclude_none=True),
            "key_id": self.key_id,
            "signature": self.signature,
        }


class RecipeSigner:
    """The recipe server's signing key."""

    def __init__(self, private_key: Ed25519PrivateKey) -> None:
        self._key = private_key
        self.public_key = public_key_bytes(private_key.public_key())
        self.key_id = key_id(self.public_key)

    @classmethod
    def from_seed(cls, seed: bytes) -> RecipeSigner:
        return cls(Ed25519PrivateKey.from_private_bytes(seed))

    def sign(self, context: bytes, message: bytes) -> bytes:
        return self._key.sign(context + message)

    def sign_recipe(self, recipe: Recipe) -> SignedRecipe:
        signature = self.sign(RECIPE_SIGNATURE_CONTEXT, recipe_bytes(recipe))
        return SignedRecipe(recipe=recipe, key_id=self.key_id, signature=b64url_encode(signature))


def _public_key(key: bytes | Ed25519PublicKey) -> Ed25519PublicKey:
    if isinstance(key, Ed25519PublicKey):
        return key
    try:
        return Ed25519PublicKey.from_public_bytes(key)
    except ValueError as exc:
        raise RecipeVerificationError("not an Ed25519 public key") from exc


def verify_recipe_signature(
    canonical: bytes, signature: bytes, public_key: bytes | Ed25519PublicKey
) -> None:
    """Check an Ed25519 signature over canonical recipe bytes; RecipeVerificationError if bad."""
    try:
        _public_key(public_key).verify(signature, RECIPE_SIGNATURE_CONTEXT + canonical)
    except InvalidSignature:
        raise RecipeVerificationError("recipe signature does not verify") from None


def verify_signed_recipe(
    document: bytes | str | Mapping[str, Any], public_key: bytes | Ed25519PublicKey
) -> tuple[Recipe, bytes]:
    """Device side: a signed-recipe document (JSON text or value) to (recipe, canonical bytes).

    Raises `RecipeVerificationError` unless the signature over the received recipe's canonical
    bytes verifies under `public_key`, the key id matches, and the recipe parses and
    re-encodes to exactly those bytes.
    """
    if isinstance(document, bytes | str):
        try:
            document = json.loads(document)
        except ValueError as exc:
            raise RecipeVerificationError("signed recipe is not JSON") from exc
        except RecursionError:  # nesting deeper than the parser's stack
            raise RecipeVerificationError("signed recipe is not JSON (nested too deeply)") from None
    if not isinstance(document, Mapping) or set(document) != {"recipe", "key_id", "signature"}:
        raise RecipeVerificationError("expected exactly recipe, key_id and signature")
    raw, kid, sig = document["recipe"], document["key_id"], document["signature"]
    if not isinstance(kid, str) or not isinstance(sig, str):
        raise RecipeVerificationError("key_id and signature must be strings")
    key = _public_key(public_key)
    if kid != key_id(public_key_bytes(key)):
        raise RecipeVerificationError("recipe signed by another key")
    try:
        canonical = canonical_json(raw)
        signature = b64url_decode(sig, "signature")
    except (CanonicalizationError, ValueError) as exc:
        raise RecipeVerificationError(str(exc)) from exc
    verify_recipe_signature(canonical, signature, key)
    try:
        recipe = Recipe.model_validate(raw)
    except ValidationError as exc:
        reason = exc.errors()[0]["msg"]
        raise RecipeVerificationError(f"signed but invalid recipe: {reason}") from None
    if recipe_bytes(recipe) != canonical:
        raise RecipeVerificationError("signed recipe is not in canonical form")
    return recipe, canonical
