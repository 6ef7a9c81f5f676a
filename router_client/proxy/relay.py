"""Streaming pass-through: relay a pod's SSE bytes to the client as they arrive, and account.

Every network read from the pod becomes at most one downstream send: the complete events in it
(plus any held-back partial event from the previous read) are passed on as one bytes object, and
only a trailing partial event is held back. Accounting works on that whole buffer: once the first
content chunk has been seen, a buffer without ``"usage"``, ``"error"`` or ``[DONE]`` is counted
with ``bytes.count`` and forwarded unsplit; anything else (and every buffer before the first
token) is split into events and inspected one by one. The relay drops the trailing usage chunk
when only the proxy asked for it, detects the first content chunk (→ ``router.on_first_token``),
counts content chunks, reads ``usage`` from the final chunk, and reports the outcome exactly once
(→ ``router.on_complete``). A pod that dies mid-stream (or closes the stream without ``[DONE]``)
ends the client's stream with an SSE error event and ``data: [DONE]``; a client that goes away
cancels the upstream read (the pod sees the disconnect).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import anyio
from starlette.types import Receive, Scope, Send

from router_client.proxy.metrics import Outcome
from router_client.proxy.sse import (
    NEEDS_INSPECTION,
    complete_end,
    count_data_events,
    error_event,
    inspect,
    split_events,
)
from router_client.proxy.upstream import UpstreamError, UpstreamResponse

Report = Callable[[Outcome], None]
_USAGE, _ERROR, _DONE = NEEDS_INSPECTION


class StreamRelay:
    """One streamed response: ``relay(send)``, then ``finish()`` (idempotent)."""

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

    async def relay(self, send: Send) -> None:
        """Send the relayed stream as ``http.response.body`` messages (``more_body=True``): one
        per upstream read, then the end-of-stream bytes if any (the caller ends the body)."""
        account = self.account
        try:
            async for data in self._upstream.chunks():
                out = account(data)
                if out:
                    await send({"type": "http.response.body", "body": out, "more_body": True})
        except UpstreamError as exc:
            self._error_code = "midstream"
            await send({"type": "http.response.body", "more_body": True,
                        "body": error_event(f"upstream pod failed mid-stream: {exc}", "upstream_error")})
            return
        end = self._end_of_stream()
        if end:
            await send({"type": "http.response.body", "body": end, "more_body": True})

    def _end_of_stream(self) -> bytes:
        """The held-back partial event (a cut stream), plus an error event if ``[DONE]`` never came."""
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


class RelayResponse:
    """ASGI response streaming a ``StreamRelay``; stops reading upstream when the client disconnects."""

    def __init__(self, relay: StreamRelay, status: int, headers: list[tuple[bytes, bytes]]) -> None:
        self._relay = relay
        self._status = status
        self._headers = headers

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._watch_disconnect, receive, tg.cancel_scope)
                await send({"type": "http.response.start", "status": self._status, "headers": self._headers})
                await self._relay.relay(send)
                await send({"type": "http.response.body", "body": b"", "more_body": False})
                tg.cancel_scope.cancel()
        except OSError:
            self._relay.cancelled()
        finally:
            await self._relay.finish()

    async def _watch_disconnect(self, receive: Receive, scope: anyio.CancelScope) -> None:
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                self._relay.cancelled()
                scope.cancel()
                return
