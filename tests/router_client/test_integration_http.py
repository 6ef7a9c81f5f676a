"""Over real HTTP on loopback: the library in front of sim pods (two pools) with a real trainer and a real
predictor per pool (subprocesses, as deployed: the suite's shared ``stack``). A decision per request, samples reach
the trainers, a retrain changes what the router predicts for the same request and endpoint state."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx
import orjson
import pytest

from demo.stack import Stack
from router_client.config import RouterConfig
from router_client.router import Decision, RequestInfo, Router
from tests.waiting import wait_for_async

SYSTEM = "You are a careful assistant who answers briefly. " * 8


@pytest.fixture
def pools(stack: Stack) -> list[dict[str, Any]]:
    """The shared stack's pools (short: 2 sim pods × 4k context, long: 1 × 32k; a trainer + predictor each)."""
    return list(stack.router_config()["pools"])


async def _stream(http: httpx.AsyncClient, router: Router, d: Decision, body: dict[str, Any]) -> None:
    """Send the request where the router said, time the stream, report back to the router."""
    assert d.pod_url is not None
    start = time.monotonic()
    first: float | None = None
    tokens, prompt_tokens = 0, None
    async with http.stream("POST", d.pod_url + "/v1/completions", json=body) as resp:
        assert resp.status_code == 200
        async for line in resp.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = orjson.loads(line[6:])
            if chunk.get("usage"):
                prompt_tokens = chunk["usage"]["prompt_tokens"]
            if chunk.get("choices"):
                tokens += 1
                if first is None:
                    first = time.monotonic()
                    router.on_first_token(d)
    end = time.monotonic()
    assert first is not None
    router.on_complete(d, (first - start) * 1e3, (end - start) * 1e3, tokens, prompt_tokens)


def _request(i: int, long: bool) -> tuple[RequestInfo, dict[str, Any]]:
    words = 2600 if long else 50 + 37 * (i % 9)  # long: > 2048 budget tokens → long pool ("total")
    prompt = SYSTEM + f"Question {i}: " + "why " * words
    max_tokens = 100 if long else 24
    body = {"model": "m", "prompt": prompt, "max_tokens": max_tokens, "output_tokens": 40 if long else 1 + i % 24,
            "stream": True, "stream_options": {"include_usage": True}}
    raw = orjson.dumps(body)
    info = RequestInfo("/v1/completions", len(raw), None, max_tokens, prompt, None, request_id=f"q{i}")
    return info, body


async def _traffic(router: Router, n: int, concurrency: int = 6, first: int = 0) -> list[Decision]:
    sem = asyncio.Semaphore(concurrency)
    decisions: list[Decision] = []
    async with httpx.AsyncClient(timeout=30.0) as http:
        async def one(i: int) -> None:
            async with sem:
                info, body = _request(i, long=i % 8 == 0)
                d = await router.decide(info)
                decisions.append(d)
                await _stream(http, router, d, body)

        await asyncio.gather(*(one(i) for i in range(first, first + n)))
    return decisions


async def _more_traffic(router: Router, stop: asyncio.Event) -> int:
    """Rounds of 40 more requests until ``stop``: the shared stack's trainer may keep its live models after a fit
    (a challenger that does not win is not published), so the test feeds it until a new bundle is out."""
    sent = 0
    while not stop.is_set():
        sent += len(await _traffic(router, 40, first=100_000 + sent))
    return sent


def _predictor_load(purl: str) -> Any:
    return httpx.get(purl + "/status", timeout=5).json().get("last_model_load")


def _trainer_rows(turl: str) -> int:
    data = httpx.get(turl + "/data/status", timeout=5).json()
    return int(data["training_data"]["total_samples"]) + int(data["test_data"]["total_samples"])


@pytest.mark.timeout(240)
def test_two_pools_decide_report_and_learn(pools: list[dict[str, Any]]) -> None:
    cfg = RouterConfig.model_validate({
        "pools": pools, "predictor_timeout_ms": 1000, "predictor_http_timeout_ms": 2000,
        "scraper": {"interval_s": 0.05}, "reporter": {"flush_interval_s": 0.2},
        "scheduler": {"seed": 3}})
    short, long = pools
    probe, _ = _request(10_001, long=False)

    async def main() -> tuple[list[Decision], Decision, Decision, list[Any], list[int]]:
        router = Router(cfg)
        await router.start()
        try:
            await asyncio.sleep(0.3)
            before = await router.decide(probe)
            router.on_complete(before, 0.0, 0.0, 0, error=True)
            loads = [_predictor_load(p["predictor_urls"][0]) for p in (short, long)]
            rows0 = [_trainer_rows(p["trainer_url"]) for p in (short, long)]
            decisions = await _traffic(router, 160)
            stop = asyncio.Event()
            feeding = asyncio.create_task(_more_traffic(router, stop))
            try:
                await wait_for_async(lambda: _predictor_load(short["predictor_urls"][0]) not in (loads[0], None),
                                     timeout=120, interval=0.5, what="a retrain reaches the short pool's predictor")
            finally:
                stop.set()
                await feeding
            await asyncio.sleep(0.5)
            after = await router.decide(probe)
            router.on_complete(after, 0.0, 0.0, 0, error=True)
            rows = [_trainer_rows(p["trainer_url"]) - r for p, r in zip((short, long), rows0, strict=True)]
            return decisions, before, after, loads, rows
        finally:
            await router.aclose()

    decisions, before, after, loads, rows = asyncio.run(main())
    assert len(decisions) == 160 and not any(d.shed for d in decisions)
    for d in decisions:
        pool = short if d.pool == "short" else long
        assert d.pod_url in pool["pods"]
        assert (d.pool == "long") == (d.request_id in {f"q{i}" for i in range(0, 160, 8)})
    assert rows[0] >= 100 and rows[1] >= 15, rows  # this test's samples reached each pool's trainer
    assert _predictor_load(short["predictor_urls"][0]) != loads[0], "no retrain reached the predictor"
    assert not after.fallback and after.predicted_ttft_ms is not None
    assert before.fallback or (before.predicted_ttft_ms, before.predicted_tpot_ms) != (
        after.predicted_ttft_ms, after.predicted_tpot_ms)
