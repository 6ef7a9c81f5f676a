"""Streaming pass-through: relay a pod's SSE bytes to the client as they arrive, and account.

The upstream connection pushes body bytes to a :class:`_Pump` from its ``data_received`` callback
(``Http1Response.stream_to``); the pump accounts them and writes the result to the client at once
(``downstream.DirectDownstream``: no task wake-up per chunk) or queues it for the ASGI ``send``
(``downstream.AsgiDownstream``, any other server). The relay task only wakes when the stream ends,
the client disconnects, or the client falls behind: then the pod connection stops being read
(``pause_reading``) until the client's buffer drains, so a slow reader slows the pod's writes
instead of growing the proxy's memory.

Every network read from the pod becomes at most one downstream write: the complete events in it
(plus any held-back partial event from the previous read) are passed on as one bytes object, and
only a trailing partial event is held back. Accounting works on that whole buffer: once the first
content chunk has been seen, a buffer without ``"usage"``, ``"error"`` or ``[DONE]`` is counted
with ``bytes.count`` and forwarded unsplit; anything else (and every buffer before the first
token) is split into events and inspected one by one. The relay drops the trailing usage chunk
when only the proxy asked for it, detects the first content chunk (→ ``router.on_first_token``,
timed when the bytes arrive), counts content chunks, reads ``usage`` from the final chunk, and
reports the outcome exactly once (→ ``router.on_complete``). A pod that dies mid-stream (or closes
the stream without ``[DONE]``) ends the client's stream with an SSE error event and
``data: [DONE]``; a client that goes away closes the pod connection (the pod sees the disconnect).
"""
from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import anyio
from starlette.types import Receive, Scope, Send

from router_client.proxy.downstream import Downstream, end_message, open_downstream
from router_client.proxy.metrics import Outcome
from router_client.proxy.sse import (
    NEEDS_INSPECTION,
    complete_end,
    count_data_events,
    error_event,
    inspect,
    split_events,
)
from router_client.proxy.upstream import UpstreamResponse

Report = Callable[[Outcome], None]
_USAGE, _ERROR, _DONE = NEEDS_INSPECTION


