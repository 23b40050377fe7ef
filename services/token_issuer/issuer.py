"""The Issuer role (RFC 9576 §3.5.2, RFC 9578 §4, §6.2), independent of HTTP.

It holds the signing keys and nothing about devices: requests reach it only through the
attester (split model: over an authenticated channel; joint model: a call in one process),
and a TokenRequest carries a blinded message and one byte of key id, so the issuer cannot tell
which device asked or link a request to the token it yields (RFC 9576 §3.3).
"""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client import Counter

from services.common.clock import Clock
from services.common.metric_children import child
from services.token_issuer.keys import KeyRing, KeyStore
from shared.codec import DecodeError
from shared.privacypass.issuance import IssuanceError, issue
from shared.privacypass.messages import TokenRequest

__all__ = ["DirectoryDocument", "IssuanceError", "IssuerService"]


@dataclass(frozen=True, slots=True)
class DirectoryDocument:
    body: bytes
    #: Seconds a client may cache it: until the next key is published or retired.
    max_age: int


class IssuerService:
    def __init__(
        self,
        keys: KeyStore,
        clock: Clock,
        request_uri: str,
        max_age_cap: int = 86400,
        *,
        issued: Counter | None = None,
        refused: Counter | None = None,
    ) -> None:
        self._keys = keys
        self._clock = clock
        self._request_uri = request_uri
        self._max_age_cap = max_age_cap
        #: Tokens issued by key epoch; refused requests by `IssuanceError.reason`.
        self._issued = issued
        self._refused = refused

    def ring(self) -> KeyRing:
        return self._keys.ring()

    def directory(self) -> DirectoryDocument:
        """The directory (RFC 9578 §4), cacheable until the key ring next changes."""
        now = self._clock.now()
        ring = self._keys.ring()
        max_age = max(0, min(self._max_age_cap, ring.valid_until - now))
        return DirectoryDocument(ring.directory(self._request_uri).encode(), max_age)

    def issue(self, body: bytes) -> bytes:
        """Answer one encoded TokenRequest with an encoded TokenResponse (RFC 9578 §6.2).

        Raises `IssuanceError` (HTTP 422) for a malformed request, a token type other than 2,
        a wrong size, or a truncated key id naming no key currently accepted for issuance.
        """
        try:
            response = self._issue(body)
        except IssuanceError as exc:
            if self._refused is not None:
                self._refused.labels(reason=exc.reason).inc()
            raise
        return response

    def _issue(self, body: bytes) -> bytes:
        try:
            request = TokenRequest.decode(body)
        except DecodeError as exc:
            raise IssuanceError(str(exc), "malformed") from None
        key = self._keys.ring().for_issuance(request.truncated_token_key_id, self._clock.now())
        if key is None:
            raise IssuanceError("unknown token key id", "unknown_key_id")
        response = issue(key.key, request).encode()
        if self._issued is not None:
            child(self._issued, str(key.epoch)).inc()
        return response
