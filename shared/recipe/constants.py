"""Version strings, signature contexts and media types of recipes and the recipe log.

Kept here until they join `shared/constants.py`. Every signature sagg's recipe server makes is
over a context string followed by the signed bytes, so a signature of one kind can never be
replayed as another (a recipe signature is not a tree-head signature).
"""

from __future__ import annotations

from typing import Final

#: The `format` member of every recipe; a device refuses formats it does not know.
RECIPE_FORMAT: Final = "sagg-recipe/1"

#: Ed25519 signature contexts (prepended to the signed bytes, each ends with a NUL).
RECIPE_SIGNATURE_CONTEXT: Final = b"sagg recipe v1\x00"
TREE_HEAD_SIGNATURE_CONTEXT: Final = b"sagg recipe log tree head v1\x00"

#: Signature algorithm name as the key directory (`GET /keys`) states it.
SIGNATURE_ALGORITHM: Final = "Ed25519"

#: Media types of the recipe server's JSON documents.
MEDIA_SIGNED_RECIPE: Final = "application/sagg-signed-recipe+json"
MEDIA_RECIPE_LIST: Final = "application/sagg-recipe-list+json"
MEDIA_TREE_HEAD: Final = "application/sagg-tree-head+json"

#: SHA-256 output length: leaf and node hashes of the log (RFC 9162 §2.1.1).
HASH_SIZE: Final = 32
