"""One policy's run: a fresh trainer (+ predictor) + router proxy onto the shared engines, the open-loop load,
then the router's own records of every request and its status."""

from __future__ import annotations

import asyncio
import os
import shutil
import statistics
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from bench.real_engine.load import run_open_loop
from bench.real_engine.policies import RouterPolicy, router_overrides
from bench.real_engine.workload import Workload
from demo.load import LoadStats, Record
from demo.stack import PoolSpec, Stack, StackSpec

POOL = "engine"


@dataclass(frozen=True)
class RunSettings:
    engine_urls: tuple[str, ...]
    max_model_len: int
    slo_ttft_ms: float | None
    drain_s: float
    retrain_interval_s: float
    min_samples: int
    predictor_timeout_ms: float
    seed: int
    trainer_env: Mapping[str, str] = field(default_factory=dict)
    """Extra trainer settings (the prior seed's ``LATENCY_SEED_DIR``)."""


@dataclass
class PolicyRun:
    records: list[Record]
    routed: list[dict[str, Any]]
    status: dict[str, Any]
    bundles: list[dict[str, Any]] = field(default_factory=list)
    """Bundles the predictor served during the run: seconds since the first request, version, prior."""
    load_average: dict[str, float] = field(default_factory=dict)
    """The machine's 1-minute load average when the load started and when it ended (others share the cores)."""


def stack_spec(policy: RouterPolicy, s: RunSettings) -> StackSpec:
    pool = PoolSpec(POOL, len(s.engine_urls), s.max_model_len, urls=s.engine_urls)
    return StackSpec(pools=(pool,), retrain_interval_s=s.retrain_interval_s, min_samples_for_retrain=s.min_samples,
                     predictors=policy.predictor, seed=s.seed, trainer_env=s.trainer_env,
                     router=router_overrides(policy, s.seed, {"predictor_timeout_ms": s.predictor_timeout_ms}))


def say(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


def progress_line(name: str) -> Any:
    def report(stats: LoadStats) -> None:
        done = stats.done()
        good = [r.ttft_ms for r in done[-50:] if r.status == 200 and r.ttft_ms is not None]
        p50 = f"{statistics.median(good):.0f} ms" if good else "-"
        errors = sum(1 for r in done if r.error)
        say(f"{name}: sent {len(stats.records)}, done {len(done)}, errors {errors}, in flight {stats.in_flight}, "
            f"TTFT p50 (last 50) {p50}")
    return report


def run_policy(policy: RouterPolicy, workload: Workload, s: RunSettings, workdir: Path) -> PolicyRun:
    shutil.rmtree(workdir, ignore_errors=True)  # an earlier run's trainer data would serve its bundles: not fresh
    headers = {"x-llm-d-slo-ttft-ms": f"{s.slo_ttft_ms:g}"} if s.slo_ttft_ms is not None else {}
    with Stack(stack_spec(policy, s), workdir) as stack:
        say(f"{policy.name}: router {stack.router_url} (/ui), trainer {stack.trainer_urls[POOL]}; "
            f"{len(workload.requests)} requests")
        return asyncio.run(_drive(stack, policy, workload, headers, s.drain_s))


async def _drive(stack: Stack, policy: RouterPolicy, workload: Workload, headers: dict[str, str],
                 drain_s: float) -> PolicyRun:
    bundles: list[dict[str, Any]] = []
    watch = asyncio.create_task(_watch_bundles(stack.predictor_urls.get(POOL), bundles))
    load_before = os.getloadavg()[0]
    try:
        stats = await run_open_loop(stack.router_url, workload.requests, headers, drain_s,
                                    progress_line(policy.name))
        await asyncio.sleep(1.5)
    finally:
        watch.cancel()
    load = {"start": round(load_before, 2), "end": round(os.getloadavg()[0], 2)}
    async with httpx.AsyncClient(timeout=10.0) as client:
        routed = await router_records(client, stack.router_url)
        status = (await client.get(stack.router_url + "/status")).json()
    return PolicyRun(stats.records, routed, status, bundles, load)


async def router_records(client: httpx.AsyncClient, router_url: str) -> list[dict[str, Any]]:
    """Every finished request the router recorded (``GET /ui/requests``, paged)."""
    out: list[dict[str, Any]] = []
    seq = 0
    while True:
        page = (await client.get(router_url + "/ui/requests", params={"after": seq, "limit": 5000})).json()
        out.extend(page["requests"])
        if not page["requests"]:
            return out
        seq = int(page["requests"][-1]["seq"])
        if seq >= int(page["last_seq"]):
            return out


async def _watch_bundles(predictor_url: str | None, bundles: list[dict[str, Any]]) -> None:
    if predictor_url is None:
        return
    started = time.monotonic()
    seen: int | None = None
    async with httpx.AsyncClient(timeout=2.0) as client:
        while True:
            try:
                bundle = (await client.get(predictor_url + "/status")).json()["bundle"]
                version = int(bundle["version"])
            except (httpx.HTTPError, KeyError, TypeError, ValueError):
                version = seen or 0
                bundle = {}
            if version != seen:
                seen = version
                bundles.append({"t_s": round(time.monotonic() - started, 1), "version": version,
                                "prior": bool(bundle.get("prior"))})
            await asyncio.sleep(2.0)
