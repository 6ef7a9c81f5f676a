"""Sample reporter: training rows buffered per pool, flushed to the pool's trainer every ~1 s.

One combined row per request (``actual_ttft_ms`` and ``actual_tpot_ms`` both set; the trainer
feeds each model from the rows whose target is > 0, contract §2.2), TPOT = 0 when fewer than
two tokens were generated. Features are those snapshotted at dispatch with
``num_tokens_generated`` = 0 and ``decode_tokens_in_flight`` = 0. The buffer is bounded and
drops the oldest rows (counted) while the trainer is away; a batch the trainer rejects with 422
is dropped (counted), any other failure puts it back for the next flush.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Mapping
from typing import Any

import httpx
import orjson

from router_client.background import BackgroundLoop
from router_client.config import ReporterConfig
from router_client.live_metrics import RouterMetrics

log = logging.getLogger(__name__)
Row = dict[str, Any]


def training_row(features: Mapping[str, Any], ttft_ms: float, tpot_ms: float,
                 prompt_tokens: int | None = None) -> Row:
    """A TrainingEntry from the dispatch-time features and the observed latencies."""
    row: Row = dict(features)
    row["num_tokens_generated"] = 0
    row["decode_tokens_in_flight"] = 0
    if prompt_tokens is not None and prompt_tokens > 0:
        row["input_token_length"] = prompt_tokens
    row["actual_ttft_ms"] = float(ttft_ms)
    row["actual_tpot_ms"] = float(tpot_ms)
    return row


class SampleReporter:
    def __init__(self, http: httpx.AsyncClient, trainers: Mapping[str, str | None], cfg: ReporterConfig,
                 metrics: RouterMetrics) -> None:
        self._http = http
        self._urls = {pool: url.rstrip("/") + "/add_training_data_bulk" for pool, url in trainers.items() if url}
        self._cfg = cfg
        self._metrics = metrics
        self._buffers: dict[str, deque[Row]] = {pool: deque() for pool in self._urls}
        self._loop = BackgroundLoop("router-reporter", self.flush, cfg.flush_interval_s, step_first=False)
        self.dropped = 0

    def add(self, pool: str, row: Row) -> None:
        buf = self._buffers.get(pool)
        if buf is None:
            self._metrics.sample(pool, "no_trainer")
            return
        if len(buf) >= self._cfg.max_buffer_rows:
            buf.popleft()
            self.dropped += 1
            self._metrics.sample(pool, "dropped_buffer_full")
        buf.append(row)
        self._metrics.sample(pool, "queued")

    def buffered(self, pool: str) -> int:
        buf = self._buffers.get(pool)
        return len(buf) if buf is not None else 0

    def start(self) -> None:
        self._loop.start()

    async def stop(self) -> None:
        await self._loop.stop()
        await self.flush()

    async def flush(self) -> None:
        """Send each pool's oldest rows (up to ``max_flush_rows``) to its trainer."""
        await asyncio.gather(*(self._flush_pool(pool) for pool, buf in self._buffers.items() if buf))

    async def _flush_pool(self, pool: str) -> None:
        buf = self._buffers[pool]
        batch = [buf.popleft() for _ in range(min(len(buf), self._cfg.max_flush_rows))]
        try:
            resp = await self._http.post(self._urls[pool], content=orjson.dumps({"entries": batch}),
                                         headers={"content-type": "application/json"}, timeout=self._cfg.timeout_s)
        except httpx.HTTPError as exc:
            log.warning("pool %s: trainer flush failed (%r); %d rows kept", pool, exc, len(batch))
            self._requeue(pool, batch)
            return
        if resp.status_code == 202:
            self._metrics.sample(pool, "sent", len(batch))
        elif resp.status_code == 422:
            log.warning("pool %s: trainer rejected %d rows (422): %s", pool, len(batch), resp.text[:500])
            self._metrics.sample(pool, "rejected", len(batch))
        else:
            log.warning("pool %s: trainer answered %d; %d rows kept", pool, resp.status_code, len(batch))
            self._requeue(pool, batch)

    def _requeue(self, pool: str, batch: list[Row]) -> None:
        buf = self._buffers[pool]
        room = self._cfg.max_buffer_rows - len(buf)
        keep = batch[-room:] if room > 0 else []
        lost = len(batch) - len(keep)
        if lost:
            self.dropped += lost
            self._metrics.sample(pool, "dropped_buffer_full", lost)
        buf.extendleft(reversed(keep))
