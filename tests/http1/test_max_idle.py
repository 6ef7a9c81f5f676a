"""``Http1Pool(max_idle_s=…)``: a pooled connection idle longer than that is closed, never reused.

A raw asyncio server on 127.0.0.1 answers every request with the number of the connection it came on and
records which connections the client closed; the pool's clock is a fake one, moved by the test.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from router_client.http1 import Http1Pool
from tests.waiting import wait_for_async

MAX_IDLE_S = 4.0


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Server:
    """Counts connections; answers ``<connection number>``; notes each connection the client closes."""

    def __init__(self) -> None:
        self.opened = 0
        self.closed: set[int] = set()
        self.url = ""

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.opened += 1
        number = self.opened
        while True:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except asyncio.IncompleteReadError:
                break
            length = next(int(line.split(b":")[1]) for line in head.lower().split(b"\r\n")
                          if line.startswith(b"content-length:"))
            await reader.readexactly(length)
            body = str(number).encode()
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n%b" % (len(body), body))
            await writer.drain()
        self.closed.add(number)
        writer.close()


@asynccontextmanager
async def serving() -> AsyncIterator[Server]:
    state = Server()
    server = await asyncio.start_server(state.handle, "127.0.0.1", 0)
    state.url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    try:
        yield state
    finally:
        server.close()


async def connection_number(pool: Http1Pool, url: str) -> int:
    status, body = await pool.fetch(url, pool.request_head(url, "POST", "/", {}), b"{}")
    assert status == 200
    return int(body)


def test_connection_idle_beyond_max_idle_is_closed_not_reused() -> None:
    async def scenario() -> None:
        clock = FakeClock()
        async with serving() as server:
            pool = Http1Pool(max_idle_s=MAX_IDLE_S, clock=clock)
            assert await connection_number(pool, server.url) == 1
            clock.now += MAX_IDLE_S - 0.1
            assert await connection_number(pool, server.url) == 1  # within max idle: reused
            clock.now += MAX_IDLE_S + 0.1
            assert await connection_number(pool, server.url) == 2  # beyond: a fresh connection ...
            await wait_for_async(lambda: 1 in server.closed, timeout=10)  # ... and the stale one closed by the client
            await pool.aclose()

    asyncio.run(scenario())


def test_stale_connections_below_a_fresh_one_are_all_closed() -> None:
    """LIFO: the newest idle connection is taken first; once one is too old, every older one is closed too."""
    async def scenario() -> None:
        clock = FakeClock()
        async with serving() as server:
            pool = Http1Pool(max_idle_s=MAX_IDLE_S, clock=clock)
            await asyncio.gather(*(connection_number(pool, server.url) for _ in range(3)))
            assert server.opened == 3
            clock.now += MAX_IDLE_S + 1
            assert await connection_number(pool, server.url) == 4
            await wait_for_async(lambda: server.closed == {1, 2, 3}, timeout=10)
            clock.now += 1
            assert await connection_number(pool, server.url) == 4  # the fresh one is reused
            await pool.aclose()

    asyncio.run(scenario())
