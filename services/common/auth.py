"""Bearer-token authentication between DAP parties (DAP-09 §3.1) and of the services' APIs.

DAP leaves the scheme open; sagg accepts the interop draft's ``DAP-Auth-Token: <token>`` header
and ``Authorization: Bearer <token>`` alike. Stored tokens are SHA-256 hashes, so a database
leak does not hand out credentials, and comparison is constant-time.

The services' own APIs take ``Authorization: Bearer`` credentials with a scope each (least
privilege, RFC 9576 §4 keeps every party's powers apart): an operator's admin token opens a
party's whole API, a provisioning token (the recipe server's) only creates and confirms tasks.
Every configured token is at least `MIN_TOKEN_LENGTH` characters (`ServiceToken`). Routes
take their check as a FastAPI dependency (`BearerAuth`), so the OpenAPI descriptions declare
the bearer scheme.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping
from typing import Annotated, Any, Final

from fastapi import HTTPException, Request, Security
from fastapi.security import APIKeyHeader, HTTPAuthorizationCredentials, HTTPBearer
from pydantic import AfterValidator, SecretStr

from services.common.problems import HttpProblemError
from shared.dap.messages import DAP_AUTH_HEADER

_BEARER = "bearer "

#: The least length of a configured bearer token: 16 characters of `secrets.token_urlsafe`
#: are 96 bits, beyond online guessing.
MIN_TOKEN_LENGTH = 16


def _long_enough(token: SecretStr) -> SecretStr:
    if len(token.get_secret_value()) < MIN_TOKEN_LENGTH:
        raise ValueError(f"must be at least {MIN_TOKEN_LENGTH} characters")
    return token


#: A bearer token setting; a shorter value fails the service's start with a one-line error.
ServiceToken = Annotated[SecretStr, AfterValidator(_long_enough)]


def token_hash(token: SecretStr | None) -> bytes | None:
    """The hash a route checks against, None for an unset token (its surface is off)."""
    return None if token is None else hash_token(token.get_secret_value())


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


def require_bearer(headers: Mapping[str, str], *allowed: bytes | None) -> None:
    """The API check of every service: ``Authorization: Bearer <token>`` matching one of the
    `allowed` hashes (the credentials whose scope covers the route). `HttpProblemError` 401
    without a token, 403 with one that is not allowed here (None entries, unset tokens, match
    nothing)."""
    auth = headers.get("authorization") or headers.get("Authorization") or ""
    token = auth[len(_BEARER) :].strip() if auth[: len(_BEARER)].lower() == _BEARER else ""
    if not token:
        raise HttpProblemError(401, "bearer token required")
    # Every hash is compared, so the time taken does not tell which credential came close.
    matches = [token_matches(expected, token) for expected in allowed]
    if not any(matches):
        raise HttpProblemError(403, "this token may not do this")


#: The scheme the OpenAPI descriptions declare; the check itself is `require_bearer`'s, so a
#: missing token is a problem document too (auto_error would answer FastAPI's own 403).
BEARER_SCHEME = HTTPBearer(auto_error=False, scheme_name="bearer")


#: The DAP parties' credentials (DAP-09 §3.1): either header, checked against the task's token
#: hash by the aggregator itself. As dependencies these only declare the schemes: a route
#: listing both accepts either.
DAP_AUTH_SCHEME = APIKeyHeader(name=DAP_AUTH_HEADER, auto_error=False, scheme_name="dap-auth")
DAP_CREDENTIALS: Final = (Security(DAP_AUTH_SCHEME), Security(BEARER_SCHEME))


class BearerAuth:
    """The credentials of a group of routes as a FastAPI dependency (`dependency`): a bearer
    token matching one of the `allowed` hashes (`require_bearer`)."""

    def __init__(self, *allowed: bytes | None) -> None:
        self.allowed = allowed

        async def authorize(
            request: Request,
            _: Annotated[HTTPAuthorizationCredentials | None, Security(BEARER_SCHEME)],
        ) -> None:
            self.check(request)

        self.dependency: Any = Security(authorize)

    def check(self, request: Request) -> None:
        """`HttpProblemError` 401 or 403 unless `request` carries an allowed token."""
        require_bearer(request.headers, *self.allowed)


async def presented_bearer(
    request: Request,
    _: Annotated[HTTPAuthorizationCredentials | None, Security(BEARER_SCHEME)],
) -> str | None:
    """The token a request carries (`presented_token`), as a dependency of routes whose
    callers are looked up by it (analysts, the split attester)."""
    return presented_token(request.headers)


def unauthorized() -> HTTPException:
    """401 for an unknown or missing token, alike: nothing tells a prober which tokens exist."""
    return HTTPException(401, "Unauthorized", headers={"WWW-Authenticate": "Bearer"})


def auth_headers(token: str) -> dict[str, str]:
    """Headers for an outgoing authenticated DAP request."""
    return {DAP_AUTH_HEADER: token}
