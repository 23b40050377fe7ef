"""The SDK's HTTP clients: devices, the simulator and the `sagg` CLI (`deploy`) reach the recipe
server, the attester and issuer, and the aggregators through them.

Server certificates are verified against the `shared.transport` policy's CA bundle, and every
request passes its URL check first: an ``http://`` aggregator, issuer or recipe server off the
host is refused (`httpx.UnsupportedProtocol`, a transport error like an unreachable server)
unless the policy allows insecure HTTP. DAP-09 §3 requires HTTPS.

- `http_client`: an `httpx.Client` (redirects included in the check; tests route it to
  in-process apps through httpx transports).
- `pooled_client`: a keep-alive HTTP/1.1 client for simulated populations (issue #13): every
  simulated device makes three or four requests, and httpx spends about 0.5 ms of CPU on
  each (its request and response models, hooks, httpcore's pool and h11) against about 0.03
  ms here (the standard library's `http.client` opens connections, and a request and its
  answer are exchanged by `_exchange`: `http.client`'s own took 0.09). It offers what the SDK uses
  (`HttpClient`), follows no redirect (as httpx by default) and raises httpx's exceptions, so
  callers handle one error vocabulary whichever client they were given.

Both satisfy `HttpClient`, the interface the SDK's classes take.
"""

from __future__ import annotations

import http.client
import json as json_module
import re
import select
import socket
import ssl
import threading
from collections.abc import Iterator, Mapping
from typing import Any, Protocol
from urllib.parse import urlencode, urlsplit

import httpx

from shared.transport import InsecureTransportError, TransportPolicy

__all__ = [
    "HttpClient",
    "HttpResponse",
    "PooledClient",
    "PooledResponse",
    "http_client",
    "pooled_client",
]


class HttpResponse(Protocol):
    """What the SDK reads of an answer (`httpx.Response` has it)."""

    @property
    def status_code(self) -> int: ...

    @property
    def headers(self) -> Mapping[str, str]: ...

    @property
    def content(self) -> bytes: ...

    @property
    def is_success(self) -> bool: ...

    def json(self) -> Any: ...


class HttpClient(Protocol):
    """What the SDK asks of a client (`httpx.Client` has it). Failures raise `httpx.HTTPError`."""

    def get(self, url: str, *, params: Mapping[str, str] | None = None) -> HttpResponse: ...

    def post(
        self,
        url: str,
        *,
        content: bytes | None = None,
        json: Any = None,
        headers: Mapping[str, str] | None = None,
    ) -> HttpResponse: ...

    def request(
        self,
        method: str,
        url: str,
        *,
        content: bytes | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> HttpResponse: ...

    def close(self) -> None: ...


def http_client(policy: TransportPolicy, **kwargs: Any) -> httpx.Client:
    """An `httpx.Client` under `policy`; `kwargs` (timeout, limits, ...) go to the client."""

    def check(request: httpx.Request) -> None:
        try:
            policy.check(str(request.url))
        except InsecureTransportError as exc:
            raise httpx.UnsupportedProtocol(str(exc), request=request) from None

    return httpx.Client(verify=policy.ssl_context, event_hooks={"request": [check]}, **kwargs)


def pooled_client(
    policy: TransportPolicy, *, timeout: float = 30.0, max_idle: int = 32
) -> PooledClient:
    """A `PooledClient` under `policy`, keeping up to `max_idle` idle connections a server."""
    return PooledClient(policy, timeout=timeout, max_idle=max_idle)


class _Headers(Mapping[str, str]):
    """Response headers, looked up without regard to case."""

    __slots__ = ("_items",)

    def __init__(self, items: list[tuple[str, str]]) -> None:
        self._items = {name.lower(): value for name, value in items}

    def __getitem__(self, name: str) -> str:
        return self._items[name.lower()]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)


class PooledResponse:
    """A whole answer of `PooledClient`."""

    __slots__ = ("content", "headers", "status_code")

    def __init__(self, status_code: int, headers: _Headers, content: bytes) -> None:
        self.status_code = status_code
        self.headers: Mapping[str, str] = headers
        self.content = content

    @property
    def is_success(self) -> bool:
        return 200 <= self.status_code < 300

    def json(self) -> Any:
        return json_module.loads(self.content)


_Connection = http.client.HTTPConnection
#: A reused idle connection the server closed in the meantime fails like this before any
#: answer: the request never reached the application, and is sent once more on a new one.
_STALE = (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError)
#: Characters no request line, header name or value may hold (request splitting).
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
#: http.client's bounds on an answer's head.
_MAX_LINE = 65536
_MAX_HEADERS = 100


