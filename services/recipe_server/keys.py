"""The recipe server's Ed25519 signing key: from the settings, or a file created on first use."""

from __future__ import annotations

import secrets
from pathlib import Path

from services.recipe_server.settings import RecipeServerSettings
from shared.b64url import b64url_decode, b64url_encode
from shared.files import create_private, private_dir, read_private
from shared.recipe.signing import RecipeSigner

__all__ = ["load_signer"]


def _read_or_create(path: Path) -> bytes:
    if not path.parent.exists():
        private_dir(path.parent)
    # O_EXCL: two processes starting at once must not both write a key; the loser reads it.
    # Neither creating nor reading follows a symbolic link (`shared.files`).
    create_private(path, b64url_encode(secrets.token_bytes(32)).encode() + b"\n")
    return b64url_decode(read_private(path).decode().strip(), str(path))


def load_signer(settings: RecipeServerSettings) -> RecipeSigner:
    if settings.signing_key is not None:
        seed = b64url_decode(settings.signing_key.get_secret_value(), "signing_key")
    else:
        seed = _read_or_create(settings.signing_key_file)
    if len(seed) != 32:
        raise ValueError("the recipe signing key must be a 32-byte Ed25519 seed")
    return RecipeSigner.from_seed(seed)
