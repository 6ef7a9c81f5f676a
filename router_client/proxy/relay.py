"""Streaming pass-through: relay a pod's SSE bytes to the client as they arrive, and account.

The relay yields each complete SSE event as soon as it has been read (batched per network read),
drops the trailing usage chunk when only the proxy asked for it, detects the first content
chunk (→ ``router.on_first_token``), counts content chunks, reads ``usage`` from the final chunk,
and reports the outcome exactly once (→ ``router.on_complete``). A pod that dies mid-stream (or
closes the stream without ``[DONE]``) ends the client's stream with an SSE error event and
``data: [DONE]``; a client that goes away cancels the upstream read (the pod sees the disconnect).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import anyio
from starlette.types import Receive, Scope, Send

from router_client.proxy.metrics import Outcome
from router_client.proxy.sse import SSEScanner, error_event, inspect
from router_client.proxy.upstream import UpstreamError, UpstreamResponse

Report = Callable[[Outcome], None]


class StreamRelay:
    """One streamed response: iterate ``events()``, then ``finish()`` (idempotent)."""

    def __init__(self, upstream: UpstreamResponse, *, started: float, strip_usage: bool,
                 on_first_token: Callable[[], None], report: Report,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._upstream = upstream
        self._started = started
        self._strip_usage = strip_usage
        self._on_first_token = on_first_token
        self._report = report
        self._clock = clock
        self._scanner = SSEScanner()
        self._first: float | None = None
        self._tokens = 0
        self._usage: dict[str, Any] | None = None
        self._done = False
        self._error_code: str | None = None
        self._finished = False

    async def events(self) -> AsyncIterator[bytes]:
        try:
            async for data in self._upstream.chunks():
                out = self._account(data)
                if out:
                    yield out
        except UpstreamError as exc:
            self._error_code = "midstream"
            yield error_event(f"upstream pod failed mid-stream: {exc}", "upstream_error")
            return
        tail = self._scanner.tail()
        if tail:
            yield tail
        if not self._done and self._error_code is None:
            self._error_code = "midstream"
            yield error_event("upstream pod closed the stream before [DONE]", "upstream_error")

    def _account(self, data: bytes) -> bytes:
        """Split into events and account; after the first token, plain chunks are counted unparsed."""
        events = self._scanner.feed(data)
        keep: list[bytes] = []
        for event in events:
            if self._first is not None and b'"usage"' not in event and b'"error"' not in event:
                if event.startswith(b"data: [DONE]"):
                    self._done = True
                elif event.startswith(b"data:"):
                    self._tokens += 1
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
        return b"".join(keep) if len(keep) != 1 else keep[0]

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
                async for data in self._relay.events():
                    await send({"type": "http.response.body", "body": data, "more_body": True})
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
