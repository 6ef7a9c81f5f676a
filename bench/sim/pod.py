"""Pod-server throughput: concurrent SSE streams against one simulated pod over loopback.

    python -m bench.sim.pod [--streams 200] [--tokens 32] [--time-scale 0.01]

Reports wall time, SSE chunks/s delivered to clients and the simulated TTFT / TPOT the pod saw.
The HTTP stack (not the engine) is the limit at small time scales.
"""

from __future__ import annotations

import argparse
import asyncio
import time

import httpx

from sim.engine import EngineConfig
from sim.pod import PodConfig, run_pods


async def _one(client: httpx.AsyncClient, url: str, tokens: int) -> int:
    body = {"prompt": "bench " * 200, "output_tokens": tokens, "stream": True}
    chunks = 0
    async with client.stream("POST", url + "/v1/completions", json=body) as r:
        async for line in r.aiter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                chunks += 1
    return chunks


async def _run(url: str, streams: int, tokens: int) -> tuple[float, int]:
    limits = httpx.Limits(max_connections=streams, max_keepalive_connections=streams)
    async with httpx.AsyncClient(timeout=120, limits=limits) as client:
        t0 = time.perf_counter()
        counts = await asyncio.gather(*(_one(client, url, tokens) for _ in range(streams)))
        return time.perf_counter() - t0, sum(counts)


def _hist_mean(text: str, name: str) -> float:
    vals = {}
    for line in text.splitlines():
        for suffix in ("_sum", "_count"):
            if line.startswith(name + suffix + "{"):
                vals[suffix] = float(line.rsplit(" ", 1)[1])
    return vals.get("_sum", 0.0) / vals["_count"] if vals.get("_count") else 0.0


HEADER = ("| load | time scale | wall s | SSE chunks/s | sim TTFT mean ms | sim TPOT mean ms |\n"
          "| --- | ---: | ---: | ---: | ---: | ---: |")


def pod_row(streams: int, tokens: int, time_scale: float) -> str:
    cfg = PodConfig(EngineConfig.from_preset("llama3-8b-a100"), time_scale=time_scale)
    with run_pods([cfg]) as pods:
        wall, chunks = asyncio.run(_run(pods.urls[0], streams, tokens))
        metrics = httpx.get(pods.urls[0] + "/metrics", timeout=10).text
    ttft = _hist_mean(metrics, "vllm:time_to_first_token_seconds") * 1e3
    tpot = _hist_mean(metrics, "vllm:time_per_output_token_seconds") * 1e3
    return (f"| {streams} streams x {tokens} tokens | {time_scale:g} | {wall:.2f} | {chunks / wall:,.0f} | "
            f"{ttft:.0f} | {tpot:.1f} |")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="bench.sim.pod")
    p.add_argument("--streams", type=int, default=200)
    p.add_argument("--tokens", type=int, default=32)
    p.add_argument("--time-scale", type=float, action="append", help="default: 1, 0.3, 0.1, 0.01")
    args = p.parse_args(argv)
    print(HEADER)
    for scale in args.time_scale or [1.0, 0.3, 0.1, 0.01]:
        print(pod_row(args.streams, args.tokens, scale), flush=True)


if __name__ == "__main__":
    main()
