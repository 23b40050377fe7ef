"""The SDK's one way to make an HTTP client: devices, the simulator and the `sagg` CLI
(`deploy`) reach the recipe server, the attester and issuer, and the aggregators through it.

Server certificates are verified against the `shared.transport` policy's CA bundle, and every
request, redirects included, passes its URL check first: an ``http://`` aggregator, issuer or
recipe server off the host is refused (`httpx.UnsupportedProtocol`, a transport error like an
unreachable server) unless the policy allows insecure HTTP. DAP-09 §3 requires HTTPS.
"""

from __future__ import annotations

from typing import Any

import httpx

from shared.transport import InsecureTransportError, TransportPolicy

__all__ = ["http_client"]


def http_client(policy: TransportPolicy, **kwargs: Any) -> httpx.Client:
    """An `httpx.Client` under `policy`; `kwargs` (timeout, limits, ...) go to the client."""

    def check(request: httpx.Request) -> None:
        try:
            policy.check(str(request.url))
        except InsecureTransportError as exc:
            raise httpx.UnsupportedProtocol(str(exc), request=request) from None

    return httpx.Client(verify=policy.ssl_context, event_hooks={"request": [check]}, **kwargs)
