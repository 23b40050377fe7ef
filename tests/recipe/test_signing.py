"""Recipe signatures: verification, tampering with any byte, key mismatch, canonical form."""

from __future__ import annotations

import json
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from hypothesis import given, settings
from hypothesis import strategies as st

from shared.b64url import b64url_decode, b64url_encode
from shared.recipe.canonical import CanonicalizationError, canonical_json
from shared.recipe.model import Recipe
from shared.recipe.signing import (
    RecipeSigner,
    RecipeVerificationError,
    recipe_bytes,
    verify_recipe_signature,
    verify_signed_recipe,
)
from tests.recipe.helpers import example_recipe

SIGNER = RecipeSigner.from_seed(bytes(range(32)))


def _signed() -> dict[str, Any]:
    return SIGNER.sign_recipe(example_recipe()).to_json_value()


def test_valid_signature_verifies() -> None:
    doc = _signed()
    recipe, canonical = verify_signed_recipe(json.dumps(doc), SIGNER.public_key)
    assert recipe == Recipe.model_validate(doc["recipe"])
    assert canonical == recipe_bytes(recipe)


def test_canonical_bytes_are_stable() -> None:
    recipe = example_recipe()
    data = recipe_bytes(recipe)
    assert recipe_bytes(Recipe.model_validate_json(data)) == data
    # Member order of the received JSON does not matter.
    shuffled = json.loads(data, object_pairs_hook=lambda pairs: dict(reversed(pairs)))
    assert canonical_json(shuffled) == data
    assert recipe_bytes(Recipe.model_validate(shuffled)) == data


def test_every_byte_of_the_encoding_is_covered() -> None:
    doc = _signed()
    data = canonical_json(doc["recipe"])
    signature = b64url_decode(doc["signature"], "signature")
    verify_recipe_signature(data, signature, SIGNER.public_key)
    for i in range(len(data)):
        tampered = data[:i] + bytes([data[i] ^ 0x01]) + data[i + 1 :]
        with pytest.raises(RecipeVerificationError):
            verify_recipe_signature(tampered, signature, SIGNER.public_key)


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_tampered_documents_are_refused(data: st.DataObject) -> None:
    doc = _signed()
    text = json.dumps(doc["recipe"])
    # Change one character of the document's recipe to another printable one.
    i = data.draw(st.integers(0, len(text) - 1))
    c = data.draw(st.characters(min_codepoint=0x20, max_codepoint=0x7E))
    changed = text[:i] + c + text[i + 1 :]
    try:
        value = json.loads(changed)
    except ValueError:
        return
    try:
        same = canonical_json(value) == canonical_json(doc["recipe"])
    except CanonicalizationError:
        same = False  # e.g. 1e-08 -> 1e408 = inf: no JSON form, so no signature covers it
    if same:
        return  # a whitespace or equivalent-number edit: same recipe
    with pytest.raises(RecipeVerificationError):
        verify_signed_recipe({**doc, "recipe": value}, SIGNER.public_key)


def test_semantic_tampering_is_refused() -> None:
    doc = _signed()
    for path, value in [
        (("min_batch_size",), 10),
        (("sampling_rate",), 1),
        (("randomizer", "eps0"), 8),
        (("task", "leader"), "https://evil.example"),
    ]:
        changed = json.loads(json.dumps(doc))
        target = changed["recipe"]
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value
        with pytest.raises(RecipeVerificationError, match="signature"):
            verify_signed_recipe(changed, SIGNER.public_key)


def test_other_key_and_malformed_documents() -> None:
    doc = _signed()
    other = RecipeSigner(Ed25519PrivateKey.generate())
    with pytest.raises(RecipeVerificationError, match="another key"):
        verify_signed_recipe(doc, other.public_key)
    forged = {**doc, "key_id": other.key_id}
    with pytest.raises(RecipeVerificationError):
        verify_signed_recipe(forged, other.public_key)
    with pytest.raises(RecipeVerificationError):
        verify_signed_recipe({**doc, "extra": 1}, SIGNER.public_key)
    with pytest.raises(RecipeVerificationError):
        verify_signed_recipe(b"not json", SIGNER.public_key)


def test_signed_but_not_canonical_is_refused() -> None:
    # A signer that signs a non-normal form (an explicit null for an absent member) is caught
    # when the device re-encodes its parse.
    raw = example_recipe().model_dump(mode="json", exclude_none=True)
    raw["task"]["task_expiration"] = None
    sig = SIGNER.sign(b"sagg recipe v1\x00", canonical_json(raw))
    doc = {"recipe": raw, "key_id": SIGNER.key_id, "signature": b64url_encode(sig)}
    with pytest.raises(RecipeVerificationError, match="canonical"):
        verify_signed_recipe(doc, SIGNER.public_key)
