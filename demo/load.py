"""Open-loop load through the router with an OpenAI-style streaming client (httpx).

Each request is sent at its (rate-scaled) trace arrival time with ``x-request-id: demo-<index>``; the
client measures TTFT at the first content chunk (wall-clock stamps too, so the router's own records of the
same request can split the client's latency into its parts), counts chunks, and records where the router
sent it and what it predicted. :class:`LoopLag` measures how late the load generator's own event loop runs.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

import httpx
import orjson

from demo.workload import DemoRequest


@dataclass
class Record:
    index: int
    sent_at: float
    request_id: str = ""
    sent_wall: float = 0.0
    """Wall-clock seconds when the request was handed to the HTTP client."""
    written_wall: float = 0.0
    """Wall-clock seconds when the HTTP client started writing the request to its connection."""
    status: int = 0
    pool: str = ""
    pod: str = ""
    fallback: bool = False
    predicted_ttft_ms: float | None = None
    predicted_tpot_ms: float | None = None
    ttft_ms: float | None = None
    e2e_ms: float | None = None
    chunks: int = 0
    error: str = ""
    shed_probe: bool = False


class LoopLag:
    """How late ``asyncio.sleep(tick)`` wakes up on the load generator's loop: the delay any event (a first
    token arriving, a request due) waits before the client handles it."""

    def __init__(self, tick_s: float = 0.01) -> None:
        self.tick_s = tick_s
        self.samples_ms: list[float] = []

    async def run(self) -> None:
        while True:
            before = time.monotonic()
            await asyncio.sleep(self.tick_s)
            self.samples_ms.append(max(0.0, (time.monotonic() - before - self.tick_s) * 1000.0))


@dataclass
class LoadStats:
    records: list[Record] = field(default_factory=list)
    in_flight: int = 0
    lag: LoopLag = field(default_factory=LoopLag)

    def done(self) -> list[Record]:
        return [r for r in self.records if r.status or r.error]


async def send(client: httpx.AsyncClient, url: str, req: DemoRequest, stats: LoadStats,
               headers: dict[str, str] | None = None, shed_probe: bool = False) -> Record:
    request_id = f"demo-{'shed-' if shed_probe else ''}{req.index}"
    rec = Record(req.index, time.monotonic(), request_id, time.time(), shed_probe=shed_probe)
    stats.records.append(rec)
    stats.in_flight += 1
    async def trace(event: str, info: dict[str, object]) -> None:
        if event == "http11.send_request_headers.started":
            rec.written_wall = time.time()

    try:
        async with client.stream("POST", url + req.route, json=req.body,
                                 headers={**(headers or {}), "x-request-id": request_id},
                                 extensions={"trace": trace}) as resp:
            rec.status = resp.status_code
            rec.pool = resp.headers.get("x-routed-pool", "")
            rec.pod = resp.headers.get("x-routed-pod", "")
            rec.fallback = resp.headers.get("x-routing-fallback") == "true"
            predicted = resp.headers.get("x-predicted-ttft-ms")
            rec.predicted_ttft_ms = float(predicted) if predicted else None
            predicted = resp.headers.get("x-predicted-tpot-ms")
            rec.predicted_tpot_ms = float(predicted) if predicted else None
            if resp.status_code != 200:
                body = await resp.aread()
                rec.error = _error_type(body)
                return rec
            async for line in resp.aiter_lines():
                _account(rec, line)
    except httpx.HTTPError as exc:
        rec.error = type(exc).__name__
    finally:
        rec.e2e_ms = (time.monotonic() - rec.sent_at) * 1000.0
        stats.in_flight -= 1
    return rec


def _account(rec: Record, line: str) -> None:
    if not line.startswith("data: ") or line == "data: [DONE]":
        return
    chunk = orjson.loads(line[6:])
    if "error" in chunk:
        rec.error = str(chunk["error"].get("type", "stream_error"))
        return
    choices = chunk.get("choices") or []
    if choices and (choices[0].get("delta", {}).get("content") or choices[0].get("text")):
        rec.chunks += 1
        if rec.ttft_ms is None:
            rec.ttft_ms = (time.monotonic() - rec.sent_at) * 1000.0


def _error_type(body: bytes) -> str:
    try:
        return str(orjson.loads(body)["error"]["type"])
    except (orjson.JSONDecodeError, KeyError, TypeError):
        return "http_error"


async def run_load(url: str, requests: Iterable[DemoRequest], stats: LoadStats, stop_at: float,
                   shed_every_s: float = 10.0) -> None:
    """Send each request at its arrival time until ``stop_at`` (monotonic); then wait for the rest."""
    limits = httpx.Limits(max_connections=2000, max_keepalive_connections=200)
    timeout = httpx.Timeout(connect=5.0, read=60.0, write=10.0, pool=30.0)
    lag = asyncio.create_task(stats.lag.run())
    async with httpx.AsyncClient(limits=limits, timeout=timeout) as client:
        start = time.monotonic()
        tasks: list[asyncio.Task[Record]] = []
        next_shed = start + 3.0
        for req in requests:
            at = start + req.arrival_s
            if at >= stop_at:
                break
            await asyncio.sleep(max(0.0, at - time.monotonic()))
            tasks.append(asyncio.create_task(send(client, url, req, stats)))
            if time.monotonic() >= next_shed:
                next_shed += shed_every_s
                tasks.append(asyncio.create_task(send(client, url, req, stats, SHED_PROBE_HEADERS, True)))
        if tasks:
            await asyncio.wait(tasks, timeout=30.0)
        for task in tasks:
            task.cancel()
    lag.cancel()


SHED_PROBE_HEADERS = {"x-llm-d-slo-ttft-ms": "1", "x-llm-d-slo-tpot-ms": "0.1", "x-llm-d-priority": "sheddable"}
"""A sheddable request with an impossible SLO: the router answers 429 (shown in the demo)."""
