"""The services' one way to make an outgoing HTTP client (leader -> helper, collector -> leader,
recipe server -> aggregators and collector, aggregators -> token issuer directory, attester ->
issuer), under the `shared.transport` policy from the service's TLS settings.

Every request, redirects included, passes the URL check in an event hook, so a task or recipe
naming an ``http://`` peer off the host fails like an unreachable peer does
(`httpx.UnsupportedProtocol`, a `httpx.TransportError`) instead of sending shares in the clear.
"""

from __future__ import annotations

import os
from typing import Any

import httpx
from pydantic import BaseModel, model_validator

from shared.transport import InsecureTransportError, TransportPolicy

__all__ = ["TlsSettings", "async_http_client", "http_client"]


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
