"""Per-origin pools of idle keep-alive connections, one request/response exchange at a time."""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import AsyncIterator, Callable, Mapping
from urllib.parse import urlsplit

from router_client.http1.connection import Connection
from router_client.http1.errors import BodySink, ConnectFailed, StreamBroken
from shared.keepalive import POD_MAX_IDLE_S

Origin = tuple[str, int, bool]
"""(host, port, tls)"""
_DEFAULT_PORTS = {"http": 80, "https": 443}


class Http1Response:
    """Status, headers and the body of one response. Always ``aclose()`` it."""

    def __init__(self, pool: Http1Pool, origin: Origin, conn: Connection, status: int,
                 headers: list[tuple[bytes, bytes]]) -> None:
        self._pool = pool
        self._origin = origin
        self._conn: Connection | None = conn
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

    def stream_to(self, sink: BodySink) -> None:
        """Push the rest of the body to ``sink`` from the connection's ``data_received`` callback
        (bytes already received first, synchronously). ``sink.end`` is called exactly once."""
        if self._conn is None:
            sink.end("response already closed")
            return
        self._conn.attach(sink)

    @property
    def reading(self) -> bool:
        """Whether the connection reads from its socket now (False while paused, or once closed)."""
        conn = self._conn
        return bool(conn is not None and conn.transport is not None and not conn.closed
                    and conn.transport.is_reading())

    def pause_reading(self) -> None:
        """Stop reading from the socket (back-pressure: the server's writes block once buffers fill)."""
        if self._conn is not None:
            self._conn.pause_reading()

    def resume_reading(self) -> None:
        if self._conn is not None:
            self._conn.resume_reading()

    async def aclose(self) -> None:
        """Return a fully read connection to the pool; close one that is not."""
        conn, self._conn = self._conn, None
        if conn is not None:
            self._pool.release(self._origin, conn)


class Http1Exchange:
    """A request started by :meth:`Http1Pool.start` (written already if a connection was idle)."""

    __slots__ = ("_pool", "_origin", "_request", "_conn")

    def __init__(self, pool: Http1Pool, origin: Origin, request: bytes, conn: Connection | None) -> None:
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
    """Per-origin LIFO pools of idle keep-alive connections (``http://`` and ``https://`` URLs).

    ``ssl_context``: used for ``https://`` origins (server certificate and host name verified);
    ``None`` = ``ssl.create_default_context()`` (the system trust store). ``max_idle_s``: a connection
    idle longer than this is closed instead of reused — keep it below the servers' keep-alive timeout,
    so that a server never closes a connection just as a request is written to it (the default suits
    uvicorn's 5 s, e.g. vLLM)."""

    def __init__(self, connect_timeout_s: float = 5.0, max_idle_per_origin: int = 256,
                 ssl_context: ssl.SSLContext | None = None, max_idle_s: float = POD_MAX_IDLE_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._connect_timeout_s = connect_timeout_s
        self._max_idle = max_idle_per_origin
        self._max_idle_s = max_idle_s
        self._clock = clock
        self._ssl_context = ssl_context
        self._idle: dict[Origin, list[Connection]] = {}
        self._origins: dict[str, tuple[Origin, str]] = {}

    def origin(self, base_url: str) -> tuple[Origin, str]:
        """``((host, port, tls), path prefix)`` of a base URL such as ``http://10.0.0.5:8000``."""
        found = self._origins.get(base_url)
        if found is None:
            parts = urlsplit(base_url)
            try:
                port = parts.port
            except ValueError:
                raise ConnectFailed(f"bad port in URL {base_url!r}") from None
            if parts.scheme not in _DEFAULT_PORTS or not parts.hostname:
                raise ConnectFailed(f"unsupported URL {base_url!r} (http:// or https://host[:port] only)")
            origin = (parts.hostname, port or _DEFAULT_PORTS[parts.scheme], parts.scheme == "https")
            found = self._origins[base_url] = (origin, parts.path.rstrip("/"))
        return found

    def request_head(self, base_url: str, method: str, path: str, headers: Mapping[str, str]) -> bytes:
        """The request line and headers up to (not including) ``content-length`` — build it once
        for a fixed endpoint and pass it to :meth:`send`."""
        (host, port, _), prefix = self.origin(base_url)
        authority = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        extra = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        return f"{method} {prefix}{path} HTTP/1.1\r\nhost: {authority}\r\n{extra}".encode("latin-1")

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

    def _checkout(self, origin: Origin) -> Connection | None:
        idle = self._idle.get(origin)
        if not idle:
            return None
        stale_before = self._clock() - self._max_idle_s
        while idle:
            conn = idle.pop()
            if conn.closed:
                continue
            if conn.idle_since < stale_before:  # LIFO: every connection below it has been idle longer still
                conn.close()
                self._close_all(idle)
                return None
            conn.reset()
            return conn
        return None

    async def connect(self, origin: Origin) -> Connection:
        """A fresh connection to ``origin`` (``ConnectFailed`` on refusal, TLS failure or timeout)."""
        host, port, tls = origin
        loop = asyncio.get_running_loop()
        context = None
        if tls:
            if self._ssl_context is None:
                self._ssl_context = ssl.create_default_context()
            context = self._ssl_context
        try:
            async with asyncio.timeout(self._connect_timeout_s):
                _, conn = await loop.create_connection(Connection, host, port, ssl=context,
                                                       server_hostname=host if tls else None)
        except (OSError, TimeoutError) as exc:
            raise ConnectFailed(f"{type(exc).__name__}: {exc}") from None
        return conn

    def release(self, origin: Origin, conn: Connection) -> None:
        if not conn.keep_alive():
            conn.close()
            return
        idle = self._idle.setdefault(origin, [])
        if len(idle) >= self._max_idle:
            conn.close()
            return
        conn.idle_since = self._clock()
        idle.append(conn)

    def forget(self, base_url: str) -> None:
        """Close the idle connections to ``base_url``'s origin and drop what is cached for it (a pod that left)."""
        found = self._origins.pop(base_url, None)
        if found is None:
            return
        self._close_all(self._idle.pop(found[0], []))

    async def aclose(self) -> None:
        for idle in self._idle.values():
            self._close_all(idle)
        self._idle.clear()

    @staticmethod
    def _close_all(idle: list[Connection]) -> None:
        for conn in idle:
            conn.close()
        idle.clear()
