"""Open-loop streaming load through the proxy (``demo.load.send`` per request: TTFT at the first content chunk,
chunks counted), every request at its arrival time, then a bounded drain; what is still open then is cancelled
(the client disconnect aborts it on the engine) and counted as an error."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence

import httpx

from demo.load import LoadStats, Record, send
from demo.workload import DemoRequest


async def run_open_loop(url: str, requests: Sequence[DemoRequest], headers: dict[str, str], drain_s: float,
                        progress: Callable[[LoadStats], None] | None = None,
                        progress_every_s: float = 10.0) -> LoadStats:
    stats = LoadStats()
    limits = httpx.Limits(max_connections=1000, max_keepalive_connections=100)
    timeout = httpx.Timeout(connect=10.0, read=120.0, write=10.0, pool=60.0)
    async with httpx.AsyncClient(limits=limits, timeout=timeout) as client:
        start = time.monotonic()
        next_report = start + progress_every_s
        tasks: dict[asyncio.Task[Record], int] = {}
        for req in requests:
            await asyncio.sleep(max(0.0, start + req.arrival_s - time.monotonic()))
            tasks[asyncio.create_task(send(client, url, req, stats, headers))] = req.index
            if progress is not None and time.monotonic() >= next_report:
                next_report += progress_every_s
                progress(stats)
        cut: set[int] = set()
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=drain_s)
            cut = {tasks[task] for task in pending}
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
    for rec in stats.records:
        if rec.index in cut:
            rec.error = "drain_timeout"
        elif rec.status == 200 and not rec.error and rec.ttft_ms is None:
            rec.error = "no_tokens"
    return stats


def tpot_ms(rec: Record) -> float | None:
    """(end − first token) / (chunks − 1): the client's time per output token (one token per chunk)."""
    if rec.ttft_ms is None or rec.e2e_ms is None or rec.chunks < 2:
        return None
    return (rec.e2e_ms - rec.ttft_ms) / (rec.chunks - 1)
