"""Keeping the live bundle current: a periodic sync loop, an optional long-poll loop, /reload.

Every path goes through ``Syncer.sync_once``: ask the source whether something new is
published (outside any lock), then — one at a time — fetch + verify it, build the new
``Serving`` in a worker thread and swap. A source that cannot be reached only moves the
staleness gauge; a bad bundle is refused once (its tag is remembered) and the old model stays.
``serve_local`` (start-up) installs the newest bundle the source keeps on local disk that verifies
and loads — trying older ones when the newest is refused — without asking the trainer.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass

from predictor.holder import ModelHolder, version_tag
from predictor.metrics import PredictorMetrics
from predictor.sources import BundleSource, Offer, SourceUnavailable
from shared.errors import BundleError

log = logging.getLogger(__name__)
ERROR_BACKOFF_S = 1.0


@dataclass(frozen=True)
class SyncResult:
    reached: bool  # the source answered
    synced: bool  # a bundle was downloaded / read
    swapped: bool  # ... and is now serving
    error: str | None = None


class Syncer:
    def __init__(self, holder: ModelHolder, source: BundleSource, metrics: PredictorMetrics) -> None:
        self.holder = holder
        self.source = source
        self.metrics = metrics
        self._seen: str | None = None  # last tag processed (served or refused)
        self._lock = asyncio.Lock()

    async def sync_once(self, *, wait_s: float = 0.0, force: bool = False) -> SyncResult:
        """Poll the source once (optionally long-polling) and install what is new."""
        try:
            offer = await self.source.poll(None if force else self._seen, wait_s)
        except (SourceUnavailable, OSError) as exc:
            return self._unreachable(exc)
        self.holder.sync_ok()
        if offer is None:
            return SyncResult(True, False, False)
        return await self._take(offer, force)

    async def _take(self, offer: Offer, force: bool) -> SyncResult:
        async with self._lock:
            if offer.tag == self.holder.live_tag or (offer.tag == self._seen and not force):
                self._seen = offer.tag
                return SyncResult(True, False, False)
            try:
                bundle = await self.source.fetch(offer)
                await asyncio.to_thread(self.holder.install, bundle, self.source.location)
            except (SourceUnavailable, OSError) as exc:
                return self._unreachable(exc)
            except BundleError as exc:
                self._seen = offer.tag
                self.holder.refuse(offer.tag, offer.version, exc.message, self.source.location)
                self.metrics.refused.inc()
                return SyncResult(True, True, False, exc.message)
            self._seen = offer.tag
            self.metrics.swaps.inc()
            return SyncResult(True, True, True)

    async def serve_local(self) -> bool:
        """Install the newest valid locally kept bundle (no network); True when one is now serving."""
        async with self._lock:
            for i, version in enumerate(self.source.local_versions()):
                tag = version_tag(version)
                if i == 0 and self.source.local_is_published:
                    self._seen = tag  # refused here = refused upstream: the poll need not offer it again
                try:
                    bundle = await self.source.read_local(version)
                    await asyncio.to_thread(self.holder.install, bundle, f"{self.source.location} (local copy)")
                except BundleError as exc:
                    self.holder.refuse(tag, version, exc.message, f"{self.source.location} (local copy)")
                    self.metrics.refused.inc()
                    continue
                except OSError as exc:
                    log.warning("local bundle v%d unreadable: %s", version, exc)
                    continue
                self.metrics.swaps.inc()
                return True
        return False

    def _unreachable(self, exc: Exception) -> SyncResult:
        reason = exc.message if isinstance(exc, SourceUnavailable) else f"{type(exc).__name__}: {exc}"
        self.holder.sync_failed(reason)
        self.metrics.sync_failures.inc()
        return SyncResult(False, False, False, reason)

    async def run_periodic(self, interval_s: float) -> None:
        """Sync every ``interval_s`` seconds, forever (cancel to stop)."""
        while True:
            await asyncio.sleep(interval_s)
            await self.sync_once()

    async def run_long_poll(self, wait_s: float) -> None:
        """Hold a long-poll open so a publish is served within about a second (cancel to stop)."""
        while True:
            started = time.monotonic()
            result = await self.sync_once(wait_s=wait_s)
            if not result.reached:
                await asyncio.sleep(ERROR_BACKOFF_S)
            elif not result.synced and time.monotonic() - started < wait_s / 2:
                await asyncio.sleep(ERROR_BACKOFF_S)  # the source does not hold requests: do not spin
