"""The recipe server's Ed25519 signing key: from the settings, or a file created on first use."""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from services.recipe_server.settings import RecipeServerSettings
from shared.b64url import b64url_decode, b64url_encode
from shared.recipe.signing import RecipeSigner

__all__ = ["load_signer"]


def _read_or_create(path: Path) -> bytes:
    if path.exists():
        return b64url_decode(path.read_text().strip(), str(path))
    path.parent.mkdir(parents=True, exist_ok=True)
    seed = secrets.token_bytes(32)
    # O_EXCL: two processes starting at once must not both write a key; the loser reads it.
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return b64url_decode(path.read_text().strip(), str(path))
    with os.fdopen(fd, "w") as f:
        f.write(b64url_encode(seed) + "\n")
    return seed


def load_signer(settings: RecipeServerSettings) -> RecipeSigner:
    if settings.signing_key is not None:
        seed = b64url_decode(settings.signing_key.get_secret_value(), "signing_key")
    else:
        seed = _read_or_create(settings.signing_key_file)
    if len(seed) != 32:
        raise ValueError("the recipe signing key must be a 32-byte Ed25519 seed")
    return RecipeSigner.from_seed(seed)
