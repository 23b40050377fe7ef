"""Bounded requests on every route of every service (issue 12 item 5), through real uvicorn
servers with the options the entry points use (`services.common.serving`), played by a raw
socket client: an oversized body (declared or chunked) is answered 413 without the rest being
read, and a client trickling its headers or its body is cut off with 408."""

from __future__ import annotations

import asyncio
import re
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from fastapi import FastAPI
from fastapi.routing import APIRoute, iter_route_contexts
from fastapi.testclient import TestClient
from uvicorn.server import ServerState

from client_sdk.manufacturer import ManufacturerCA
from services.aggregator.app import create_app as create_aggregator
from services.common import entry
from services.common.limits import ServerLimits
from services.common.raw_routes import RawRoute
from services.common.serving import TimedHttpToolsProtocol, server_options
from shared.dap.ids import TaskId
from shared.dap.messages import MEDIA_REPORT
from shared.dap.problems import MEDIA_PROBLEM, ProblemType
from shared.dap.sizes import max_report_len
from tests.adversaries.harness import NOW
from tests.aggregator import helpers
from tests.fuzz.apps import COLLECTOR_ADMIN, collector_app, recipe_server_app, token_issuer_app

#: Small for the aggregator, so that a chunked body past it is quick to send.
AGGREGATOR_LIMIT = 64 * 1024


