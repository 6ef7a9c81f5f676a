"""A minimal keep-alive HTTP/1.1 client for hot paths (the proxy → pod streams, the decision →
predictor bulk calls).

Why not httpx here: under 50 concurrent streams on 2 cores, httpx/httpcore's per-request and
per-chunk cost (anyio streams, h11, pool scans) dominated the proxy's CPU profile, and a predictor
round trip through httpx costs ~3× one through this client. This client is an
``asyncio.Protocol`` with httptools' C response parser (chunked decoding included) and a
per-origin LIFO pool of idle connections. No read timeout by default (streams can be long; callers
bound a whole exchange with :meth:`Http1Pool.fetch` or ``asyncio.timeout``); a bounded connect
timeout. ``ConnectFailed``: the server could not be reached (nothing was received);
``StreamBroken``: the connection dropped after the request was sent. A reused keep-alive
connection that the server closed while idle is retried once on a fresh connection. A request
cancelled half-way closes its connection (it is never returned to the pool).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator, Mapping
from typing import cast
from urllib.parse import urlsplit

import httptools

_HIGH_WATER = 1 << 20
Origin = tuple[str, int]


class Http1Error(Exception):
    """Base of the connection errors (the proxy maps them to 502 / an SSE error event, the
    predictor client to the ``error`` fallback)."""


class ConnectFailed(Http1Error):
    """Connection refused, unreachable, bad URL, or connect timeout: nothing reached the server."""


class StreamBroken(Http1Error):
    """The connection was lost (or the response was malformed) after the request was sent."""


class _Connection(asyncio.Protocol):
    """One HTTP/1.1 connection; one request at a time."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.received_any = False
        self._parser = httptools.HttpResponseParser(self)
        self._headers: list[tuple[bytes, bytes]] = []
        self._headers_done: asyncio.Future[None] | None = None
        self._chunks: deque[bytes] = deque()
        self._buffered = 0
        self._waiter: asyncio.Future[None] | None = None
        self._complete = False
        self._reusable = False
        self._paused = False
        self._error: str | None = None

    # -- asyncio.Protocol --------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's transports do not subclass it

    def data_received(self, data: bytes) -> None:
        self.received_any = True
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(f"malformed response: {exc}")
            self.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if not self._complete:
            self._fail(f"connection lost: {exc!r}" if exc else "connection closed by the server")

    # -- httptools callbacks -----------------------------------------------------------------
    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers.append((name.lower(), value))

    def on_headers_complete(self) -> None:
        if self._headers_done is not None and not self._headers_done.done():
            self._headers_done.set_result(None)

    def on_body(self, body: bytes) -> None:
        self._chunks.append(body)
        self._buffered += len(body)
        if self._buffered > _HIGH_WATER and self.transport is not None and not self._paused:
            self._paused = True
            self.transport.pause_reading()
        self._wake()

    def on_message_complete(self) -> None:
        self._complete = True
        self._reusable = self._parser.should_keep_alive()
        self._wake()

    # -- used by the pool / response ---------------------------------------------------------
    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def _fail(self, message: str) -> None:
        if self._error is None:
            self._error = message
        if self._headers_done is not None and not self._headers_done.done():
            self._headers_done.set_exception(StreamBroken(message))
        self._wake()

    def reset(self) -> None:
        self._parser = httptools.HttpResponseParser(self)
        self._headers = []
        self._chunks.clear()
        self._buffered = 0
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

    async def next_chunk(self) -> bytes | None:
        """The next body bytes, ``None`` at the end of the message; ``StreamBroken`` if cut."""
        while True:
            if self._chunks:
                data = b"".join(self._chunks) if len(self._chunks) > 1 else self._chunks[0]
                self._chunks.clear()
                self._buffered = 0
                if self._paused and self.transport is not None:
                    self._paused = False
                    self.transport.resume_reading()
                return data
            if self._complete:
                return None
            if self._error is not None:
                raise StreamBroken(self._error)
            self._waiter = asyncio.get_running_loop().create_future()
            await self._waiter
            self._waiter = None

    @property
    def complete(self) -> bool:
        return self._complete

    def keep_alive(self) -> bool:
        return self._complete and self._reusable and not self.closed

    def close(self) -> None:
        if self.transport is not None and not self.closed:
            self.transport.close()
        self.closed = True


