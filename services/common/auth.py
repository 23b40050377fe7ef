"""Bearer-token authentication between DAP parties (DAP-09 §3.1).

DAP leaves the scheme open; sagg accepts the interop draft's ``DAP-Auth-Token: <token>`` header
and ``Authorization: Bearer <token>`` alike. Stored tokens are SHA-256 hashes, so a database
leak does not hand out credentials, and comparison is constant-time.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping

from services.common.problems import HttpProblemError
from shared.constants import DAP_AUTH_HEADER

_BEARER = "bearer "


def hash_token(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


def presented_token(headers: Mapping[str, str]) -> str | None:
    """The token a request carries, from either accepted header, or None."""
    # Starlette's Headers is case-insensitive; a plain dict may not be, so try both spellings.
    value = headers.get(DAP_AUTH_HEADER) or headers.get(DAP_AUTH_HEADER.lower())
    if value:
        return value.strip()
    auth = headers.get("Authorization") or headers.get("authorization")
    if auth and auth[: len(_BEARER)].lower() == _BEARER:
        token = auth[len(_BEARER) :].strip()
        return token or None
    return None


def token_matches(stored_hash: bytes | None, token: str | None) -> bool:
    """Constant-time check of a presented token against a stored hash."""
    if stored_hash is None or token is None:
        return False
    return hmac.compare_digest(hash_token(token), stored_hash)


def require_bearer(headers: Mapping[str, str], expected_hash: bytes | None) -> None:
    """The admin check of every service: ``Authorization: Bearer <token>`` matching
    `expected_hash`. `HttpProblemError` 401 without a token, 403 with a wrong one or when no
    token is configured (`expected_hash` None: the admin surface is off)."""
    auth = headers.get("authorization") or headers.get("Authorization") or ""
    token = auth[len(_BEARER) :].strip() if auth[: len(_BEARER)].lower() == _BEARER else ""
    if not token:
        raise HttpProblemError(401, "admin token required")
    if not token_matches(expected_hash, token):
        raise HttpProblemError(403, "wrong admin token")


def auth_headers(token: str) -> dict[str, str]:
    """Headers for an outgoing authenticated DAP request."""
    return {DAP_AUTH_HEADER: token}