def _exchange(
    conn: _Connection,
    method: str,
    host: str,
    target: str,
    body: bytes | None,
    headers: Mapping[str, str],
) -> tuple[int, list[tuple[str, str]], bytes, bool]:
    """One request on `conn` and its whole answer: (status, headers, body, whether the server
    closes the connection). `http.client` opens the connection (TCP_NODELAY, TLS with the
    policy's context and host name check); the request goes out in one send and the answer's
    head is parsed here, where `request` and `getresponse` cost three times the CPU (a send
    for the head and one for the body, a call a header, and the email package parsing the
    answer's head: 85-97 -> 25-32 µs a request, thread CPU against a local server)."""
    # As http.client: no content coding asked for (an absent Accept-Encoding allows any).
    lines = [f"{method} {target} HTTP/1.1", f"Host: {host}", "Accept-Encoding: identity"]
    if body is not None:
        lines.append(f"Content-Length: {len(body)}")
    lines += [f"{name}: {value}" for name, value in headers.items()]
    if " " in target or any(_CONTROL.search(line) for line in lines):
        # As http.client refuses them: a ValueError, the caller's mistake, not the network's.
        raise ValueError("control characters in the request line or a header")
    request = "\r\n".join(lines).encode("latin-1") + b"\r\n\r\n"
    if conn.sock is None:
        conn.connect()
    conn.sock.sendall(request + body if body else request)
    reader = conn.sock.makefile("rb")
    try:
        while True:
            status, answer_headers, http10 = _read_head(reader)
            if not 100 <= status < 200:
                break
        names = {name.lower(): value for name, value in answer_headers}
        connection = {token.strip() for token in names.get("connection", "").lower().split(",")}
        close = "close" in connection or (http10 and "keep-alive" not in connection)
        if method == "HEAD" or status in (204, 304):
            data = b""
        elif names.get("transfer-encoding", "").lower() == "chunked":
            data = _read_chunked(reader)
        elif "content-length" in names:
            length = int(names["content-length"])
            data = reader.read(length)
            if len(data) != length:
                raise http.client.IncompleteRead(data, length - len(data))
        else:
            data, close = reader.read(), True
    except ValueError as exc:
        raise http.client.HTTPException(f"malformed answer: {exc}") from None
    finally:
        reader.close()
    return status, answer_headers, data, close


def _read_head(reader: Any) -> tuple[int, list[tuple[str, str]], bool]:
    line = reader.readline(_MAX_LINE + 1)
    if not line:
        raise http.client.RemoteDisconnected("the server closed the connection")
    if len(line) > _MAX_LINE:
        raise http.client.LineTooLong("status line")
    version, _, rest = line.partition(b" ")
    if not version.startswith(b"HTTP/1."):
        raise http.client.BadStatusLine(repr(line))
    status = int(rest[:3])
    headers: list[tuple[str, str]] = []
    while True:
        line = reader.readline(_MAX_LINE + 1)
        if len(line) > _MAX_LINE:
            raise http.client.LineTooLong("header line")
        if line in (b"\r\n", b"\n", b""):
            return status, headers, version == b"HTTP/1.0"
        if line[:1] in (b" ", b"\t") and headers:
            # An obsolete folded line (RFC 9112 §5.2): the previous value goes on.
            name, value = headers[-1]
            headers[-1] = (name, f"{value} {line.decode('latin-1').strip()}")
            continue
        if len(headers) >= _MAX_HEADERS:
            raise http.client.HTTPException(f"more than {_MAX_HEADERS} headers")
        name, colon, value = line.decode("latin-1").partition(":")
        if not colon:
            raise http.client.HTTPException(f"malformed header line {line!r}")
        headers.append((name.strip(), value.strip()))


def _read_chunked(reader: Any) -> bytes:
    chunks: list[bytes] = []
    while True:
        line = reader.readline(_MAX_LINE + 1)
        if not line:
            raise http.client.IncompleteRead(b"".join(chunks))
        size = int(line.split(b";", 1)[0], 16)
        if size == 0:
            while reader.readline(_MAX_LINE + 1) not in (b"\r\n", b"\n", b""):
                pass  # trailers: nothing the SDK reads
            return b"".join(chunks)
        chunk = reader.read(size)
        if len(chunk) != size:
            raise http.client.IncompleteRead(chunk, size - len(chunk))
        chunks.append(chunk)
        reader.readline(_MAX_LINE + 1)


