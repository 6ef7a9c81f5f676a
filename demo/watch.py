"""What the demo shows while the load runs: progress, retrain log lines, predictions changing.

It also collects what the router recorded about every finished request (``GET /ui/requests`` on the
proxy, paged by sequence number): the prediction at dispatch and the router-measured latencies the demo's
report compares.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from demo.load import LoadStats

PROBE_ROW = {"kv_cache_percentage": 0.2, "input_token_length": 1000, "num_request_waiting": 0,
             "num_request_running": 4, "num_tokens_generated": 1, "prefix_cache_score": 0.0,
             "prefill_tokens_in_flight": 1000, "decode_tokens_in_flight": 0}
"""A fixed feature row sent to each predictor's ``/predict`` whenever its bundle version changes."""


@dataclass
class BundleSeen:
    pool: str
    version: int
    at_s: float
    probe_ttft_ms: float | None
    probe_tpot_ms: float | None
    at_wall: float = 0.0
    prior: bool = False


@dataclass
class Watcher:
    trainer_logs: dict[str, Path]
    predictor_urls: dict[str, str]
    stats: LoadStats
    router_url: str = ""
    started: float = field(default_factory=time.monotonic)
    routed: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Router-side records of finished requests by request id (``/ui/requests``)."""
    _router_seq: int = 0
    retrains: list[tuple[str, float, str]] = field(default_factory=list)
    bundles: list[BundleSeen] = field(default_factory=list)
    _offsets: dict[str, int] = field(default_factory=dict)
    _versions: dict[str, int] = field(default_factory=dict)

    def say(self, text: str) -> None:
        print(f"[{time.monotonic() - self.started:6.1f}s] {text}", flush=True)

    async def run(self, progress_every_s: float = 5.0) -> None:
        next_progress = time.monotonic() + progress_every_s
        async with httpx.AsyncClient(timeout=2.0) as client:
            while True:
                self.read_retrains()
                await self.poll_predictors(client)
                await self.poll_router(client)
                if time.monotonic() >= next_progress:
                    next_progress += progress_every_s
                    self.progress()
                await asyncio.sleep(0.5)

    def read_retrains(self) -> None:
        for pool, path in self.trainer_logs.items():
            try:
                with path.open("rb") as fh:
                    fh.seek(self._offsets.get(pool, 0))
                    data = fh.read()
            except OSError:
                continue
            complete = data[: data.rfind(b"\n") + 1]
            self._offsets[pool] = self._offsets.get(pool, 0) + len(complete)
            for line in complete.decode(errors="replace").splitlines():
                if "model trained on" in line:
                    message = line.split(": ", 1)[-1]
                    self.retrains.append((pool, time.monotonic() - self.started, message))
                    self.say(f"trainer[{pool}] {message}")

    async def poll_predictors(self, client: httpx.AsyncClient) -> None:
        for pool, url in self.predictor_urls.items():
            try:
                status = (await client.get(url + "/status")).json()
                version = int(status["bundle"]["version"])
            except (httpx.HTTPError, KeyError, TypeError, ValueError):
                continue
            if self._versions.get(pool) == version:
                continue
            self._versions[pool] = version
            ttft, tpot = await self._probe(client, url)
            self.bundles.append(BundleSeen(pool, version, time.monotonic() - self.started, ttft, tpot, time.time(),
                                           bool(status["bundle"].get("prior"))))
            probe = f"probe TTFT {ttft:.1f} ms, TPOT {tpot:.2f} ms" if ttft is not None and tpot is not None else ""
            prior = " (prior)" if status["bundle"].get("prior") else ""
            self.say(f"predictor[{pool}] serves bundle v{version}{prior}: {probe}")

    async def poll_router(self, client: httpx.AsyncClient) -> None:
        """Fetch the router's records of requests finished since the last call."""
        if not self.router_url:
            return
        while True:
            try:
                page = (await client.get(f"{self.router_url}/ui/requests",
                                         params={"after": self._router_seq, "limit": 5000})).json()
            except (httpx.HTTPError, ValueError):
                return
            for rec in page["requests"]:
                self.routed[rec["request_id"]] = rec
                self._router_seq = max(self._router_seq, int(rec["seq"]))
            if not page["requests"] or self._router_seq >= int(page["last_seq"]):
                return

    async def _probe(self, client: httpx.AsyncClient, url: str) -> tuple[float | None, float | None]:
        try:
            pred = (await client.post(url + "/predict", json=PROBE_ROW)).json()
            return float(pred["ttft_ms"]), float(pred["tpot_ms"])
        except (httpx.HTTPError, KeyError, TypeError, ValueError):
            return None, None

    def progress(self) -> None:
        done = self.stats.done()
        ok = [r for r in done if r.status == 200 and not r.error]
        errors = [r for r in done if r.error and r.status != 429]
        shed = sum(1 for r in done if r.status == 429)
        pools = Counter(r.pool for r in ok)
        recent = [r.ttft_ms for r in ok[-200:] if r.ttft_ms is not None]
        p50 = f"{statistics.median(recent):.0f} ms" if recent else "-"
        mix = ", ".join(f"{k}={v}" for k, v in sorted(pools.items()))
        self.say(f"sent {len(self.stats.records)}  ok {len(ok)}  errors {len(errors)}  shed {shed}  "
                 f"in-flight {self.stats.in_flight}  TTFT p50 (last 200) {p50}  pools: {mix}")
