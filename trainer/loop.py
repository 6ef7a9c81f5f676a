"""The retrain loop: a background thread running ``Retrainer.run_once`` every interval.

The first cycle starts one interval after start-up. The loop thread — and so the fit threads it starts, which
inherit it — runs at ``nice`` (Linux: per thread; ``LATENCY_FIT_NICE``): a fit is a burst of CPU every
interval, and serving that shares the cores (this process's ingest and pull API, or predictors, routers and
engines on the same host) must not wait for it. A failing cycle is counted (metric and
``LoopStatus``), logged with its traceback and shown in ``/readyz`` — never swallowed silently —
and the next cycle runs as usual (no single row or cycle can stop training for good).
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from dataclasses import dataclass

import xgboost as xgb

from shared.errors import LatencyError
from shared.timefmt import from_epoch
from trainer.cycle import Retrainer
from trainer.metrics import TrainerMetrics

log = logging.getLogger("trainer.retrain")
RETRAIN_ERRORS = (LatencyError, xgb.core.XGBoostError, ValueError, ArithmeticError, OSError, MemoryError,
                  KeyError, IndexError, RuntimeError)


@dataclass
class LoopStatus:
    cycles: int = 0
    failures: int = 0
    consecutive_failures: int = 0
    last_error: str | None = None
    last_error_at: str | None = None
    last_retrain: str | None = None

    def as_dict(self) -> dict[str, object]:
        return dict(self.__dict__)


class RetrainLoop:
    def __init__(self, retrainer: Retrainer, interval: float, metrics: TrainerMetrics, nice: int = 0) -> None:
        self.retrainer, self.interval, self.metrics, self.nice = retrainer, interval, metrics, nice
        self.status = LoopStatus()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._cycle_lock = threading.Lock()

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="retrain-loop", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 30.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def _run(self) -> None:
        """Fixed rate: a cycle starts every ``interval`` seconds from the previous start (not ``interval``
        after the previous end), so publishes stay ~``interval`` apart while a cycle takes seconds; a cycle
        that overruns the interval is followed at once by the next one, never by a burst of catch-ups."""
        lower_priority(self.nice)
        due = time.monotonic() + self.interval
        while not self._stop.wait(max(0.0, due - time.monotonic())):
            self.run_cycle()
            due = max(due + self.interval, time.monotonic())

    def run_cycle(self) -> int | None:
        """One cycle (also callable directly, e.g. by benchmarks); returns the published version."""
        with self._cycle_lock:
            started = time.perf_counter()
            self.status.cycles += 1
            try:
                version = self.retrainer.run_once()
            except RETRAIN_ERRORS as exc:
                self._failed(exc)
                return None
            self.status.consecutive_failures = 0
            if self.retrainer.last_cycle_fitted:
                self.status.last_retrain = from_epoch(time.time())
                self.metrics.last_retrain.set(time.time())
                self.metrics.retrain_seconds.observe(time.perf_counter() - started)
            return version

    def _failed(self, exc: BaseException) -> None:
        self.status.failures += 1
        self.status.consecutive_failures += 1
        self.status.last_error = f"{type(exc).__name__}: {exc}"
        self.status.last_error_at = from_epoch(time.time())
        self.metrics.failures.inc()
        log.error("retrain cycle failed (%d so far)", self.status.failures, exc_info=exc)


def lower_priority(nice: int) -> None:
    """Raise the calling thread's nice value by ``nice`` (Linux: threads it starts inherit it; elsewhere a no-op)."""
    if nice <= 0 or not sys.platform.startswith("linux"):
        return
    tid = threading.get_native_id()
    try:
        os.setpriority(os.PRIO_PROCESS, tid, min(19, os.getpriority(os.PRIO_PROCESS, tid) + nice))
    except OSError as exc:
        log.warning("retrain loop keeps its CPU priority: %s", exc)