@contextmanager
def served(app: FastAPI, limits: ServerLimits) -> Iterator[int]:
    """`app` behind uvicorn on a free loopback port, as `run_service` would serve it."""
    config = uvicorn.Config(
        app,
        host="127.0.0.1",
        port=0,
        log_config=None,
        log_level="warning",
        access_log=False,
        **server_options(limits),
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        for _ in range(600):
            if server.started:
                break
            time.sleep(0.05)
        assert server.started, "uvicorn did not start"
        yield server.servers[0].sockets[0].getsockname()[1]
    finally:
        server.should_exit = True
        thread.join(30)


def _read_answer(sock: socket.socket) -> tuple[int, dict[str, str], bytes]:
    """The whole answer up to the server closing the connection."""
    data = b""
    while True:
        try:
            part = sock.recv(65536)
        except TimeoutError:
            raise AssertionError(
                f"no answer and no close: the server waits for the rest ({data[:120]!r})"
            ) from None
        if not part:
            break
        data += part
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    assert lines[0].startswith("HTTP/1.1 "), data[:200]
    headers = dict(
        (name.strip().lower(), value.strip())
        for name, _, value in (line.partition(":") for line in lines[1:])
    )
    return int(lines[0].split()[1]), headers, body


def _request(port: int, head: str, *chunks: bytes) -> tuple[int, dict[str, str], bytes]:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(head.encode("latin-1"))
        for chunk in chunks:
            sock.sendall(chunk)
        return _read_answer(sock)


def _chunked(total: int) -> list[bytes]:
    """`total` bytes of body in 64 KiB chunks, without the final empty chunk."""
    out = []
    while total > 0:
        size = min(total, 65536)
        out.append(f"{size:x}\r\n".encode() + b"a" * size + b"\r\n")
        total -= size
    return out


def _routes(app: FastAPI, task_id: str) -> list[tuple[str, str]]:
    """(method, path) of every route, path parameters filled in."""
    out = []
    for route in iter_route_contexts(app.routes):
        if not isinstance(route.original_route, APIRoute):
            continue
        path = re.sub(
            r"\{([^}:]+)(?::[^}]*)?\}",
            lambda m: task_id if m.group(1) == "task_id" else "AAAAAAAAAAAAAAAAAAAAAA",
            str(route.path),
        )
        out += [(method, path) for method in sorted((route.methods or set()) - {"HEAD"})]
    # Routes answered before FastAPI's stack (`services.common.raw_routes`) have the cap too.
    raw: dict[str, RawRoute] = getattr(app, "raw_routes", {})
    return out + [(route.method, path) for path, route in raw.items()]


def _limit(app: FastAPI) -> int:
    (limit,) = [
        int(str(m.kwargs["max_bytes"])) for m in app.user_middleware if "max_bytes" in m.kwargs
    ]
    return limit


def _check_413(
    status: int, headers: dict[str, str], body: bytes, path: str, task_id: str, dap: bool
) -> None:
    assert status == 413, (path, status, body[:300])
    assert headers["content-type"].startswith(MEDIA_PROBLEM), headers
    assert headers["connection"] == "close", headers
    if dap and path.startswith("/tasks/"):
        assert f'"taskid":"{task_id}"'.encode() in body, body
        assert ProblemType.INVALID_MESSAGE.urn.encode() in body, body


def _aggregator(tmp: Path, role: str, task: helpers.TaskParams) -> FastAPI:
    url = f"sqlite:///{tmp / f'{role}.db'}"
    app = create_aggregator(helpers.settings(url, max_request_body_bytes=AGGREGATOR_LIMIT))
    helpers.provision(TestClient(app), task, role)
    return app


def _services(tmp: Path, task: helpers.TaskParams) -> dict[str, FastAPI]:
    return {
        "leader": _aggregator(tmp, "leader", task),
        "helper": _aggregator(tmp, "helper", task),
        "collector": collector_app(tmp),
        "recipe server": recipe_server_app(tmp),
        "token issuer": token_issuer_app(tmp, ManufacturerCA.generate(now=NOW)),
    }


@pytest.mark.parametrize(
    "service", ["leader", "helper", "collector", "recipe server", "token issuer"]
)
def test_oversized_bodies_get_413_unread_on_every_route(tmp_path: Path, service: str) -> None:
    task = helpers.TaskParams()
    tid = task.task_id.to_b64url()
    app = _services(tmp_path, task)[service]
    limit = _limit(app)
    dap = service in ("leader", "helper")
    routes = _routes(app, tid)
    assert routes
    with served(app, ServerLimits()) as port:
        for method, path in routes:
            # A body declared far beyond the cap and never sent: the answer comes anyway.
            head = f"{method} {path} HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
            answer = _request(port, head + f"Content-Length: {1 << 32}\r\n\r\n")
            _check_413(*answer, path, tid, dap)
            # A chunked body one byte past the cap, never finished.
            answer = _request(
                port, head + "Transfer-Encoding: chunked\r\n\r\n", *_chunked(limit + 1)
            )
            _check_413(*answer, path, tid, dap)


def test_upload_cap_is_the_tasks_largest_report(tmp_path: Path) -> None:
    """The leader's upload route (in front of FastAPI) caps at the task's exact largest
    report: a 4 GiB declared body, or one byte past the cap chunked, is 413 unread."""
    task = helpers.TaskParams()
    tid = task.task_id.to_b64url()
    cap = max_report_len(task.prio3, token=False, binding=False)
    app = _aggregator(tmp_path, "leader", task)
    head = f"PUT /tasks/{tid}/reports HTTP/1.1\r\nHost: t\r\nContent-Type: {MEDIA_REPORT}\r\n"
    with served(app, ServerLimits()) as port:
        answer = _request(port, head + f"Content-Length: {4 << 30}\r\n\r\n")
        _check_413(*answer, f"/tasks/{tid}/reports", tid, True)
        answer = _request(port, head + "Transfer-Encoding: chunked\r\n\r\n", *_chunked(cap + 1))
        _check_413(*answer, f"/tasks/{tid}/reports", tid, True)
        # Exactly the cap is read (and refused as a malformed report, not as too large).
        status, _, body = _request(
            port, head + f"Content-Length: {cap}\r\nConnection: close\r\n\r\n", b"\0" * cap
        )
        assert status == 400, body


# --- slowloris -----------------------------------------------------------------------------------


def _trickle(sock: socket.socket, data: bytes) -> None:
    """Send `data` a byte every 50 ms until it is all sent or the server closes."""
    for byte in data:
        try:
            sock.sendall(bytes([byte]))
        except OSError:
            return
        time.sleep(0.05)


SLOW = ServerLimits(header_timeout_s=0.5, body_timeout_s=0.5)


@pytest.fixture(scope="module")
def slow_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    with served(collector_app(tmp_path_factory.mktemp("slow")), SLOW) as port:
        yield port


def test_slow_headers_are_cut_off(slow_server: int) -> None:
    with socket.create_connection(("127.0.0.1", slow_server), timeout=30) as sock:
        # 300 header bytes at 20 per second would take 15 s; the server allows 0.5 s.
        _trickle(sock, b"GET /healthz HTTP/1.1\r\nHost: t\r\n" + b"X-Slow: " + b"a" * 260)
        status, headers, _ = _read_answer(sock)
    assert status == 408
    assert headers["content-type"].startswith(MEDIA_PROBLEM)


def test_slow_body_is_cut_off(slow_server: int) -> None:
    with socket.create_connection(("127.0.0.1", slow_server), timeout=30) as sock:
        sock.sendall(
            f"PUT /internal/tasks/{TaskId.random().to_b64url()} HTTP/1.1\r\n".encode()
            + b"Host: t\r\nContent-Type: application/json\r\n"
            + f"Authorization: Bearer {COLLECTOR_ADMIN}\r\n".encode()
            + b"Content-Length: 300\r\n\r\n"
        )
        _trickle(sock, b"a" * 300)
        status, _, _ = _read_answer(sock)
    assert status == 408


def test_silent_connection_is_closed(slow_server: int) -> None:
    with socket.create_connection(("127.0.0.1", slow_server), timeout=30) as sock:
        status, _, _ = _read_answer(sock)
    assert status == 408


def test_a_prompt_keep_alive_client_is_served(slow_server: int) -> None:
    """The deadlines are per request: a client that sends promptly keeps its connection."""
    with socket.create_connection(("127.0.0.1", slow_server), timeout=30) as sock:
        for _ in range(3):
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n")
            head = b""
            while b"\r\n\r\n" not in head:
                head += sock.recv(65536)
            assert head.startswith(b"HTTP/1.1 200"), head
            time.sleep(0.3)


def test_entry_point_serves_with_the_limits(monkeypatch: pytest.MonkeyPatch) -> None:
    """`python -m services.<name>` passes the service's limits to uvicorn."""
    seen: list[uvicorn.Config] = []

    def served(self: uvicorn.Server, sockets: list[socket.socket] | None = None) -> None:
        seen.append(self.config)
        self.started = True

    monkeypatch.setattr(uvicorn.Server, "run", served)
    limits = ServerLimits(limit_concurrency=7, header_timeout_s=1.5, body_timeout_s=2.5)
    entry.run_service(object(), host="127.0.0.1", port=1, log_level="info", limits=limits)
    (config,) = seen
    assert config.limit_concurrency == 7
    protocol = config.http
    assert isinstance(protocol, type) and issubclass(protocol, TimedHttpToolsProtocol)
    assert (protocol.header_timeout_s, protocol.body_timeout_s) == (1.5, 2.5)


def test_past_the_concurrency_limit_the_answer_is_503_with_retry_after(tmp_path: Path) -> None:
    """Connections held open up to `limit_concurrency`: the next request is refused at once
    with a problem document and Retry-After, not queued."""
    limits = ServerLimits(limit_concurrency=3)
    with served(collector_app(tmp_path), limits) as port:
        held = [socket.create_connection(("127.0.0.1", port), timeout=30) for _ in range(2)]
        try:
            status, headers, body = _request(port, "GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n")
        finally:
            for sock in held:
                sock.close()
    assert status == 503, body
    assert headers["retry-after"] == "1"
    assert headers["content-type"].startswith(MEDIA_PROBLEM)


class _RecordingTransport(asyncio.Transport):
    """A connection's transport that records each write."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[bytes] = []
        self.closed = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.writes.append(bytes(data))

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"peername": ("127.0.0.1", 1), "sockname": ("127.0.0.1", 2)}.get(name, default)


def test_an_answer_goes_out_in_one_write() -> None:
    """Uvicorn writes an answer's head at its start and its body after: the protocol sends
    both in one write (one send, not two), and an app failing after its start still gets its
    head out before the connection closes."""

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": [
            (b"content-type", b"text/plain"), (b"content-length", b"5")]})  # fmt: skip
        if scope["path"] == "/fails":
            raise RuntimeError("after the start")
        await send({"type": "http.response.body", "body": b"hello"})

    async def exchange(path: str) -> _RecordingTransport:
        config = uvicorn.Config(app, **server_options(ServerLimits()), log_level="critical")
        config.load()
        protocol_class = config.http_protocol_class
        assert issubclass(protocol_class, TimedHttpToolsProtocol)
        protocol = protocol_class(config=config, server_state=ServerState(), app_state={})
        transport = _RecordingTransport()
        protocol.connection_made(transport)
        protocol.data_received(f"GET {path} HTTP/1.1\r\nHost: t\r\n\r\n".encode())
        for _ in range(100):
            if transport.writes and (transport.closed or transport.writes[-1].endswith(b"hello")):
                break
            await asyncio.sleep(0.01)
        protocol.connection_lost(None)
        return transport

    answered = asyncio.run(exchange("/ok"))
    (write,) = answered.writes
    assert write.startswith(b"HTTP/1.1 200 OK\r\n") and write.endswith(b"\r\n\r\nhello")
    failed = asyncio.run(exchange("/fails"))
    assert failed.closed and failed.writes[0].startswith(b"HTTP/1.1 200 OK\r\n")
