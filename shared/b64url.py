"""base64url (RFC 4648 §5), strict and canonical, in the two spellings sagg's formats use.

- Unpadded: DAP-09 ids in URLs and problem documents (§1.2), task and recipe JSON fields, keys in
  configuration files.
- Padded: Privacy Pass headers and issuer directories (RFC 9577 §2.1.2, RFC 9578 §4), which are
  read padded or not.

Decoding is strict: only the url-safe alphabet, padding only where the spelling allows it, and
the canonical form only (no stray bits in the last character), so one value has one spelling and
string-keyed lookups cannot be fooled by a second one.
"""

from __future__ import annotations

import base64
import binascii
import re
from typing import Final

__all__ = ["b64url_decode", "b64url_encode"]

_UNPADDED: Final = re.compile(r"[A-Za-z0-9_-]*")
_PADDED: Final = re.compile(r"[A-Za-z0-9_-]*={0,2}")


def b64url_encode(data: bytes, *, padded: bool = False) -> str:
    text = base64.urlsafe_b64encode(data).decode("ascii")
    return text if padded else text.rstrip("=")


def b64url_decode(text: str, what: str = "value", *, padding_allowed: bool = False) -> bytes:
    """The bytes of `text`; ValueError naming `what` (never quoting `text`: it may be secret)."""
    if not (_PADDED if padding_allowed else _UNPADDED).fullmatch(text):
        raise ValueError(f"{what} must be {'' if padding_allowed else 'unpadded '}base64url")
    bare = text.rstrip("=")
    if bare != text and len(text) % 4:
        raise ValueError(f"{what} has bad base64url padding")
    try:
        data = base64.urlsafe_b64decode(bare + "=" * (-len(bare) % 4))
    except (binascii.Error, ValueError):
        raise ValueError(f"{what} is not valid base64url") from None
    if b64url_encode(data) != bare:
        raise ValueError(f"{what} is not canonical base64url")
    return data
