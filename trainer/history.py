"""What the status page plots over time, kept in memory and bounded: retrains, live error, ingest rate.

* :class:`RetrainHistory` — one record per fitted model per cycle (rows, fit time, holdout scores, what was
  decided and why, the configuration chosen, the physical base fitted), fed by ``Retrainer`` through one hook;
  the newest ``size`` per model are kept.
* :class:`LiveSeries` — the prequential coverage and pinball of the live model (``trainer.prequential``),
  one point per model every ``every_s`` seconds at most, plus every drift-alarm change.
* :class:`IngestRate` — rows stored per fixed time bin (``bin_s``), the newest ``bins`` bins.

Times are wall-clock seconds (``time.time``), so a page can show them next to log lines. Thread-safe:
ingest runs in the threadpool, retrains in the loop thread, the page reads from a third.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from shared.bundle import ModelEntry
from shared.features import MODEL_NAMES
from shared.model import entry_base
from trainer.fitted import FittedModel

Clock = Callable[[], float]


@dataclass(frozen=True)
class BaseRecord:
    """A fit's physical base (``shared.base``): coefficient per term (ms per unit), rows fitted on, source."""

    coefficients: dict[str, float]
    rows: int
    source: str

    @classmethod
    def of(cls, entry: ModelEntry) -> BaseRecord | None:
        base = entry_base(entry)
        return None if base is None else cls({t: float(c) for t, c in base.named().items()}, base.rows, base.source)


@dataclass(frozen=True)
class RetrainRecord:
    at: float
    model: str
    rows: int
    holdout_rows: int
    fit_s: float
    mae: float
    rmse: float
    coverage: float
    pinball: float
    decision: str
    """``published``, ``kept`` (the live model scored better) or ``held`` (a shift not yet persisted)."""
    version: int | None
    """The version published, or the live version kept."""
    reason: str
    candidate: str
    location_rounds: int
    location_fit_rows: int
    """Rows the location boosters were fitted on (fewer than ``rows`` when the fit budget cut them)."""
    quantile_rounds: int
    selection: dict[str, float]
    selection_metric: str
    reference_metrics: dict[str, float]
    shift: float | None
    base: BaseRecord | None = None
    """None: the model is the trees alone (a format-1 entry)."""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class RetrainHistory:
    def __init__(self, size: int = 200, clock: Clock = time.time) -> None:
        self._records = {name: deque[RetrainRecord](maxlen=size) for name in MODEL_NAMES}
        self._clock = clock
        self._lock = threading.Lock()

    def record(self, name: str, rows: int, fitted: FittedModel, decision: str, version: int | None, reason: str,
               shift: float | None) -> None:
        """One fitted model's outcome (called by ``Retrainer._report``)."""
        s, entry = fitted.scores, fitted.entry
        rec = RetrainRecord(
            at=self._clock(), model=name, rows=rows, holdout_rows=entry.holdout_rows,
            fit_s=round(fitted.fit_seconds, 4), mae=s.mae, rmse=s.rmse, coverage=s.coverage, pinball=s.pinball,
            decision=decision, version=version, reason=reason, candidate=entry.candidate,
            location_rounds=entry.location_rounds, quantile_rounds=entry.quantile_rounds,
            location_fit_rows=entry.location_fit_rows, selection=dict(entry.selection),
            selection_metric=entry.selection_metric,
            reference_metrics=dict(entry.reference_metrics or fitted.reference.as_dict()), shift=shift,
            base=BaseRecord.of(entry))
        with self._lock:
            self._records[name].append(rec)

    def records(self, name: str) -> list[RetrainRecord]:
        with self._lock:
            return list(self._records[name])

    def clear(self) -> None:
        with self._lock:
            for records in self._records.values():
                records.clear()


@dataclass(frozen=True)
class LivePoint:
    at: float
    coverage: float | None
    pinball: float | None
    rows: int
    alarm: bool


@dataclass(frozen=True)
class AlarmEvent:
    at: float
    model: str
    raised: bool
    coverage: float


class LiveSeries:
    def __init__(self, every_s: float = 2.0, size: int = 900, events: int = 100, clock: Clock = time.time) -> None:
        self.every_s = every_s
        self._points = {name: deque[LivePoint](maxlen=size) for name in MODEL_NAMES}
        self._events: deque[AlarmEvent] = deque(maxlen=events)
        self._clock = clock
        self._lock = threading.Lock()

    def observe(self, name: str, coverage: float | None, pinball: float | None, rows: int, alarm: bool) -> None:
        """The live error after a batch; kept when ``every_s`` has passed since the model's last point."""
        now = self._clock()
        with self._lock:
            points = self._points[name]
            if points and now - points[-1].at < self.every_s:
                return
            points.append(LivePoint(now, coverage, pinball, rows, alarm))

    def alarm(self, name: str, raised: bool, coverage: float) -> None:
        with self._lock:
            self._events.append(AlarmEvent(self._clock(), name, raised, coverage))

    def points(self, name: str) -> list[LivePoint]:
        with self._lock:
            return list(self._points[name])

    def events(self) -> list[AlarmEvent]:
        with self._lock:
            return list(self._events)


class IngestRate:
    def __init__(self, bin_s: float = 5.0, bins: int = 180, clock: Clock = time.time) -> None:
        self.bin_s = bin_s
        self._bins: deque[list[float]] = deque(maxlen=bins)  # [bin start, rows]
        self._clock = clock
        self._lock = threading.Lock()
        self.total = 0

    def add(self, rows: int) -> None:
        start = self._clock() // self.bin_s * self.bin_s
        with self._lock:
            self.total += rows
            if self._bins and self._bins[-1][0] == start:
                self._bins[-1][1] += rows
            else:
                self._bins.append([start, float(rows)])

    def series(self) -> list[tuple[float, float]]:
        """(bin start, rows/s) for every bin from the oldest kept to now (empty bins are 0)."""
        now_bin = self._clock() // self.bin_s * self.bin_s
        with self._lock:
            bins = {start: rows for start, rows in self._bins}
        if not bins:
            return []
        first = max(min(bins), now_bin - self.bin_s * ((self._bins.maxlen or 1) - 1))
        count = int(round((now_bin - first) / self.bin_s)) + 1
        out = [(first + i * self.bin_s, bins.get(first + i * self.bin_s, 0.0) / self.bin_s) for i in range(count)]
        elapsed = max(1.0, self._clock() - now_bin)  # the current bin is still filling
        if elapsed < self.bin_s:
            out[-1] = (now_bin, bins.get(now_bin, 0.0) / elapsed)
        return out


@dataclass
class TrainerHistory:
    """The three series of one trainer (built by the service, read by ``trainer.ui``)."""

    retrains: RetrainHistory = field(default_factory=RetrainHistory)
    live: LiveSeries = field(default_factory=LiveSeries)
    ingest: IngestRate = field(default_factory=IngestRate)
