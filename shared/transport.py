"""Transport policy of every outgoing HTTP client: verified TLS, and no plain HTTP off the host.

DAP-09 §3 requires HTTPS between all parties, and Privacy Pass (RFC 9576 §3, §4.4) assumes
authenticated channels to the issuer and attester. sagg's clients therefore verify server
certificates against a configured CA bundle (or the system's), and refuse an ``http://`` URL
whose host is not loopback unless the operator explicitly allows it (a compose network, the
DAP interop harness, which uses plain HTTP between containers). Loopback stays allowed: a
packet to 127.0.0.1 or ::1 never leaves the host.

Pure: only URL parsing and `ssl`; each layer's HTTP client factory (`services.common.http`,
`client_sdk.http`) applies this policy to every request it sends, redirects included, and
`http_failure` names what went wrong for both in one line.
"""

from __future__ import annotations

import ipaddress
import ssl
from dataclasses import dataclass
from functools import cached_property
from urllib.parse import urlsplit

__all__ = [
    "InsecureTransportError",
    "TransportPolicy",
    "check_url",
    "http_failure",
    "is_loopback_host",
]


class InsecureTransportError(ValueError):
    """A URL the policy refuses; the message names the host, never the path or credentials."""


def is_loopback_host(host: str) -> bool:
    """True for ``localhost`` (RFC 6761 §6.3 reserves it and its subdomains for loopback)
    and for addresses in 127.0.0.0/8 or ::1."""
    name = host.strip("[]").rstrip(".").lower()
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def check_url(url: str, *, allow_insecure_http: bool = False) -> str:
    """`url` itself if the policy lets a client send to it, else InsecureTransportError.

    https is always fine (the client verifies the certificate); http only to a loopback host
    or with `allow_insecure_http`; anything else is refused.
    """
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    host = parts.hostname or ""
    if scheme == "https" and host:
        return url
    if scheme != "http" or not host:
        raise InsecureTransportError(f"not an http(s) URL with a host (scheme {scheme!r})")
    if allow_insecure_http or is_loopback_host(host):
        return url
    raise InsecureTransportError(
        f"plain http:// to {host} is refused: use https://, or allow insecure HTTP explicitly"
    )


@dataclass(frozen=True)
class TransportPolicy:
    """How a client reaches its peers.

    `ca_file`: PEM bundle of the CAs whose server certificates are accepted (None: the
    system's default trust store); `allow_insecure_http`: also send to ``http://`` URLs of
    non-loopback hosts.
    """

    ca_file: str | None = None
    allow_insecure_http: bool = False

    def check(self, url: str) -> str:
        return check_url(url, allow_insecure_http=self.allow_insecure_http)

    @cached_property
    def ssl_context(self) -> ssl.SSLContext:
        """Certificate and host name verification against exactly `ca_file` (or the system
        store): one context per policy, shared by the clients made from it.

        OSError/ssl.SSLError when the bundle cannot be read; callers load it at startup."""
        return ssl.create_default_context(cafile=self.ca_file)


def http_failure(exc: BaseException) -> str:
    """What went wrong with a request, in a few words for a one-line error: a refused
    certificate or a URL the policy refused (the clients raise their own error with it as the
    context) are named, anything else by its type (messages may quote data)."""
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, ssl.SSLCertVerificationError):
            return f"TLS certificate verification failed ({cause.verify_message})"
        if isinstance(cause, InsecureTransportError):
            return str(cause)
        cause = cause.__cause__ or cause.__context__
    return type(exc).__name__
