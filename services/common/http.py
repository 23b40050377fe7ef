"""The services' one way to make an outgoing HTTP client (leader -> helper, collector -> leader,
recipe server -> aggregators and collector, aggregators -> token issuer directory, attester ->
issuer), under the `shared.transport` policy from the service's TLS settings.

Every request, redirects included, passes the URL check in an event hook, so a task or recipe
naming an ``http://`` peer off the host fails like an unreachable peer does
(`httpx.UnsupportedProtocol`, a `httpx.TransportError`) instead of sending shares in the clear.
"""

from __future__ import annotations

import email.utils
import os
import time
from typing import Any, Final

import httpx
from pydantic import BaseModel, model_validator

from shared.transport import InsecureTransportError, TransportPolicy

__all__ = [
    "MAX_RETRY_AFTER_S",
    "TlsSettings",
    "async_http_client",
    "http_client",
    "parse_retry_after",
]


class TlsSettings(BaseModel):
    """The transport settings every service has (mixed into its `BaseSettings`)."""

    #: PEM certificate chain and private key to serve HTTPS with; unset serves plain HTTP.
    tls_cert_file: str | None = None
    tls_key_file: str | None = None
    #: PEM bundle of the CAs outgoing requests trust; unset: the system's trust store.
    tls_ca_file: str | None = None
    #: Also send to plain ``http://`` URLs of hosts other than loopback.
    allow_insecure_http: bool = False

    @model_validator(mode="after")
    def _cert_and_key_together(self) -> TlsSettings:
        if (self.tls_cert_file is None) != (self.tls_key_file is None):
            raise ValueError("tls_cert_file and tls_key_file must be set together")
        # Named now, at settings time: a failure inside uvicorn is logged without its message.
        for name in ("tls_cert_file", "tls_key_file", "tls_ca_file"):
            path = getattr(self, name)
            if path is not None and not os.path.isfile(path):
                raise ValueError(f"{name}: no such file")
        return self

    @property
    def transport(self) -> TransportPolicy:
        return TransportPolicy(self.tls_ca_file, self.allow_insecure_http)


def _refuse(policy: TransportPolicy, request: httpx.Request) -> None:
    try:
        policy.check(str(request.url))
    except InsecureTransportError as exc:
        raise httpx.UnsupportedProtocol(str(exc), request=request) from None


def http_client(policy: TransportPolicy, **kwargs: Any) -> httpx.Client:
    """An `httpx.Client` that verifies TLS against the policy's CAs and refuses what it refuses;
    `kwargs` (timeout, limits, ...) go to the client."""

    def check(request: httpx.Request) -> None:
        _refuse(policy, request)

    return httpx.Client(verify=policy.ssl_context, event_hooks={"request": [check]}, **kwargs)


def async_http_client(policy: TransportPolicy, **kwargs: Any) -> httpx.AsyncClient:
    """The `httpx.AsyncClient` counterpart of `http_client`."""

    async def check(request: httpx.Request) -> None:
        _refuse(policy, request)

    return httpx.AsyncClient(verify=policy.ssl_context, event_hooks={"request": [check]}, **kwargs)


#: The longest wait a peer's Retry-After is obeyed for: a bogus value must not park a job (a
#: helper's aggregation job at the leader, a collection job at the collector) indefinitely.
MAX_RETRY_AFTER_S: Final = 3600.0


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """Retry-After as seconds from now, at most `MAX_RETRY_AFTER_S`: delay-seconds or an
    HTTP-date (RFC 9110 §10.2.3); None when absent or unreadable."""
    if value is None:
        return None
    value = value.strip()
    if value.isdigit():
        return min(float(value), MAX_RETRY_AFTER_S)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        return None
    wait = when.timestamp() - (time.time() if now is None else now)
    return min(max(0.0, wait), MAX_RETRY_AFTER_S)