class StreamRelay:
    """Accounting of one streamed response: ``account`` each upstream read, ``end_bytes`` at the
    end, then ``finish()`` (idempotent: closes the upstream response and reports)."""

    def __init__(self, upstream: UpstreamResponse, *, started: float, strip_usage: bool,
                 on_first_token: Callable[[], None], report: Report,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._upstream = upstream
        self._started = started
        self._strip_usage = strip_usage
        self._on_first_token = on_first_token
        self._report = report
        self._clock = clock
        self._tail = b""
        self._first: float | None = None
        self._tokens = 0
        self._usage: dict[str, Any] | None = None
        self._done = False
        self._error_code: str | None = None
        self._finished = False

    @property
    def upstream(self) -> UpstreamResponse:
        return self._upstream

    def end_bytes(self, error: str | None) -> bytes:
        """What the client still gets after the upstream body ended (``error``: why it broke): the
        held-back partial event of a cut stream, plus an error event if ``[DONE]`` never came."""
        if error is not None:
            self._error_code = "midstream"
            return error_event(f"upstream pod failed mid-stream: {error}", "upstream_error")
        out, self._tail = self._tail, b""
        if not self._done and self._error_code is None:
            self._error_code = "midstream"
            out += error_event("upstream pod closed the stream before [DONE]", "upstream_error")
        return out

    def account(self, data: bytes) -> bytes:
        """Account one upstream read; returns the bytes to forward now (complete events only)."""
        buf = self._tail + data if self._tail else data
        end = complete_end(buf)
        if end == len(buf):
            self._tail = b""
        else:
            self._tail = buf[end:]
            if end == 0:
                return b""
            buf = buf[:end]
        if self._first is not None and _USAGE not in buf and _ERROR not in buf and _DONE not in buf:
            self._tokens += count_data_events(buf)
            return buf
        return self._inspect_events(buf)

    def _inspect_events(self, buf: bytes) -> bytes:
        """The slow path: split, JSON-inspect each event, drop the proxy's own usage chunk."""
        events = split_events(buf)
        keep: list[bytes] = []
        for event in events:
            if self._first is not None and _USAGE not in event and _ERROR not in event:
                if event.startswith(b"data: [DONE]"):
                    self._done = True
                elif event.startswith(b"data:"):
                    self._tokens += 1  # after the first token every plain data event counts (as the fast path)
                keep.append(event)
                continue
            chunk = inspect(event)
            if chunk.content:
                self._tokens += 1
                if self._first is None:
                    self._first = self._clock()
                    self._on_first_token()
            if chunk.usage is not None:
                self._usage = chunk.usage
            if chunk.error:
                self._error_code = "upstream_event"
            if chunk.done:
                self._done = True
            if chunk.usage_only and self._strip_usage:
                continue
            keep.append(event)
        if len(keep) == len(events):
            return buf
        return b"".join(keep)

    def cancelled(self) -> None:
        if self._error_code is None and not self._done:
            self._error_code = "client_disconnect"

    async def finish(self) -> None:
        """Close the upstream response and report the outcome (once)."""
        if self._finished:
            return
        self._finished = True
        with anyio.CancelScope(shield=True):
            await self._upstream.aclose()
        end = self._clock()
        e2e_ms = (end - self._started) * 1000.0
        ttft_ms = (self._first - self._started) * 1000.0 if self._first is not None else e2e_ms
        usage = self._usage or {}
        completion = usage.get("completion_tokens")
        prompt = usage.get("prompt_tokens")
        self._report(Outcome(
            ttft_ms=ttft_ms, e2e_ms=e2e_ms,
            output_tokens=completion if isinstance(completion, int) else self._tokens,
            prompt_tokens=prompt if isinstance(prompt, int) else None,
            error_code=self._error_code))


class _Pump:
    """The body sink on the upstream connection: account → write to the client, in the callback.
    Wakes the relay task only for: end of body, client gone, client too slow (upstream paused)."""

    __slots__ = ("_account", "_upstream", "_down", "_signalled", "_waiter", "ended", "error", "paused", "left")

    def __init__(self, relay: StreamRelay, down: Downstream) -> None:
        self._account = relay.account
        self._upstream = relay.upstream
        self._down = down
        self._signalled = False
        self._waiter: asyncio.Future[None] | None = None
        self.ended = False
        self.error: str | None = None
        self.paused = False
        self.left = False

    def body(self, data: bytes) -> None:
        out = self._account(data)
        if not out or self.left:
            return
        down = self._down
        if down.gone():
            self.client_left()
            return
        down.write(out)
        if down.wakes_per_write:
            self._wake()
        if not self.paused and down.paused():
            self.paused = True
            self._upstream.pause_reading()
            self._wake()

    def end(self, error: str | None) -> None:
        self.ended = True
        self.error = error
        self._wake()

    def client_left(self) -> None:
        self.left = True
        self._wake()

    def _wake(self) -> None:
        self._signalled = True
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    async def wait(self) -> None:
        if not self._signalled:
            self._waiter = asyncio.get_running_loop().create_future()
            await self._waiter
            self._waiter = None
        self._signalled = False


class RelayResponse:
    """ASGI response streaming a ``StreamRelay``; closes the pod connection when the client leaves.
    ``count_path`` gets ``"direct"`` or ``"asgi"`` (which downstream writer the stream used)."""

    def __init__(self, relay: StreamRelay, status: int, headers: list[tuple[bytes, bytes]],
                 count_path: Callable[[str], None] = lambda _: None) -> None:
        self._relay = relay
        self._status = status
        self._headers = headers
        self._count_path = count_path

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        relay = self._relay
        watch: asyncio.Task[None] | None = None
        try:
            await send({"type": "http.response.start", "status": self._status, "headers": self._headers})
            down = open_downstream(scope, send, self._count_path)
            pump = _Pump(relay, down)
            watch = asyncio.get_running_loop().create_task(_watch_disconnect(receive, pump))
            relay.upstream.stream_to(pump)
            if await _run(pump, down, relay.upstream):
                await send(end_message(relay.end_bytes(pump.error)))
            else:
                relay.cancelled()
        except OSError:
            relay.cancelled()
        except asyncio.CancelledError:
            relay.cancelled()
            raise
        finally:
            if watch is not None:
                watch.cancel()
            await relay.finish()


async def _run(pump: _Pump, down: Downstream, upstream: UpstreamResponse) -> bool:
    """Until the upstream body ends (True) or the client leaves (False)."""
    while True:
        await pump.wait()
        await down.flush()
        if pump.left or down.gone():
            return False
        if pump.ended:
            return True
        if pump.paused:
            await down.drain()
            if pump.left or down.gone():
                return False
            pump.paused = False
            upstream.resume_reading()


async def _watch_disconnect(receive: Receive, pump: _Pump) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass
    pump.client_left()
