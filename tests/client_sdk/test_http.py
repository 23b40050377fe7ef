"""`client_sdk.http.PooledClient` against the standard library's HTTP/1.1 server: what the SDK
reads of answers, keep-alive reuse, a connection the server closed while idle, and the
transport policy and failures as httpx's exceptions."""

from __future__ import annotations

import json
import resource
import socket
import ssl
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

from client_sdk.http import PooledClient, pooled_client
from deploy.tls import ensure_local_tls
from shared.transport import TransportPolicy, http_failure


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, *_: object) -> None:
        pass

    def _answer(self, status: int, body: bytes, close: bool = False) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("X-Peer-Port", str(self.client_address[1]))
        self.send_header("Content-Length", str(len(body)))
        if close:
            self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)
        if close:
            self.close_connection = True

    def do_GET(self) -> None:
        self.server.ports.add(self.client_address[1])
        self._answer(200, json.dumps({"path": self.path}).encode(), close="close" in self.path)
        if "drop" in self.path:
            # Closed without a word, as a server's keep-alive timeout closes an idle one.
            self.close_connection = True

    def do_POST(self) -> None:
        self.server.ports.add(self.client_address[1])
        body = self.rfile.read(int(self.headers["Content-Length"]))
        echo = {"body": body.decode(), "type": self.headers.get("Content-Type")}
        self._answer(201, json.dumps(echo).encode())


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.ports: set[int] = set()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


@pytest.fixture
def server() -> Iterator[_Server]:
    srv = _Server()
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield srv
    srv.shutdown()
    srv.server_close()


def test_answers_bodies_and_headers(server: _Server) -> None:
    with pooled_client(TransportPolicy()) as client:
        got = client.get(f"{server.url}/a", params={"task_id": "x y"})
        assert (got.status_code, got.is_success) == (200, True)
        assert got.json() == {"path": "/a?task_id=x+y"}
        assert got.headers["content-type"] == got.headers.get("Content-Type") == "application/json"
        posted = client.post(f"{server.url}/b", json={"k": 1})
        assert posted.status_code == 201
        assert posted.json() == {"body": '{"k":1}', "type": "application/json"}
        raw = client.request("PUT", f"{server.url}/c", content=b"\x00\x01", headers={"A": "b"})
        assert raw.status_code == 501  # the server has no PUT: its answer is passed on
        assert not raw.is_success


def test_keeps_connections_alive_and_replaces_closed_ones(server: _Server) -> None:
    with PooledClient(TransportPolicy(), timeout=5.0, max_idle=4) as client:
        for _ in range(5):
            client.post(f"{server.url}/p", content=b"x")
        assert len(server.ports) == 1  # one connection for five requests
        client.get(f"{server.url}/close")  # the server closes after answering
        client.get(f"{server.url}/after")
        assert len(server.ports) == 2


