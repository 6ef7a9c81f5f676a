"""Background scrape of every pod's vLLM ``/metrics`` into the endpoint snapshot.

Recognised names (summed over label sets): ``vllm:num_requests_waiting``,
``vllm:num_requests_running``, ``vllm:kv_cache_usage_perc`` (or the older
``vllm:gpu_cache_usage_perc``; a fraction 0..1) and ``vllm:num_preemptions_total``.
A failed scrape keeps the previous values; their age shows in the staleness gauge. The pods scraped are
asked for on every pass (``targets``: discovery changes them); each successful scrape is reported
(``on_scraped``: a pod that joined becomes a candidate after its first). Scrapes use the
library's keep-alive HTTP/1.1 client (``router_client.http1``): at 10 scrapes/s per pod this loop
shares the proxy's event loop, and httpx cost ~14 % of the proxy's CPU here.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence

from router_client.background import BackgroundLoop
from router_client.config import ScraperConfig
from router_client.endpoints import EndpointState, PodMetrics
from router_client.http1 import Http1Error, Http1Pool
from router_client.live_metrics import RouterMetrics

log = logging.getLogger(__name__)

_NAMES = {
    "vllm:num_requests_waiting": "waiting",
    "vllm:num_requests_running": "running",
    "vllm:kv_cache_usage_perc": "kv",
    "vllm:gpu_cache_usage_perc": "kv_old",
    "vllm:num_preemptions_total": "preemptions",
}


def parse_vllm_metrics(text: str) -> dict[str, float]:
    """Sum the recognised samples of a Prometheus text exposition by short key."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line.startswith("vllm:"):
            continue
        brace = line.find("{")
        space = line.find(" ")
        end = brace if 0 <= brace < space or (brace >= 0 > space) else space
        key = _NAMES.get(line[:end])
        if key is None:
            continue
        rest = line[line.rindex("}") + 1:] if brace >= 0 else line[space:]
        fields = rest.split()
        if not fields:
            continue
        try:
            out[key] = out.get(key, 0.0) + float(fields[0])
        except ValueError:
            continue
    return out


def to_pod_metrics(values: Mapping[str, float], scraped_at: float) -> PodMetrics:
    kv = values.get("kv", values.get("kv_old", 0.0))
    return PodMetrics(int(values.get("waiting", 0.0)), int(values.get("running", 0.0)),
                      min(max(kv, 0.0), 1.0), int(values.get("preemptions", 0.0)), scraped_at)


class MetricsScraper:
    def __init__(self, http: Http1Pool, state: EndpointState, cfg: ScraperConfig, metrics: RouterMetrics,
                 targets: Callable[[], Sequence[str]] | None = None,
                 on_scraped: Callable[[Iterable[str]], None] | None = None) -> None:
        self._http = http
        self._targets = targets or (lambda: state.pods)
        self._on_scraped = on_scraped
        self._heads: dict[str, bytes] = {}
        self._state = state
        self._cfg = cfg
        self._metrics = metrics
        self._loop = BackgroundLoop("router-scraper", self.scrape_once, cfg.interval_s)

    def start(self) -> None:
        self._loop.start()

    async def stop(self) -> None:
        await self._loop.stop()

    def forget(self, pod: str) -> None:
        """Stop caching anything for a pod that left (its request head, its idle connections)."""
        self._heads.pop(pod, None)
        self._http.forget(pod)

    async def scrape_once(self) -> None:
        pods = self._targets()
        results = await asyncio.gather(*(self._scrape(pod) for pod in pods))
        scraped = {pod: m for pod, m in zip(pods, results, strict=True) if m is not None}
        self._state.publish(scraped)
        tracked = self._state.snapshot
        for pod in pods:
            if pod in tracked:
                self._metrics.staleness(pod, self._state.staleness(pod))
            else:
                self.forget(pod)  # it left while being scraped
        if self._on_scraped is not None:
            self._on_scraped(p for p in scraped if p in tracked)

    def _head(self, pod: str) -> bytes:
        head = self._heads.get(pod)
        if head is None:
            head = self._heads[pod] = self._http.request_head(pod, "GET", "/metrics", {})
        return head

    async def _scrape(self, pod: str) -> PodMetrics | None:
        try:
            async with asyncio.timeout(self._cfg.timeout_s):
                status, body = await self._http.fetch(pod, self._head(pod), b"")
        except (Http1Error, TimeoutError) as exc:
            self._metrics.scrape_error(pod, "error")
            if log.isEnabledFor(logging.DEBUG):
                log.debug("scrape %s failed: %r", pod, exc)
            return None
        if status != 200:
            self._metrics.scrape_error(pod, "status")
            return None
        return to_pod_metrics(parse_vllm_metrics(body.decode("utf-8", "replace")), self._state.now())
