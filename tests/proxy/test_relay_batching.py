"""The relay forwards whatever one upstream read holds in one send, byte-exact, and still accounts.

A tiny HTTP/1.1 pod on loopback writes an SSE stream either in one write (many events coalesced
in one TCP read) or cut at arbitrary byte offsets (events split across reads); the proxy's real
upstream client reads it and ``RelayResponse`` relays it to a collecting ASGI ``send``.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
import pytest

from demo.procs import LOOPBACK
from router_client.proxy.metrics import Outcome
from router_client.proxy.relay import RelayResponse, StreamRelay
from router_client.proxy.sse import DONE_EVENT, complete_end, count_data_events, split_events
from router_client.proxy.upstream import UpstreamPool

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


async def _relay(pieces: list[bytes], *, strip_usage: bool, end: bool = True) -> dict[str, Any]:
    server, url = await _pod(pieces, end=end)
    pool = UpstreamPool(connect_timeout_s=2.0)
    outcomes: list[Outcome] = []
    firsts: list[float] = []
    bodies: list[bytes] = []
    try:
        upstream = await pool.post(url, "/v1/chat/completions", b"{}", {})
        relay = StreamRelay(upstream, started=0.0, strip_usage=strip_usage,
                            on_first_token=lambda: firsts.append(len(b"".join(bodies))), report=outcomes.append)
        quiet = asyncio.Event()

        async def receive() -> dict[str, Any]:
            await quiet.wait()
            return {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.body":
                bodies.append(message["body"])

        await RelayResponse(relay, 200, [])({"type": "http"}, receive, send)
    finally:
        await pool.aclose()
        server.close()
        await server.wait_closed()
    assert len(outcomes) == 1
    return {"bytes": b"".join(bodies), "sends": len([b for b in bodies if b]), "outcome": outcomes[0],
            "firsts": firsts}


def _run(coro: Awaitable[dict[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = asyncio.run(asyncio.wait_for(coro, 20))  # type: ignore[arg-type]
    return result


@pytest.mark.parametrize("cuts", [_one_write, _random_cuts(1), _random_cuts(2), _random_cuts(3)],
                         ids=["coalesced", "cut-1", "cut-2", "cut-3"])
@pytest.mark.parametrize("eol", [b"\n", b"\r\n"], ids=["lf", "crlf"])
def test_relays_byte_exact_and_strips_the_injected_usage_chunk(cuts: Cuts, eol: bytes) -> None:
    sent, expected = _stream(usage=True, eol=eol)
    got = _run(_relay(cuts(sent), strip_usage=True))
    assert got["bytes"] == expected
    outcome: Outcome = got["outcome"]
    assert outcome.error_code is None
    assert (outcome.output_tokens, outcome.prompt_tokens) == (TOKENS, 7)
    assert len(got["firsts"]) == 1
    if cuts is _one_write:
        assert got["sends"] == 1  # the whole coalesced read went out in one send


@pytest.mark.parametrize("cuts", [_one_write, _random_cuts(4), _random_cuts(5)], ids=["coalesced", "cut-4", "cut-5"])
def test_keeps_the_usage_chunk_the_client_asked_for(cuts: Cuts) -> None:
    sent, _ = _stream(usage=True)
    got = _run(_relay(cuts(sent), strip_usage=False))
    assert got["bytes"] == sent
    assert got["outcome"].output_tokens == TOKENS


@pytest.mark.parametrize("cuts", [_one_write, _random_cuts(6), _random_cuts(7)], ids=["coalesced", "cut-6", "cut-7"])
def test_counts_tokens_without_a_usage_chunk(cuts: Cuts) -> None:
    sent, expected = _stream(usage=False)
    assert sent == expected
    got = _run(_relay(cuts(sent), strip_usage=True))
    assert got["bytes"] == sent
    assert (got["outcome"].output_tokens, got["outcome"].prompt_tokens) == (TOKENS, None)


def test_pod_dying_mid_event_ends_the_stream_after_the_complete_events_with_an_error_event() -> None:
    sent, _ = _stream(usage=True)
    cut_at = len(sent) // 2 + 5
    complete = sent[:complete_end(sent[:cut_at])]
    assert 0 < len(complete) < cut_at
    got = _run(_relay(_random_cuts(8)(sent[:cut_at]), strip_usage=True, end=False))
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