@pytest.mark.parametrize("checked", [True, False])
def test_a_connection_the_server_closed_while_idle_is_replaced(
    server: _Server, checked: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found closed before reuse, or (`checked` off) failing as it is reused: either way the
    request goes out once more on a fresh connection."""
    if not checked:
        monkeypatch.setattr("client_sdk.http._still_open", lambda _: True)
    with PooledClient(TransportPolicy(), timeout=5.0, max_idle=4) as client:
        first = client.get(f"{server.url}/drop")
        second = client.get(f"{server.url}/two")
        assert first.status_code == second.status_code == 200
        assert first.headers["x-peer-port"] != second.headers["x-peer-port"]


def test_refusals_and_failures_are_httpx_errors() -> None:
    client = pooled_client(TransportPolicy())
    with pytest.raises(httpx.UnsupportedProtocol, match=r"plain http:// to example\.com"):
        client.get("http://example.com/x")
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    with pytest.raises(httpx.ConnectError):
        client.get(f"http://127.0.0.1:{port}/")
    client.close()
    with pytest.raises(RuntimeError, match="closed"):
        client.get(f"http://127.0.0.1:{port}/")


def test_https_is_verified_against_the_policy_ca(tmp_path: Path) -> None:
    trusted = ensure_local_tls(tmp_path / "a", ["server"], [])
    other = ensure_local_tls(tmp_path / "b", [], [])
    srv = _Server()
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(trusted.certs["server"].cert_file, trusted.certs["server"].key_file)
    srv.socket = context.wrap_socket(srv.socket, server_side=True)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    url = f"https://localhost:{srv.server_address[1]}/tls"
    try:
        with pooled_client(TransportPolicy(str(trusted.ca_file))) as client:
            assert client.get(url).json() == {"path": "/tls"}
        with (
            pooled_client(TransportPolicy(str(other.ca_file))) as client,
            pytest.raises(httpx.ConnectError) as refused,
        ):
            client.get(url)
        assert http_failure(refused.value).startswith("TLS certificate verification failed")
    finally:
        srv.shutdown()
        srv.server_close()


def test_connections_are_reused_above_the_select_limit(server: _Server) -> None:
    """With more than FD_SETSIZE (1024) descriptors open, as a busy simulator or a long test
    process has, idle connections are still found open and reused."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 1100:
        pytest.skip(f"the descriptor limit ({hard}) is below the select limit")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 1100), hard))
    held = [socket.socket() for _ in range(1030)]
    try:
        with PooledClient(TransportPolicy(), timeout=5.0, max_idle=4) as client:
            for _ in range(3):
                client.post(f"{server.url}/p", content=b"x")
        assert len(server.ports) == 1
    finally:
        for s in held:
            s.close()
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def _canned(answers: list[bytes]) -> tuple[str, list[bytes], threading.Thread]:
    """A server on one connection answering its requests with `answers` in turn (closing
    after the last), recording each request as received: its URL, the requests, the thread."""
    listener = socket.create_server(("127.0.0.1", 0))
    requests: list[bytes] = []

    def serve() -> None:
        conn, _ = listener.accept()
        with conn, listener:
            pending = b""
            for answer in answers:
                while b"\r\n\r\n" not in pending:
                    pending += conn.recv(65536)
                head, _, pending = pending.partition(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n")[1:]:
                    name, _, value = line.partition(b":")
                    if name.lower() == b"content-length":
                        length = int(value)
                while len(pending) < length:
                    pending += conn.recv(65536)
                requests.append(head + b"\r\n\r\n" + pending[:length])
                pending = pending[length:]
                conn.sendall(answer)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return f"http://127.0.0.1:{listener.getsockname()[1]}", requests, thread


def test_answers_in_every_framing_are_read_whole() -> None:
    """Chunked (with an extension and a trailer), a length, no body (204), a folded header,
    an interim 100 before the answer, and HTTP/1.0 read to the close."""
    url, requests, thread = _canned(
        [
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nX-A: 1\r\n\r\n"
            b"4;ext=1\r\nabcd\r\n3\r\nefg\r\n0\r\nX-Trailer: t\r\n\r\n",
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\nContent-Length: 2\r\n"
            b"X-Folded: one\r\n two\r\n\r\nhi",
            b"HTTP/1.1 204 No Content\r\nConnection: keep-alive\r\n\r\n",
            b"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\nuntil the end",
        ]
    )
    with PooledClient(TransportPolicy(), timeout=5.0, max_idle=4) as client:
        chunked = client.get(f"{url}/chunked")
        assert (chunked.status_code, chunked.content, chunked.headers["x-a"]) == (
            200,
            b"abcdefg",
            "1",
        )
        created = client.post(f"{url}/p", content=b"body", headers={"X-Device": "d"})
        assert (created.status_code, created.content) == (201, b"hi")
        assert created.headers["x-folded"] == "one two"
        assert client.get(f"{url}/empty").content == b""
        assert client.get(f"{url}/old").content == b"until the end"
    thread.join(5)
    host = url.removeprefix("http://").encode()
    assert requests[0].startswith(b"GET /chunked HTTP/1.1\r\nHost: " + host + b"\r\n")
    assert b"\r\nContent-Length: 4\r\nX-Device: d\r\n\r\nbody" in requests[1]
    assert requests[1].startswith(b"POST /p HTTP/1.1\r\n")


def test_malformed_answers_and_header_injection_are_refused() -> None:
    url, _, thread = _canned([b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort"])
    with PooledClient(TransportPolicy(), timeout=5.0, max_idle=4) as client:
        with pytest.raises(httpx.RemoteProtocolError):
            client.get(f"{url}/cut")  # the connection closes five bytes short
        with pytest.raises(ValueError):
            client.post(f"{url}/x", content=b"", headers={"X-A": "b\r\nX-Injected: 1"})
    thread.join(5)
    url, _, thread = _canned([b"SMTP ready\r\n\r\n"])
    with (
        PooledClient(TransportPolicy(), timeout=5.0, max_idle=4) as client,
        pytest.raises(httpx.RemoteProtocolError),
    ):
        client.get(f"{url}/not-http")
    thread.join(5)
