"""The model holder: one reference to the live ``Serving`` plus what happened to get there.

Requests read ``holder.serving`` once and predict with that snapshot; installing a bundle
builds the new ``Serving`` completely (off the event loop) and then replaces the reference in
one assignment, so no lock is ever held while predicting. A bundle that fails verification,
loading or the smoke prediction is recorded as refused and the previous model keeps serving.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from predictor.ratelog import RateLimitedLog
from predictor.serving import Serving, build_serving
from shared.bundle import Bundle
from shared.errors import BundleError
from shared.predictor_settings import PredictorSettings
from shared.timefmt import from_epoch

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Refusal:
    tag: str
    version: int | None
    reason: str
    source: str
    at: float

    def as_dict(self) -> dict[str, Any]:
        return {"tag": self.tag, "version": self.version, "reason": self.reason, "source": self.source,
                "at": from_epoch(self.at)}


class ModelHolder:
    """Owns the live model reference and the sync/refusal record shown in /status."""

    def __init__(self, settings: PredictorSettings, clock: Callable[[], float] = time.time) -> None:
        self._settings = settings
        self._clock = clock
        self._serving: Serving | None = None
        self._record = threading.Lock()  # guards the status fields below, never held while predicting
        self.refusals: deque[Refusal] = deque(maxlen=settings.refusals_kept)
        self.refused_total = 0
        self.swaps_total = 0
        self.last_sync_ok: float | None = None
        self.last_sync_error: str | None = None
        self.sync_failures_total = 0
        self.started_at = clock()
        self._failure_log = RateLimitedLog(log)
        self._failing_since: int | None = None  # sync_failures_total when the current outage began

    @property
    def serving(self) -> Serving | None:
        return self._serving

    @property
    def live_tag(self) -> str | None:
        serving = self._serving
        return None if serving is None else version_tag(serving.version)

    def install(self, bundle: Bundle, source: str) -> Serving:
        """Build and swap in ``bundle`` (blocking; call from a worker thread). Raises ``BundleError``."""
        try:
            serving = build_serving(bundle, self._settings, source)
        except (KeyError, TypeError, ValueError) as exc:  # a manifest shape shared.model did not anticipate
            raise BundleError(f"bundle cannot be loaded: {type(exc).__name__}: {exc}") from None
        with self._record:
            self._serving = serving
            self.swaps_total += 1
        release_free_heap()
        log.info("serving bundle v%d from %s (prior=%s, evaluator=%s)", serving.version, source, serving.prior,
                 dict(serving.evaluator))
        return serving

    def refuse(self, tag: str, version: int | None, reason: str, source: str) -> None:
        with self._record:
            self.refusals.append(Refusal(tag, version, reason, source, self._clock()))
            self.refused_total += 1
        log.warning("refused bundle %s from %s: %s", tag, source, reason)

    def sync_ok(self) -> None:
        with self._record:
            self.last_sync_ok = self._clock()
            self.last_sync_error = None
            since, self._failing_since = self._failing_since, None
        if since is not None:
            log.info("bundle source reachable again after %d failed syncs", self.sync_failures_total - since)
            self._failure_log.reset()

    def sync_failed(self, reason: str) -> None:
        """Record a failed contact with the source; logged once per reason per minute (the first at once)."""
        with self._record:
            self.last_sync_error = reason
            self.sync_failures_total += 1
            if self._failing_since is None:
                self._failing_since = self.sync_failures_total - 1
        self._failure_log("bundle sync failed: %s", reason)

    def seconds_since_sync(self) -> float:
        """Staleness: seconds since the last successful contact with the source (since start if never)."""
        last = self.last_sync_ok
        return self._clock() - (self.started_at if last is None else last)


def release_free_heap() -> None:
    """Give the heap freed by loading (model JSON, old bundle) back to the OS (glibc only; else no-op)."""
    name = ctypes.util.find_library("c")
    if name is None:
        return
    try:
        trim = ctypes.CDLL(name).malloc_trim
    except (OSError, AttributeError):
        return
    trim(0)  # ctypes releases the GIL: requests keep running


def version_tag(version: int) -> str:
    """The ETag form of a bundle version (pull API: ``"v<version>"``)."""
    return f'"v{version}"'
