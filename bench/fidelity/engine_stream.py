"""One streamed ``/v1/completions`` request to a real vLLM engine, timed on the client.

The prompt is a list of token ids (no tokenizer on either side); ``ignore_eos`` makes the engine generate
exactly ``max_tokens`` tokens and ``return_token_ids`` puts the ids of every chunk's tokens in the chunk, so
a chunk that carries several tokens (the API server merges outputs it could not send in time) is counted
right (a server without ``token_ids``, e.g. ``sim.pod``, counts one token per chunk). Times are
``time.monotonic()`` seconds; TTFT is the first chunk with a token, E2E the last one.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import httpx
import orjson


@dataclass
class StreamTiming:
    sent_at: float
    token_times: list[float] = field(default_factory=list)
    """Client receive time of every generated token (tokens of one chunk share the chunk's time)."""
    prompt_tokens: int = 0
    cached_tokens: int | None = None
    status: int = 0
    error: str = ""

    @property
    def ok(self) -> bool:
        return self.status == 200 and not self.error and bool(self.token_times)

    @property
    def ttft_s(self) -> float:
        return self.token_times[0] - self.sent_at

    @property
    def e2e_s(self) -> float:
        return self.token_times[-1] - self.sent_at

    @property
    def tpot_s(self) -> float | None:
        """``(e2e - ttft) / (tokens - 1)``; None for a single token."""
        n = len(self.token_times)
        return None if n < 2 else (self.token_times[-1] - self.token_times[0]) / (n - 1)


def engine_client(max_connections: int = 512) -> httpx.AsyncClient:
    """An HTTP client for engines: idle connections are dropped after 1 s, before uvicorn's 5 s keep-alive
    timeout closes them under a request about to be sent (a ``ReadError`` on a reused connection)."""
    limits = httpx.Limits(max_connections=max_connections, keepalive_expiry=1.0)
    timeout = httpx.Timeout(connect=10.0, read=300.0, write=30.0, pool=300.0)
    return httpx.AsyncClient(timeout=timeout, limits=limits)


def completion_body(prompt_ids: Sequence[int], max_tokens: int, model: str) -> bytes:
    return orjson.dumps({
        "model": model, "prompt": list(prompt_ids), "max_tokens": max_tokens, "ignore_eos": True,
        "temperature": 0.0, "stream": True, "stream_options": {"include_usage": True}, "return_token_ids": True,
    })


async def stream_completion(client: httpx.AsyncClient, url: str, prompt_ids: Sequence[int], max_tokens: int,
                            model: str = "tiny") -> StreamTiming:
    """Send one request and time every token; transport errors end up in ``error``, never raised."""
    body = completion_body(prompt_ids, max_tokens, model)
    timing = StreamTiming(time.monotonic())
    try:
        async with client.stream("POST", url + "/v1/completions", content=body,
                                 headers={"content-type": "application/json"}) as resp:
            timing.status = resp.status_code
            if resp.status_code != 200:
                timing.error = (await resp.aread())[:200].decode(errors="replace")
                return timing
            async for line in resp.aiter_lines():
                _account(timing, line)
    except httpx.HTTPError as exc:
        timing.error = type(exc).__name__
    return timing


def _account(timing: StreamTiming, line: str) -> None:
    if not line.startswith("data: ") or line == "data: [DONE]":
        return
    now = time.monotonic()
    chunk = orjson.loads(line[6:])
    if "error" in chunk:
        timing.error = str(chunk["error"])[:200]
        return
    for choice in chunk.get("choices") or []:
        ids = choice.get("token_ids")
        timing.token_times.extend([now] * (len(ids) if ids is not None else 1))
    usage = chunk.get("usage")
    if usage:
        timing.prompt_tokens = int(usage.get("prompt_tokens") or 0)
        details = usage.get("prompt_tokens_details") or {}
        cached = details.get("cached_tokens")
        timing.cached_tokens = None if cached is None else int(cached)
