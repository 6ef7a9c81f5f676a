"""The pod-facing HTTP/1.1 client against tiny asyncio servers on loopback."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from demo.procs import LOOPBACK, free_port
from router_client.proxy.upstream import ConnectFailed, StreamBroken, UpstreamPool

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]
CHUNKED_HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"


async def _read_request(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                  if line.lower().startswith(b"content-length"))
    return await reader.readexactly(length)


def _chunk(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


async def _serve(handler: Handler) -> tuple[asyncio.Server, str]:
    server = await asyncio.start_server(handler, LOOPBACK, 0)
    return server, f"http://{LOOPBACK}:{server.sockets[0].getsockname()[1]}"


def run(coro: Awaitable[None]) -> None:
    asyncio.run(asyncio.wait_for(coro, 10))  # type: ignore[arg-type]


def test_streams_chunked_body_and_reuses_the_connection() -> None:
    connections = 0

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        while not reader.at_eof():
            try:
                body = await _read_request(reader)
            except asyncio.IncompleteReadError:
                break
            writer.write(CHUNKED_HEAD + _chunk(b"data: " + body + b"\n\n") + _chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")
            await writer.drain()
        writer.close()

    async def main() -> None:
        server, url = await _serve(handler)
        pool = UpstreamPool()
        for i in range(3):
            resp = await pool.post(url, "/v1/completions", f'{{"n":{i}}}'.encode(), {"x-request-id": "r"})
            assert resp.status_code == 200 and resp.header(b"content-type") == b"text/event-stream"
            assert await resp.read() == f'data: {{"n":{i}}}\n\ndata: [DONE]\n\n'.encode()
            await resp.aclose()
        await pool.aclose()
        server.close()

    run(main())
    assert connections == 1


def test_idle_connection_closed_by_the_pod_is_replaced() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
        await writer.drain()
        writer.close()  # keep-alive timeout: the pod closes right after answering

    async def main() -> None:
        server, url = await _serve(handler)
        pool = UpstreamPool()
        for _ in range(3):
            resp = await pool.post(url, "/x", b"{}", {})
            assert await resp.read() == b"ok"
            await resp.aclose()
        server.close()

    run(main())


def test_connection_refused_is_connect_failed() -> None:
    async def main() -> None:
        with pytest.raises(ConnectFailed):
            await UpstreamPool(connect_timeout_s=2).post(f"http://{LOOPBACK}:{free_port()}", "/x", b"{}", {})

    run(main())


def test_pod_dying_mid_body_is_stream_broken() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _read_request(reader)
        writer.write(CHUNKED_HEAD + _chunk(b"data: {}\n\n"))
        await writer.drain()
        writer.transport.abort()

    async def main() -> None:
        server, url = await _serve(handler)
        resp = await UpstreamPool().post(url, "/x", b"{}", {})
        got = []
        with pytest.raises(StreamBroken):
            async for chunk in resp.chunks():
                got.append(chunk)
        assert got == [b"data: {}\n\n"]
        await resp.aclose()
        server.close()

    run(main())


def test_garbage_and_silent_close_are_stream_broken() -> None:
    async def garbage(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _read_request(reader)
        writer.write(b"NOT HTTP AT ALL\r\n\r\n")
        await writer.drain()

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _read_request(reader)
        writer.close()

    async def main() -> None:
        for handler in (garbage, silent):
            server, url = await _serve(handler)
            with pytest.raises(StreamBroken):
                await UpstreamPool().post(url, "/x", b"{}", {})
            server.close()

    run(main())


def test_start_writes_on_an_idle_connection_before_any_await_and_abort_closes_it() -> None:
    received: list[bytes] = []
    eof = asyncio.Event()

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            try:
                received.append(await _read_request(reader))
            except asyncio.IncompleteReadError:
                eof.set()
                return
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
            await writer.drain()

    async def main() -> None:
        server, url = await _serve(handler)
        pool = UpstreamPool()
        resp = await pool.post(url, "/x", b"first", {})  # leaves one idle keep-alive connection
        assert await resp.read() == b"ok"
        await resp.aclose()
        head = pool.request_head(url, "POST", "/x", {"content-type": "application/json"})
        exchange = pool.start(url, head, b"second")  # written synchronously on the idle connection
        resp = await exchange.response()
        assert resp.status_code == 200 and await resp.read() == b"ok"
        await resp.aclose()
        pool.start(url, head, b"third").abort()  # never awaited: the connection is closed, not leaked
        await asyncio.wait_for(eof.wait(), 5)
        assert received == [b"first", b"second", b"third"]
        server.close()

    run(main())
