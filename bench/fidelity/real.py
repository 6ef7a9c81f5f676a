"""Play a fidelity stream against one real engine, open loop: every request is sent at its arrival time.

Prompts (token ids) are built before the clock starts; each request streams on its own task. The outcome
of a request is timed from the moment it was handed to the HTTP client; ``late_s`` says how far behind its
schedule the sender was (the load generator shares the machine).
"""

from __future__ import annotations

import asyncio
import time

from bench.fidelity.engine_run import log
from bench.fidelity.engine_stream import StreamTiming, engine_client, stream_completion
from bench.fidelity.metrics import Outcome
from bench.fidelity.workload import WORKLOAD_BLOCK, Stream

PROGRESS_EVERY_S = 15.0


async def _progress(done: list[StreamTiming], total: int, start: float) -> None:
    while True:
        await asyncio.sleep(PROGRESS_EVERY_S)
        log(f"  real: {len(done)}/{total} requests done after {time.monotonic() - start:.0f} s")


async def play(url: str, stream: Stream, vocab: int, model: str = "tiny") -> tuple[list[Outcome], float]:
    """Outcomes in request order and the largest send delay behind schedule (s)."""
    prompts = [r.token_ids(WORKLOAD_BLOCK, vocab) for r in stream.requests]
    done: list[StreamTiming] = []
    late = 0.0

    async def one(ids: list[int], max_tokens: int) -> StreamTiming:
        timing = await stream_completion(client, url, ids, max_tokens, model)
        done.append(timing)
        return timing

    async with engine_client(max_connections=4096) as client:
        start = time.monotonic()
        ticker = asyncio.create_task(_progress(done, len(prompts), start))
        tasks = []
        for req, ids in zip(stream.requests, prompts, strict=True):
            await asyncio.sleep(max(0.0, start + req.arrival_s - time.monotonic()))
            late = max(late, time.monotonic() - start - req.arrival_s)
            tasks.append(asyncio.create_task(one(ids, req.output_tokens)))
        timings = await asyncio.gather(*tasks)
        ticker.cancel()
    failed = [t for t in timings if not t.ok]
    if failed:
        raise RuntimeError(f"{len(failed)} of {len(timings)} requests failed, first: {failed[0].status} "
                           f"{failed[0].error}")
    return [Outcome(t.sent_at - start, t.ttft_s, t.tpot_s, t.e2e_s) for t in timings], late