class PooledClient:
    """Keep-alive connections per origin, each used by one thread at a time (module docstring).

    An idle connection is checked before reuse (readable means the server closed it), and a
    request that fails on a reused one the way a connection closed while idle fails
    (`_STALE`) is sent again on a fresh connection, once."""

    def __init__(self, policy: TransportPolicy, *, timeout: float, max_idle: int) -> None:
        self._policy = policy
        self._timeout = timeout
        self._max_idle = max(1, max_idle)
        self._idle: dict[tuple[str, str], list[_Connection]] = {}
        #: Origin -> the policy's verdict (None: allowed), computed once per origin.
        self._verdicts: dict[tuple[str, str], InsecureTransportError | None] = {}
        self._lock = threading.Lock()
        self._closed = False

    def __enter__(self) -> PooledClient:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def get(self, url: str, *, params: Mapping[str, str] | None = None) -> PooledResponse:
        if params:
            url += ("&" if "?" in url else "?") + urlencode(params)
        return self.request("GET", url)

    def post(
        self,
        url: str,
        *,
        content: bytes | None = None,
        json: Any = None,
        headers: Mapping[str, str] | None = None,
    ) -> PooledResponse:
        if json is not None:
            content = json_module.dumps(json, separators=(",", ":")).encode()
            headers = {"Content-Type": "application/json", **(headers or {})}
        return self.request("POST", url, content=content, headers=headers)

    def request(
        self,
        method: str,
        url: str,
        *,
        content: bytes | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> PooledResponse:
        parts = urlsplit(url)
        origin = (parts.scheme.lower(), parts.netloc)
        host = parts.netloc.rpartition("@")[2]
        self._check(origin, url)
        target = parts.path or "/"
        if parts.query:
            target += "?" + parts.query
        body = b"" if content is None and method in ("POST", "PUT") else content
        conn, reused = self._take(origin, parts)
        while True:
            try:
                status, items, data, close = _exchange(
                    conn, method, host, target, body, headers or {}
                )
            except _STALE as exc:
                conn.close()
                if not reused:
                    raise httpx.ReadError(type(exc).__name__) from exc
                conn, reused = self._connect(origin, parts), False
                continue
            except (OSError, http.client.HTTPException) as exc:
                conn.close()
                raise _failure(exc) from exc
            break
        response = PooledResponse(status, _Headers(items), data)
        if close:
            conn.close()
        else:
            self._give_back(origin, conn)
        return response

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle = [c for conns in self._idle.values() for c in conns]
            self._idle.clear()
        for conn in idle:
            conn.close()

    def _check(self, origin: tuple[str, str], url: str) -> None:
        try:
            verdict = self._verdicts[origin]
        except KeyError:
            try:
                self._policy.check(url)
                verdict = None
            except InsecureTransportError as exc:
                verdict = exc
            self._verdicts[origin] = verdict
        if verdict is not None:
            raise httpx.UnsupportedProtocol(str(verdict)) from verdict

    def _take(self, origin: tuple[str, str], parts: Any) -> tuple[_Connection, bool]:
        while True:
            with self._lock:
                conns = self._idle.get(origin)
                conn = conns.pop() if conns else None
            if conn is None:
                return self._connect(origin, parts), False
            if _still_open(conn):
                return conn, True
            conn.close()

    def _connect(self, origin: tuple[str, str], parts: Any) -> _Connection:
        if self._closed:
            raise RuntimeError("the client is closed")
        host, port = parts.hostname or "", parts.port
        if origin[0] == "https":
            return http.client.HTTPSConnection(
                host, port, timeout=self._timeout, context=self._policy.ssl_context
            )
        if origin[0] != "http":
            raise httpx.UnsupportedProtocol(f"not an http(s) URL (scheme {origin[0]!r})")
        return http.client.HTTPConnection(host, port, timeout=self._timeout)

    def _give_back(self, origin: tuple[str, str], conn: _Connection) -> None:
        with self._lock:
            conns = self._idle.setdefault(origin, [])
            if not self._closed and len(conns) < self._max_idle:
                conns.append(conn)
                return
        conn.close()


def _still_open(conn: _Connection) -> bool:
    """An idle connection the server has not closed: nothing to read on it (a readable idle
    socket is at end of file, or carries bytes no request asked for)."""
    sock = conn.sock
    if sock is None:
        return False
    if isinstance(sock, ssl.SSLSocket) and sock.pending():
        return False
    # poll, not select: select refuses descriptors above FD_SETSIZE (1024), which a process
    # with many connections reaches, and every connection would then look closed.
    poller = select.poll()
    poller.register(sock, select.POLLIN)
    try:
        return not poller.poll(0)
    except OSError:
        return False


def _failure(exc: BaseException) -> httpx.HTTPError:
    """httpx's exception for what went wrong (the original is its cause, for `http_failure`)."""
    name = type(exc).__name__
    if isinstance(exc, socket.timeout | TimeoutError):
        return httpx.ReadTimeout(name)
    if isinstance(exc, http.client.HTTPException):
        return httpx.RemoteProtocolError(name)
    if isinstance(exc, ConnectionRefusedError | socket.gaierror | ssl.SSLError):
        return httpx.ConnectError(name)
    return httpx.ReadError(name)