class Http1Response:
    """Status, headers and the body stream of one response. Always ``aclose()`` it."""

    def __init__(self, pool: Http1Pool, origin: Origin, conn: _Connection, status: int,
                 headers: list[tuple[bytes, bytes]]) -> None:
        self._pool = pool
        self._origin = origin
        self._conn: _Connection | None = conn
        self.status_code = status
        self.headers = headers

    def header(self, name: bytes) -> bytes | None:
        for key, value in self.headers:
            if key == name:
                return value
        return None

    async def chunks(self) -> AsyncIterator[bytes]:
        conn = self._conn
        if conn is None:
            return
        while (data := await conn.next_chunk()) is not None:
            yield data

    async def read(self) -> bytes:
        conn = self._conn
        if conn is None:
            return b""
        parts = []
        while (data := await conn.next_chunk()) is not None:
            parts.append(data)
        return parts[0] if len(parts) == 1 else b"".join(parts)

    async def aclose(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            self._pool.release(self._origin, conn)


class Http1Exchange:
    """A request started by :meth:`Http1Pool.start` (written already if a connection was idle)."""

    __slots__ = ("_pool", "_origin", "_request", "_conn")

    def __init__(self, pool: Http1Pool, origin: Origin, request: bytes, conn: _Connection | None) -> None:
        self._pool = pool
        self._origin = origin
        self._request = request
        self._conn = conn

    def abort(self) -> None:
        """Close the connection if :meth:`response` never took it over (no-op afterwards)."""
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    async def response(self) -> Http1Response:
        """Wait for the response head. A reused connection that turns out dead before answering
        anything is replaced once by a fresh one."""
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                status, headers = await conn.head()
                return Http1Response(self._pool, self._origin, conn, status, headers)
            except StreamBroken:
                conn.close()
                if conn.received_any:
                    raise
            except BaseException:
                conn.close()
                raise
        conn = await self._pool.connect(self._origin)
        try:
            conn.begin(self._request)
            status, headers = await conn.head()
        except BaseException:
            conn.close()
            raise
        return Http1Response(self._pool, self._origin, conn, status, headers)


class Http1Pool:
    """Per-origin LIFO pools of idle keep-alive connections (plain ``http://host:port`` only)."""

    def __init__(self, connect_timeout_s: float = 5.0, max_idle_per_origin: int = 256) -> None:
        self._connect_timeout_s = connect_timeout_s
        self._max_idle = max_idle_per_origin
        self._idle: dict[Origin, list[_Connection]] = {}
        self._origins: dict[str, tuple[Origin, str]] = {}

    def origin(self, base_url: str) -> tuple[Origin, str]:
        """``((host, port), path prefix)`` of a base URL such as ``http://10.0.0.5:8000``."""
        found = self._origins.get(base_url)
        if found is None:
            parts = urlsplit(base_url)
            if parts.scheme != "http" or not parts.hostname:
                raise ConnectFailed(f"unsupported URL {base_url!r} (plain http://host:port only)")
            found = self._origins[base_url] = ((parts.hostname, parts.port or 80), parts.path.rstrip("/"))
        return found

    def request_head(self, base_url: str, method: str, path: str, headers: Mapping[str, str]) -> bytes:
        """The request line and headers up to (not including) ``content-length`` — build it once
        for a fixed endpoint and pass it to :meth:`send`."""
        origin, prefix = self.origin(base_url)
        extra = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        return f"{method} {prefix}{path} HTTP/1.1\r\nhost: {origin[0]}:{origin[1]}\r\n{extra}".encode("latin-1")

    async def post(self, base_url: str, path: str, body: bytes, headers: Mapping[str, str]) -> Http1Response:
        """POST and wait for the response head; the body is streamed by the returned response."""
        return await self.send(base_url, self.request_head(base_url, "POST", path, headers), body)

    async def send(self, base_url: str, head: bytes, body: bytes) -> Http1Response:
        """Send ``head`` (from :meth:`request_head`) + ``content-length`` + ``body``; wait for the response head."""
        return await self.start(base_url, head, body).response()

    def start(self, base_url: str, head: bytes, body: bytes) -> Http1Exchange:
        """Like :meth:`send`, but synchronous up to the write: when an idle keep-alive connection is
        available the request is written before this returns (no event-loop hop before the server
        sees it); await :meth:`Http1Exchange.response` for the answer."""
        origin = self.origin(base_url)[0]
        request = b"%bcontent-length: %d\r\n\r\n%b" % (head, len(body), body)
        conn = self._checkout(origin)
        if conn is not None:
            conn.begin(request)
        return Http1Exchange(self, origin, request, conn)

    async def fetch(self, base_url: str, head: bytes, body: bytes) -> tuple[int, bytes]:
        """:meth:`send` and read the whole body: ``(status, body)``. Bound it with ``asyncio.timeout``;
        a cancelled fetch closes its connection."""
        response = await self.send(base_url, head, body)
        try:
            return response.status_code, await response.read()
        finally:
            await response.aclose()

    def _checkout(self, origin: Origin) -> _Connection | None:
        idle = self._idle.get(origin)
        while idle:
            conn = idle.pop()
            if not conn.closed:
                conn.reset()
                return conn
        return None

    async def connect(self, origin: Origin) -> _Connection:
        """A fresh connection to ``origin`` (``ConnectFailed`` on refusal or connect timeout)."""
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self._connect_timeout_s):
                _, conn = await loop.create_connection(_Connection, *origin)
        except (OSError, TimeoutError) as exc:
            raise ConnectFailed(f"{type(exc).__name__}: {exc}") from None
        return conn

    def release(self, origin: Origin, conn: _Connection) -> None:
        if not conn.keep_alive():
            conn.close()
            return
        idle = self._idle.setdefault(origin, [])
        if len(idle) >= self._max_idle:
            conn.close()
            return
        idle.append(conn)

    async def aclose(self) -> None:
        for idle in self._idle.values():
            for conn in idle:
                conn.close()
        self._idle.clear()
