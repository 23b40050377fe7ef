"""Uvicorn's options for every service: the concurrency cap and read timeouts against slowloris.

Uvicorn bounds idle keep-alive connections (``timeout_keep_alive``) but not the time a client
may take to send a request: a client trickling its header block or its body a byte at a time
holds a connection, a task and (for the body) a buffer for as long as it likes, and a few
thousand such clients hold every slot that ``limit_concurrency`` allows (the slowloris and slow
POST attacks). `TimedHttpToolsProtocol` adds the two timeouts uvicorn lacks:

- the header block must be complete within ``header_timeout_s`` of the request's first byte, or
  of the connection's opening (a connection that sends nothing is closed too);
- the body must be complete within ``body_timeout_s`` of the header block, in total: a body that
  keeps trickling is cut off even though each byte arrives in time.

When one expires before the answer has started, the client gets a 408 problem document and the
connection is closed; after that, the connection is just closed. Past ``limit_concurrency``
uvicorn refuses requests with a bare 503; here it is a problem document with ``Retry-After``,
like every other "try again later" of sagg. `server_options` gives the
keyword arguments both entry points (`services.common.entry`, `services.aggregator.server`) pass
to uvicorn.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from starlette.types import Receive, Scope, Send
from uvicorn.protocols.http.flow_control import service_unavailable
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle

from services.common.limits import ServerLimits
from shared.dap.problems import MEDIA_PROBLEM

__all__ = ["TimedHttpToolsProtocol", "server_options"]


def _problem(status: int, title: str) -> bytes:
    return json.dumps(
        {"type": "about:blank", "title": title, "status": status}, separators=(",", ":")
    ).encode()


#: Seconds a client refused for the concurrency limit is told to wait.
BUSY_RETRY_AFTER_S = 1


async def _busy(scope: Scope, receive: Receive, send: Send) -> None:
    body = _problem(503, "Service Unavailable")
    headers = [
        (b"content-type", MEDIA_PROBLEM.encode()),
        (b"content-length", b"%d" % len(body)),
        (b"retry-after", b"%d" % BUSY_RETRY_AFTER_S),
        (b"connection", b"close"),
    ]
    await send({"type": "http.response.start", "status": 503, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def _timeout_response() -> bytes:
    body = _problem(408, "Request Timeout")
    head = (
        "HTTP/1.1 408 Request Timeout\r\n"
        f"content-type: {MEDIA_PROBLEM}\r\n"
        f"content-length: {len(body)}\r\n"
        "connection: close\r\n\r\n"
    )
    return head.encode("ascii") + body


_TIMEOUT_RESPONSE = _timeout_response()


class TimedHttpToolsProtocol(HttpToolsProtocol):
    """Uvicorn's httptools protocol with header and body read deadlines (module docstring).

    The deadlines come from class attributes: `server_options` makes a subclass per service."""

    header_timeout_s: float = 10.0
    body_timeout_s: float = 30.0

    _deadline: asyncio.TimerHandle | None = None

    def _arm(self, seconds: float) -> None:
        self._disarm()
        self._deadline = self.loop.call_later(seconds, self._expired)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _expired(self) -> None:
        self._deadline = None
        if self.transport.is_closing():
            return
        cycle = self.cycle
        answering = cycle is not None and not cycle.response_complete
        if not answering or not cycle.response_started:
            self.transport.write(_TIMEOUT_RESPONSE)
        if answering:
            # The app sees a disconnect at its next receive and its answer is dropped.
            cycle.disconnected = True
            cycle.message_event.set()
        self.transport.close()

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm(self.header_timeout_s)

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._arm(self.header_timeout_s)

    def on_headers_complete(self) -> None:
        super().on_headers_complete()
        self._arm(self.body_timeout_s)

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._disarm()

    def _start_asgi_task(self, cycle: RequestResponseCycle, app: Any) -> None:
        # Uvicorn hands a request past `limit_concurrency` its own bare 503 app.
        chosen: Any = _busy if app is service_unavailable else app
        transport = _OneWriteTransport(cycle.transport)
        cycle.transport = transport  # type: ignore[assignment]

        async def one_write(scope: Any, receive: Any, send: Any) -> None:
            async def coalesced(message: Any) -> None:
                start = message["type"] == "http.response.start"
                if start:
                    transport.hold()
                try:
                    await send(message)
                finally:
                    if not start:
                        transport.flush()

            await chosen(scope, receive, coalesced)

        super()._start_asgi_task(cycle, one_write)


class _OneWriteTransport:
    """A connection's transport as one answer's cycle sees it: what uvicorn writes at the
    answer's start (status line and headers) is held until the first part of its body, and
    both go out in one write: one send a response where there were two (the two were a
    quarter of the token issuer's samples, py-spy ``--gil`` on `bench.population`; the
    client then reads the answer in one receive too). Everything else is the connection's
    transport."""

    def __init__(self, transport: asyncio.Transport) -> None:
        self._transport = transport
        self._held: list[bytes] | None = None

    def hold(self) -> None:
        self._held = []

    def flush(self) -> None:
        held, self._held = self._held, None
        if held:
            self._transport.write(b"".join(held))

    def write(self, data: bytes) -> None:
        if self._held is not None:
            self._held.append(data)
        else:
            self._transport.write(data)

    def close(self) -> None:
        # An app that failed after starting its answer: the head goes out as it used to.
        self.flush()
        self._transport.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


def server_options(limits: ServerLimits) -> dict[str, Any]:
    """Keyword arguments of `uvicorn.Config` / `uvicorn.run` that apply `limits`."""
    protocol = type(
        "TimedHttpToolsProtocol",
        (TimedHttpToolsProtocol,),
        {"header_timeout_s": limits.header_timeout_s, "body_timeout_s": limits.body_timeout_s},
    )
    return {"http": protocol, "limit_concurrency": limits.limit_concurrency}
