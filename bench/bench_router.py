"""Decision overhead of the router-client library, excluding the predictor call.

``python -m bench.bench_router [--pods 16] [--decisions 20000]``

Times ``Router.decide`` end to end (classifier, prefix hashing of a ~4 KB prompt, 16 feature rows
from the snapshot, scheduling pipeline, in-flight + prefix bookkeeping) with the predictor step
answered in-process, plus ``on_complete`` (sample queued, per-pod correction and drift update,
EMA/history). Baselines in the same run: predictions without the per-pod correction, and the
composite fallback path (no predictor at all).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

from router_client.config import RouterConfig
from router_client.predictor_client import Prediction
from router_client.router import Features, RequestInfo, Router

SYSTEM = "You are a helpful assistant for a retail bank. Answer briefly and cite the policy. " * 12


class InstantPredictions(Router):
    """The predictor call replaced by an in-process answer, so only the library is timed."""

    async def _predict(self, pool: str, rows: list[Features],
                       started: float) -> tuple[list[Prediction] | None, str | None]:
        return [Prediction(50.0 + 20.0 * float(r["num_request_running"]) + float(r["num_request_waiting"]),
                           10.0 + float(r["num_request_running"])) for r in rows], None


def _config(pods: int, predictors: bool, correction: bool = True) -> RouterConfig:
    urls = [f"http://127.0.0.1:{20000 + i}" for i in range(pods)]
    return RouterConfig.model_validate({
        "pools": [{"name": "short", "pods": urls, "max_context": 8192, "trainer_url": "http://127.0.0.1:1",
                   "predictor_urls": ["http://127.0.0.1:1"] if predictors else []}],
        "scheduler": {"seed": 1}, "scraper": {"interval_s": 1000.0}, "reporter": {"flush_interval_s": 1000.0},
        "correction": {"enabled": correction}})


def _info(i: int) -> RequestInfo:
    return RequestInfo("/v1/chat/completions", 4200, None, 128, SYSTEM + f"user {i % 50}: question {i}",
                       f"sys{i % 4}", 500.0, None, False, f"r{i}")


async def _measure(router: Router, n: int, in_flight: int) -> tuple[list[float], list[float]]:
    decide_us, complete_us = [], []
    window = []
    for i in range(n):
        t0 = time.perf_counter()
        d = await router.decide(_info(i))
        decide_us.append((time.perf_counter() - t0) * 1e6)
        window.append(d)
        if len(window) > in_flight:
            old = window.pop(0)
            t1 = time.perf_counter()
            router.on_first_token(old)
            router.on_complete(old, 120.0, 1400.0, 100, 1000)
            complete_us.append((time.perf_counter() - t1) * 1e6)
    return decide_us, complete_us


def _pct(xs: list[float], q: float) -> float:
    return sorted(xs)[min(len(xs) - 1, int(q * len(xs)))]


async def run(pods: int, n: int) -> list[tuple[str, list[float]]]:
    out = []
    for label, cls, predictors, correction in (
            ("decide, predictions (instant)", InstantPredictions, True, True),
            ("decide, predictions, correction off", InstantPredictions, True, False),
            ("decide, composite fallback (baseline)", Router, False, True)):
        router = cls(_config(pods, predictors, correction))
        await router.start()
        await _measure(router, 2000, 64)  # warm-up
        decide, complete = await _measure(router, n, 64)
        await router.aclose()
        out.append((label, decide))
        if predictors:
            out.append(("on_complete" + ("" if correction else ", correction off"), complete))
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--pods", type=int, default=16)
    p.add_argument("--decisions", type=int, default=20000)
    args = p.parse_args()
    rows = asyncio.run(run(args.pods, args.decisions))
    print(f"router_client decision overhead, {args.pods} pods, {args.decisions} decisions (machine: 2 cores)")
    print(f"| {'path':<40} | p50 µs | p90 µs | p99 µs | mean µs |")
    print(f"|{'-' * 42}|-------:|-------:|-------:|--------:|")
    for label, xs in rows:
        print(f"| {label:<40} | {_pct(xs, 0.5):6.1f} | {_pct(xs, 0.9):6.1f} | {_pct(xs, 0.99):6.1f} "
              f"| {statistics.fmean(xs):7.1f} |")


if __name__ == "__main__":
    main()
