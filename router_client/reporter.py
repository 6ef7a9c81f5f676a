"""Sample reporter: training rows buffered per pool, flushed to the pool's trainer every ~1 s.

One combined row per request (``actual_ttft_ms`` and ``actual_tpot_ms`` both set; the trainer
feeds each model from the rows whose target is > 0, contract §2.2), TPOT = 0 when fewer than
two tokens were generated. Features are those snapshotted at dispatch with
``num_tokens_generated`` = 0 and ``decode_tokens_in_flight`` = 0. The buffer is bounded and
drops the oldest rows (counted) while the trainer is away; a batch the trainer rejects with 422
is dropped (counted), any other failure puts it back for the next flush.

Every batch carries an ``Idempotency-Key``. When its outcome is unknown (timeout, connection lost
after sending) the same batch is resent with the same key, so the trainer stores it once; a batch
that certainly was not stored (no connection, or an error status) is merged back into the buffer.
With ``trainer_token`` / ``trainer_token_file`` set, batches carry ``Authorization: Bearer``.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections import deque
from collections.abc import Mapping
from typing import Any

import httpx
import orjson

from router_client.background import BackgroundLoop
from router_client.config import ReporterConfig
from router_client.live_metrics import RouterMetrics
from shared.auth import TokenSource

log = logging.getLogger(__name__)
Row = dict[str, Any]
NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)
"""Failures where the request certainly never reached the trainer (anything else: outcome unknown)."""


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
        self._unacked: dict[str, tuple[str, list[Row]]] = {}  # pool → (Idempotency-Key, batch) to resend as is
        self._token = TokenSource.of(cfg.trainer_token, cfg.trainer_token_file, "reporter.trainer_token",
                                     required=False)
        self._loop = BackgroundLoop("router-reporter", self.flush, cfg.flush_interval_s, step_first=False)
        self.dropped = 0

    def add(self, pool: str, row: Row) -> None:
        buf = self._buffers.get(pool)
        if buf is None:
            self._metrics.sample(pool, "no_trainer")
            return
        if self.buffered(pool) >= self._cfg.max_buffer_rows:
            self.dropped += 1
            self._metrics.sample(pool, "dropped_buffer_full")
            if not buf:  # only the unacknowledged batch is held: it stays intact, the new row goes
                return
            buf.popleft()
        buf.append(row)
        self._metrics.sample(pool, "queued")

    def buffered(self, pool: str) -> int:
        buf = self._buffers.get(pool)
        unacked = self._unacked.get(pool)
        return (len(buf) if buf is not None else 0) + (len(unacked[1]) if unacked else 0)

    def start(self) -> None:
        self._loop.start()

    async def stop(self) -> None:
        await self._loop.stop()
        await self.flush()

    async def flush(self) -> None:
        """Send each pool's unacknowledged batch, else its oldest rows (up to ``max_flush_rows``), to its trainer."""
        await asyncio.gather(*(self._flush_pool(pool) for pool in self._buffers if self.buffered(pool)))

    def _next_batch(self, pool: str) -> tuple[str, list[Row]]:
        unacked = self._unacked.pop(pool, None)
        if unacked is not None:
            return unacked
        buf = self._buffers[pool]
        return uuid.uuid4().hex, [buf.popleft() for _ in range(min(len(buf), self._cfg.max_flush_rows))]

    async def _flush_pool(self, pool: str) -> None:
        key, batch = self._next_batch(pool)
        headers = {"content-type": "application/json", "idempotency-key": key, **self._token.header()}
        try:
            resp = await self._http.post(self._urls[pool], content=orjson.dumps({"entries": batch}), headers=headers,
                                         timeout=self._cfg.timeout_s)
        except NOT_SENT as exc:
            log.warning("pool %s: trainer flush failed (%r); %d rows kept", pool, exc, len(batch))
            self._requeue(pool, batch)
            return
        except httpx.HTTPError as exc:
            log.warning("pool %s: trainer flush outcome unknown (%r); %d rows resent with the same Idempotency-Key",
                        pool, exc, len(batch))
            self._unacked[pool] = (key, batch)
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
