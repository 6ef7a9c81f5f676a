"""One HTTP/1.1 client connection: an ``asyncio.Protocol`` around httptools' response parser that
queues body bytes for an awaiting reader or pushes them to a :class:`BodySink` from ``data_received``."""

from __future__ import annotations

import asyncio
from collections import deque
from typing import cast

import httptools

from router_client.http1.errors import BodySink, StreamBroken

_HIGH_WATER = 1 << 20
"""Queued (not yet awaited) body bytes above which a connection stops reading from the socket."""


class Connection(asyncio.Protocol):
    """One HTTP/1.1 connection; one request at a time."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.received_any = False
        self.idle_since = 0.0
        """When the pool last took it back (its clock); a connection idle too long is not reused."""
        self._parser = httptools.HttpResponseParser(self)
        self._headers: list[tuple[bytes, bytes]] = []
        self._head_complete = False
        self._headers_done: asyncio.Future[None] | None = None
        self._chunks: deque[bytes] = deque()
        self._buffered = 0
        self._waiter: asyncio.Future[None] | None = None
        self._sink: BodySink | None = None
        self._complete = False
        self._reusable = False
        self._queue_paused = False
        self._error: str | None = None

    # -- asyncio.Protocol --------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's transports do not subclass it

    def data_received(self, data: bytes) -> None:
        self.received_any = True
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserCallbackError as exc:
            self._fail(f"response consumer failed: {exc.__context__!r}")
            self.close()
        except httptools.HttpParserError as exc:
            self._fail(f"malformed response: {exc}")
            self.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self._complete:
            return
        if exc is None and self._head_complete and self._ends_at_eof():
            self._finish(reusable=False)
        else:
            self._fail(f"connection lost: {exc!r}" if exc else "connection closed by the server")

    # -- httptools callbacks -----------------------------------------------------------------
    def on_header(self, name: bytes, value: bytes) -> None:
        if not self._head_complete:  # trailers (after a chunked body) are not response headers
            self._headers.append((name.lower(), value))

    def on_headers_complete(self) -> None:
        status = self._parser.get_status_code()
        if 100 <= status < 200 and status != 101:  # interim response: the real one follows
            self._headers = []
            return
        self._head_complete = True
        if self._headers_done is not None and not self._headers_done.done():
            self._headers_done.set_result(None)

    def on_body(self, body: bytes) -> None:
        if self._sink is not None:
            self._sink.body(body)
            return
        self._chunks.append(body)
        self._buffered += len(body)
        if self._buffered > _HIGH_WATER and self.transport is not None and not self._queue_paused:
            self._queue_paused = True
            self.transport.pause_reading()
        self._wake()

    def on_message_complete(self) -> None:
        if self._head_complete:  # the end of an interim 1xx response is not the end of the answer
            self._finish(self._parser.should_keep_alive())

    # -- state -------------------------------------------------------------------------------
    def _ends_at_eof(self) -> bool:
        """A body delimited by the connection's end (no length, not chunked, may have a body)."""
        status = self._parser.get_status_code()
        if status in (204, 304):
            return False
        return not any(name in (b"content-length", b"transfer-encoding") for name, _ in self._headers)

    def _finish(self, reusable: bool) -> None:
        self._complete = True
        self._reusable = reusable
        sink, self._sink = self._sink, None
        if sink is not None:
            sink.end(None)
        else:
            self._wake()

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def _fail(self, message: str) -> None:
        if self._error is None:
            self._error = message
        if self._headers_done is not None and not self._headers_done.done():
            self._headers_done.set_exception(StreamBroken(message))
        sink, self._sink = self._sink, None
        if sink is not None:
            sink.end(message)
        else:
            self._wake()

    def reset(self) -> None:
        """Ready for the next request on this kept-alive connection (reading again, if a reader or a
        sink paused it while the last response completed)."""
        if self.transport is not None and not self.closed:
            self.transport.resume_reading()
        self._queue_paused = False
        self._parser = httptools.HttpResponseParser(self)
        self._headers = []
        self._head_complete = False
        self._chunks.clear()
        self._buffered = 0
        self._sink = None
        self._complete = False
        self._reusable = False
        self.received_any = False
        self._error = None

    def begin(self, request: bytes) -> None:
        """Write one request now (synchronously); :meth:`head` waits for the response head."""
        assert self.transport is not None
        self._headers_done = asyncio.get_running_loop().create_future()
        self.transport.write(request)

    async def head(self) -> tuple[int, list[tuple[bytes, bytes]]]:
        assert self._headers_done is not None
        await self._headers_done
        return self._parser.get_status_code(), self._headers

    def _take_queued(self) -> bytes:
        data = b"".join(self._chunks) if len(self._chunks) > 1 else self._chunks[0]
        self._chunks.clear()
        self._buffered = 0
        if self._queue_paused and self.transport is not None:
            self._queue_paused = False
            self.transport.resume_reading()
        return data

    async def next_chunk(self) -> bytes | None:
        """The next body bytes, ``None`` at the end of the message; ``StreamBroken`` if cut."""
        while True:
            if self._chunks:
                return self._take_queued()
            if self._complete:
                return None
            if self._error is not None:
                raise StreamBroken(self._error)
            self._waiter = asyncio.get_running_loop().create_future()
            await self._waiter
            self._waiter = None

    def attach(self, sink: BodySink) -> None:
        """From now on push the body to ``sink`` (what was queued first, synchronously)."""
        if self._chunks:
            sink.body(self._take_queued())
        if self._complete:
            sink.end(None)
        elif self._error is not None:
            sink.end(self._error)
        else:
            self._sink = sink

    def pause_reading(self) -> None:
        if self.transport is not None and not self.closed:
            self.transport.pause_reading()

    def resume_reading(self) -> None:
        if self.transport is not None and not self.closed:
            self.transport.resume_reading()

    def keep_alive(self) -> bool:
        return self._complete and self._reusable and not self.closed

    def close(self) -> None:
        if self.transport is not None and not self.closed:
            self.transport.close()
        self.closed = True
