"""Where a relayed stream goes: the client's connection, written directly, or the ASGI ``send``.

The relay pushes body bytes from the upstream connection's ``data_received`` callback, so writing
them must not need an ``await``. Under uvicorn's httptools protocol (the proxy's server, see
``router_client/__main__.py``) :class:`DirectDownstream` writes each piece to the client's
transport at once, framed as an HTTP/1.1 chunk exactly as uvicorn frames ``http.response.body``
messages (uvicorn has already sent the head with ``transfer-encoding: chunked``; the last chunk
and the terminator still go through ASGI ``send``, so uvicorn's response state stays right). The
server's ``send`` is found in the scope under :data:`SERVER_SEND`, put there by the app's outermost
layer (``app.py``): body-transforming middleware must not be added to the proxy app.

Anything else (another server, uvicorn's h11 protocol, tests calling the app with their own
``send``) gets :class:`AsgiDownstream`: bytes are queued and a task sends them (one wake-up per
batch), with a 1 MiB high-water mark.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from starlette.types import Message, Scope, Send

SERVER_SEND = "latency_router.server_send"
"""Scope key of the server's own ``send`` callable (set by the app before any middleware)."""
_ASGI_HIGH_WATER = 1 << 20
_UVICORN_HTTPTOOLS = ("uvicorn.protocols.http.httptools_impl", "RequestResponseCycle")


class Downstream(Protocol):
    wakes_per_write: bool
    """True when written bytes only leave once the relay task runs (``flush``)."""

    def write(self, data: bytes) -> None: ...

    def paused(self) -> bool:
        """The client is not keeping up: stop reading upstream until :meth:`drain` returns."""

    def gone(self) -> bool:
        """The client disconnected."""

    async def flush(self) -> None: ...

    async def drain(self) -> None: ...


class DirectDownstream:
    """Writes HTTP/1.1 chunks straight to the client's transport (uvicorn httptools only)."""

    wakes_per_write = False
    __slots__ = ("_cycle", "_transport", "_flow")

    def __init__(self, cycle: Any) -> None:
        self._cycle = cycle
        self._transport = cycle.transport
        self._flow = cycle.flow

    def write(self, data: bytes) -> None:
        self._transport.write(b"%x\r\n%b\r\n" % (len(data), data))

    def paused(self) -> bool:
        return bool(self._flow.write_paused)

    def gone(self) -> bool:
        return bool(self._transport.is_closing())  # uvicorn marks the cycle disconnected once it closed

    async def flush(self) -> None:
        return None

    async def drain(self) -> None:
        """Until the transport's buffer is below its low-water mark (or the client is gone:
        uvicorn resumes writing when the connection is lost)."""
        await self._flow.drain()


class AsgiDownstream:
    """Queues bytes for ``http.response.body`` messages sent by the relay task."""

    wakes_per_write = True
    __slots__ = ("_send", "_queue", "_queued", "_gone")

    def __init__(self, send: Send) -> None:
        self._send = send
        self._queue: list[bytes] = []
        self._queued = 0
        self._gone = False

    def write(self, data: bytes) -> None:
        self._queue.append(data)
        self._queued += len(data)

    def paused(self) -> bool:
        return self._queued > _ASGI_HIGH_WATER

    def gone(self) -> bool:
        return self._gone

    async def flush(self) -> None:
        while self._queue and not self._gone:
            data = self._queue[0] if len(self._queue) == 1 else b"".join(self._queue)
            self._queue.clear()
            self._queued = 0
            try:
                await self._send({"type": "http.response.body", "body": data, "more_body": True})
            except OSError:
                self._gone = True

    async def drain(self) -> None:
        await self.flush()


def open_downstream(scope: Scope, send: Send, count: Callable[[str], None]) -> Downstream:
    """The direct writer when the server is uvicorn's httptools protocol and the response head went
    out with chunked encoding; the ASGI writer otherwise. ``count`` gets ``"direct"`` or ``"asgi"``."""
    cycle: Any = getattr(scope.get(SERVER_SEND), "__self__", None)
    kind = type(cycle)
    if ((kind.__module__, kind.__name__) == _UVICORN_HTTPTOOLS and cycle.response_started
            and cycle.chunked_encoding and not cycle.response_complete and not cycle.disconnected):
        count("direct")
        return DirectDownstream(cycle)
    count("asgi")
    return AsgiDownstream(send)


def remember_server_send(scope: Scope, send: Send) -> None:
    if scope["type"] == "http":
        scope[SERVER_SEND] = send


def end_message(body: bytes) -> Message:
    return {"type": "http.response.body", "body": body, "more_body": False}
