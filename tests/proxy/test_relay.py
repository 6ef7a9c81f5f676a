"""The relay forwards whatever one upstream read holds in one write, byte-exact, and still accounts.

A tiny HTTP/1.1 pod on loopback writes an SSE stream either in one write (many events coalesced
in one TCP read) or cut at arbitrary byte offsets (events split across reads); the proxy's real
upstream client reads it and ``RelayResponse`` relays it either under a real uvicorn (httptools)
server in the test's loop, read by a raw-socket client that checks the chunked framing ("direct":
bytes written from the pod connection's callback), or to a collecting ASGI ``send`` ("asgi").
Back-pressure: a client that stops reading stops the proxy reading the pod; the pod's bytes stay
in the pod, not in the proxy's memory.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import socket
import struct
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import orjson
import pytest
import uvicorn
from starlette.types import Message, Receive, Scope, Send

from demo.procs import LOOPBACK, free_port
from router_client.proxy.downstream import remember_server_send
from router_client.proxy.metrics import Outcome
from router_client.proxy.relay import RelayResponse, StreamRelay
from router_client.proxy.sse import DONE_EVENT, complete_end, count_data_events, split_events
from router_client.proxy.upstream import UpstreamPool, UpstreamResponse

HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
TOKENS = 40
Cuts = Callable[[bytes], list[bytes]]


def _ev(obj: object, eol: bytes = b"\n") -> bytes:
    return b"data: " + orjson.dumps(obj) + eol + eol


def _stream(*, usage: bool, eol: bytes = b"\n") -> tuple[bytes, bytes]:
    """(what the pod sends, what the client must receive when the usage chunk is stripped)."""
    events = [_ev({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}, eol)]
    for i in range(TOKENS):
        text = "data: x\n\ndata: y" if i == 3 else f" t{i}"  # escaped newlines + "data:" inside JSON
        finish = "length" if i == TOKENS - 1 else None
        events.append(_ev({"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": finish}]}, eol))
    usage_event = _ev({"choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": TOKENS}}, eol)
    done = b"data: [DONE]" + eol + eol
    sent = b"".join(events) + (usage_event if usage else b"") + done
    return sent, b"".join(events) + done


def _one_write(body: bytes) -> list[bytes]:
    return [body]


def _random_cuts(seed: int) -> Cuts:
    def cut(body: bytes) -> list[bytes]:
        rng = random.Random(seed)
        points = sorted(rng.sample(range(1, len(body)), 25))
        return [body[a:b] for a, b in zip([0, *points], [*points, len(body)], strict=True)]
    return cut


async def _pod(pieces: list[bytes], *, end: bool = True) -> tuple[asyncio.Server, str]:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(HEAD)
        for piece in pieces:
            writer.write(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
            await writer.drain()
            if len(pieces) > 1:
                await asyncio.sleep(0.003)  # separate TCP reads on the proxy side
        if end:
            writer.write(b"0\r\n\r\n")
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(handler, LOOPBACK, 0)
    return server, f"http://{LOOPBACK}:{server.sockets[0].getsockname()[1]}"


class _Quiet(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


@dataclass
class Harness:
    """The relay behind a real uvicorn (httptools) server in this loop, in front of a pod URL."""

    url: str
    strip_usage: bool = True
    http: str = "httptools"
    outcomes: list[Outcome] = field(default_factory=list)
    firsts: list[int] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)
    upstreams: list[UpstreamResponse] = field(default_factory=list)

    async def app(self, scope: Scope, receive: Receive, send: Send) -> None:
        remember_server_send(scope, send)
        pool = UpstreamPool(connect_timeout_s=2.0)
        try:
            upstream = await pool.post(self.url, "/v1/chat/completions", b"{}", {})
            self.upstreams.append(upstream)
            relay = StreamRelay(upstream, started=0.0, strip_usage=self.strip_usage,
                                on_first_token=lambda: self.firsts.append(1), report=self.outcomes.append)
            await RelayResponse(relay, 200, [(b"content-type", b"text/event-stream")], self.paths.append)(
                scope, receive, send)
        finally:
            await pool.aclose()

    @contextlib.asynccontextmanager
    async def serve(self) -> AsyncIterator[tuple[str, int, uvicorn.Server]]:
        port = free_port()
        server = _Quiet(uvicorn.Config(self.app, host=LOOPBACK, port=port, http=self.http, interface="asgi3",
                                       lifespan="off", log_level="warning", access_log=False))
        task = asyncio.get_running_loop().create_task(server.serve())
        while not server.started:
            assert not task.done(), "relay server did not start"
            await asyncio.sleep(0.01)
        try:
            yield LOOPBACK, port, server
        finally:
            server.should_exit = True
            await task


async def _request(host: str, port: int, rcvbuf: int | None = None) -> tuple[asyncio.StreamReader,
                                                                                asyncio.StreamWriter]:
    sock = socket.socket()
    if rcvbuf is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    sock.connect((host, port))
    sock.setblocking(False)
    reader, writer = await asyncio.open_connection(sock=sock, limit=1 << 22)
    writer.write(f"POST /v1/chat/completions HTTP/1.1\r\nhost: {host}\r\ncontent-length: 2\r\n\r\n{{}}".encode())
    head = await reader.readuntil(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200") and b"transfer-encoding: chunked" in head.lower()
    return reader, writer


async def _read_chunks(reader: asyncio.StreamReader) -> list[bytes]:
    """HTTP/1.1 chunked body, strictly framed, up to and including the terminating chunk."""
    chunks: list[bytes] = []
    while True:
        size = int((await reader.readuntil(b"\r\n"))[:-2], 16)
        data = await reader.readexactly(size + 2)
        assert data.endswith(b"\r\n")
        if size == 0:
            return chunks
        chunks.append(data[:-2])


async def _relay_asgi(url: str, strip_usage: bool) -> dict[str, Any]:
    """The relay called with a collecting ``send`` (any ASGI server: the queued writer)."""
    pool = UpstreamPool(connect_timeout_s=2.0)
    outcomes: list[Outcome] = []
    firsts: list[float] = []
    bodies: list[bytes] = []
    paths: list[str] = []
    try:
        upstream = await pool.post(url, "/v1/chat/completions", b"{}", {})
        relay = StreamRelay(upstream, started=0.0, strip_usage=strip_usage,
                            on_first_token=lambda: firsts.append(len(b"".join(bodies))), report=outcomes.append)
        quiet = asyncio.Event()

        async def receive() -> dict[str, Any]:
            await quiet.wait()
            return {"type": "http.disconnect"}

        async def send(message: Message) -> None:
            if message["type"] == "http.response.body":
                bodies.append(message["body"])

        await RelayResponse(relay, 200, [], paths.append)({"type": "http"}, receive, send)
    finally:
        await pool.aclose()
    assert paths == ["asgi"]
    return {"bytes": b"".join(bodies), "sends": len([b for b in bodies if b]), "outcomes": outcomes,
            "firsts": firsts}


async def _relay_direct(url: str, strip_usage: bool) -> dict[str, Any]:
    """The relay under uvicorn's httptools protocol: written from the pod connection's callback."""
    harness = Harness(url, strip_usage)
    async with harness.serve() as (host, port, _):
        reader, writer = await _request(host, port)
        chunks = await _read_chunks(reader)
        writer.close()
        while not harness.outcomes:
            await asyncio.sleep(0.01)
    assert harness.paths == ["direct"]
    return {"bytes": b"".join(chunks), "sends": len(chunks), "outcomes": harness.outcomes,
            "firsts": harness.firsts}


async def _relay(pieces: list[bytes], *, strip_usage: bool, mode: str, end: bool = True) -> dict[str, Any]:
    server, url = await _pod(pieces, end=end)
    try:
        got = await (_relay_direct if mode == "direct" else _relay_asgi)(url, strip_usage)
    finally:
        server.close()
        await server.wait_closed()
    assert len(got["outcomes"]) == 1
    got["outcome"] = got["outcomes"][0]
    return got


def _run(coro: Awaitable[Any]) -> Any:
    return asyncio.run(asyncio.wait_for(coro, 60))  # type: ignore[arg-type]


MODES = pytest.mark.parametrize("mode", ["direct", "asgi"])


@pytest.mark.parametrize("cuts", [_one_write, _random_cuts(1), _random_cuts(2), _random_cuts(3)],
                         ids=["coalesced", "cut-1", "cut-2", "cut-3"])
@pytest.mark.parametrize("eol", [b"\n", b"\r\n"], ids=["lf", "crlf"])
@MODES
def test_relays_byte_exact_and_strips_the_injected_usage_chunk(cuts: Cuts, eol: bytes, mode: str) -> None:
    sent, expected = _stream(usage=True, eol=eol)
    got = _run(_relay(cuts(sent), strip_usage=True, mode=mode))
    assert got["bytes"] == expected
    outcome: Outcome = got["outcome"]
    assert outcome.error_code is None
    assert (outcome.output_tokens, outcome.prompt_tokens) == (TOKENS, 7)
    assert len(got["firsts"]) == 1
    if cuts is _one_write:
        assert got["sends"] == 1  # the whole coalesced read went out in one send


@pytest.mark.parametrize("cuts", [_one_write, _random_cuts(4), _random_cuts(5)], ids=["coalesced", "cut-4", "cut-5"])
@MODES
def test_keeps_the_usage_chunk_the_client_asked_for(cuts: Cuts, mode: str) -> None:
    sent, _ = _stream(usage=True)
    got = _run(_relay(cuts(sent), strip_usage=False, mode=mode))
    assert got["bytes"] == sent
    assert got["outcome"].output_tokens == TOKENS


@pytest.mark.parametrize("cuts", [_one_write, _random_cuts(6), _random_cuts(7)], ids=["coalesced", "cut-6", "cut-7"])
@MODES
def test_counts_tokens_without_a_usage_chunk(cuts: Cuts, mode: str) -> None:
    sent, expected = _stream(usage=False)
    assert sent == expected
    got = _run(_relay(cuts(sent), strip_usage=True, mode=mode))
    assert got["bytes"] == sent
    assert (got["outcome"].output_tokens, got["outcome"].prompt_tokens) == (TOKENS, None)


@MODES
def test_pod_dying_mid_event_ends_the_stream_after_the_complete_events_with_an_error_event(mode: str) -> None:
    sent, _ = _stream(usage=True)
    cut_at = len(sent) // 2 + 5
    complete = sent[:complete_end(sent[:cut_at])]
    assert 0 < len(complete) < cut_at
    got = _run(_relay(_random_cuts(8)(sent[:cut_at]), strip_usage=True, mode=mode, end=False))
    assert got["bytes"].startswith(complete)
    tail = got["bytes"][len(complete):]
    assert tail.startswith(b'data: {"error"') and tail.endswith(DONE_EVENT)
    assert got["outcome"].error_code == "midstream"


def test_buffer_helpers_agree_with_event_splitting_at_every_cut() -> None:
    for eol in (b"\n", b"\r\n"):
        sent, _ = _stream(usage=True, eol=eol)
        events = split_events(sent)
        assert b"".join(events) == sent and len(events) == TOKENS + 3
        for cut in range(len(sent) + 1):
            head = sent[:cut]
            end = complete_end(head)
            complete = split_events(head[:end])
            assert all(event.endswith(eol + eol) for event in complete)
            assert complete == events[:len(complete)]
            assert count_data_events(head[:end]) == len(complete)


def test_under_uvicorn_h11_the_relay_falls_back_to_asgi_send() -> None:
    sent, expected = _stream(usage=True)

    async def main() -> tuple[bytes, Harness]:
        pod, url = await _pod(_random_cuts(9)(sent))
        harness = Harness(url, http="h11")
        async with harness.serve() as (host, port, _):
            reader, writer = await _request(host, port)
            body = b"".join(await _read_chunks(reader))
            writer.close()
            await _until(lambda: bool(harness.outcomes), "the outcome")
        pod.close()
        return body, harness

    body, harness = _run(main())
    assert body == expected and harness.paths == ["asgi"]
    assert harness.outcomes[0].error_code is None and harness.outcomes[0].output_tokens == TOKENS


BIG_EVENTS = 5000
BIG_EVENT = _ev({"choices": [{"index": 0, "delta": {"content": "x" * 8000}}]})


async def _big_pod(writers: list[asyncio.StreamWriter]) -> tuple[asyncio.Server, str]:
    """Writes BIG_EVENTS events (~40 MB) as fast as the socket takes them, then [DONE]."""
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writers.append(writer)
        writer.write(HEAD)
        for _ in range(BIG_EVENTS):
            writer.write(b"%x\r\n%b\r\n" % (len(BIG_EVENT), BIG_EVENT))
        writer.write(b"%x\r\n%b\r\n0\r\n\r\n" % (len(DONE_EVENT), DONE_EVENT))
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(handler, LOOPBACK, 0)
    return server, f"http://{LOOPBACK}:{server.sockets[0].getsockname()[1]}"


async def _until(condition: Callable[[], bool], what: str, timeout_s: float = 30.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.02)


def test_slow_client_pauses_the_pod_connection_direct() -> None:
    total = BIG_EVENTS * len(BIG_EVENT)

    async def main() -> None:
        writers: list[asyncio.StreamWriter] = []
        pod, url = await _big_pod(writers)
        harness = Harness(url)
        async with harness.serve() as (host, port, server):
            reader, writer = await _request(host, port, rcvbuf=65536)  # then reads nothing for a while
            await _until(lambda: bool(harness.upstreams) and not harness.upstreams[0].reading, "upstream paused")
            held_by_proxy = sum(c.transport.get_write_buffer_size() for c in server.server_state.connections)
            held_by_pod = writers[0].transport.get_write_buffer_size()
            assert held_by_proxy <= 1 << 20, held_by_proxy  # the proxy's client buffer stays bounded
            assert held_by_pod >= total // 4, (held_by_pod, total)  # the rest waits in the pod (kernel: ~11-16 MB)
            body = b"".join(await _read_chunks(reader))  # the client catches up: reading resumes
            writer.close()
            await _until(lambda: bool(harness.outcomes), "the outcome")
        pod.close()
        assert body == BIG_EVENT * BIG_EVENTS + DONE_EVENT
        outcome = harness.outcomes[0]
        assert outcome.error_code is None and outcome.output_tokens == BIG_EVENTS
        assert harness.paths == ["direct"]

    _run(main())


def test_slow_asgi_send_pauses_the_pod_connection() -> None:
    total = BIG_EVENTS * len(BIG_EVENT)

    async def main() -> None:
        writers: list[asyncio.StreamWriter] = []
        pod, url = await _big_pod(writers)
        pool = UpstreamPool(connect_timeout_s=2.0)
        upstream = await pool.post(url, "/x", b"{}", {})
        outcomes: list[Outcome] = []
        relay = StreamRelay(upstream, started=0.0, strip_usage=True, on_first_token=lambda: None,
                            report=outcomes.append)
        unblocked = asyncio.Event()
        bodies: list[bytes] = []

        async def send(message: Message) -> None:
            await unblocked.wait()  # a client that does not read
            if message["type"] == "http.response.body":
                bodies.append(message["body"])

        async def receive() -> dict[str, Any]:
            await asyncio.Event().wait()
            return {"type": "http.disconnect"}

        unblocked.set()
        task = asyncio.get_running_loop().create_task(RelayResponse(relay, 200, [])({"type": "http"}, receive, send))
        await _until(lambda: bool(bodies), "the first body")
        unblocked.clear()
        await _until(lambda: not upstream.reading, "upstream paused")
        assert writers[0].transport.get_write_buffer_size() >= total // 4
        unblocked.set()
        await task
        await pool.aclose()
        pod.close()
        assert b"".join(bodies) == BIG_EVENT * BIG_EVENTS + DONE_EVENT
        assert outcomes[0].error_code is None and outcomes[0].output_tokens == BIG_EVENTS

    _run(main())


async def _endless_pod(closed: asyncio.Event) -> tuple[asyncio.Server, str]:
    """Streams a token every 5 ms until its client (the proxy) goes away."""
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(HEAD)
        event = _ev({"choices": [{"index": 0, "delta": {"content": "t"}}]})
        try:
            for _ in range(12000):
                writer.write(b"%x\r\n%b\r\n" % (len(event), event))
                await writer.drain()
                await asyncio.sleep(0.005)
                if reader.at_eof():
                    break
        except ConnectionError:
            pass
        closed.set()
        writer.close()

    server = await asyncio.start_server(handler, LOOPBACK, 0)
    return server, f"http://{LOOPBACK}:{server.sockets[0].getsockname()[1]}"


def test_client_disconnect_closes_the_pod_connection_direct() -> None:
    async def main() -> None:
        closed = asyncio.Event()
        pod, url = await _endless_pod(closed)
        harness = Harness(url)
        async with harness.serve() as (host, port, _):
            reader, writer = await _request(host, port)
            size = int((await reader.readuntil(b"\r\n"))[:-2], 16)
            assert (await reader.readexactly(size + 2)).startswith(b"data: ")
            writer.transport.abort()
            await asyncio.wait_for(closed.wait(), 30)
            await _until(lambda: bool(harness.outcomes), "the outcome")
        pod.close()
        assert harness.outcomes[0].error_code == "client_disconnect"

    _run(main())


@MODES
def test_pod_reset_mid_stream_ends_the_stream_with_an_error_event(mode: str) -> None:
    sent, _ = _stream(usage=True)
    events = split_events(sent)

    async def main() -> dict[str, Any]:
        async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await reader.readuntil(b"\r\n\r\n")
            writer.write(HEAD)
            for event in events[:5]:
                writer.write(b"%x\r\n%b\r\n" % (len(event), event))
                await writer.drain()
                await asyncio.sleep(0.003)
            sock = writer.get_extra_info("socket")
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            writer.transport.abort()  # RST, not a clean close

        server = await asyncio.start_server(handler, LOOPBACK, 0)
        url = f"http://{LOOPBACK}:{server.sockets[0].getsockname()[1]}"
        try:
            got: dict[str, Any] = await (_relay_direct if mode == "direct" else _relay_asgi)(url, True)
        finally:
            server.close()
        return got

    got = _run(main())
    assert got["bytes"].startswith(b"".join(events[:5]))
    tail = got["bytes"][len(b"".join(events[:5])):]
    assert tail.startswith(b'data: {"error"') and b"mid-stream" in tail and tail.endswith(DONE_EVENT)
    assert got["outcomes"][0].error_code == "midstream"
