"""Quarantine: rows far outside what the live model finds plausible are kept, but not trained on.

Rule (see trainer/README.md, "Poisoning resistance"): a row is quarantined when one of its targets
exceeds ``factor`` × the live model's highest served quantile (p99) for that row's features. Such
rows are stored durably (log records flagged ``quarantined``), counted, and excluded from the
training window. They are released into the window only when they form a *sustained majority* of
what arrives — more than half of the rows in each of ``sustain_intervals`` consecutive intervals —
sent from at least ``min_sources`` distinct clients: one client (one token holder) cannot rewrite
the model, while a pool that really became that slow is learned after the hold.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np

from shared.features import MODEL_NAMES, TARGET_OF
from trainer.window import COL


@dataclass(frozen=True)
class QuarantinePolicy:
    factor: float = 20.0
    min_sources: int = 2
    sustain_intervals: int = 3
    interval_s: float = 10.0
    max_rows: int = 200_000


@dataclass
class _Interval:
    start: float
    clean: int = 0
    held: int = 0
    sources: set[str] = field(default_factory=set)


class Quarantine:
    """Thread-safe; the ingestor calls ``split`` → ``hold`` → ``note`` per batch under its own lock."""

    def __init__(self, policy: QuarantinePolicy, clock: Callable[[], float] = time.monotonic) -> None:
        self.policy = policy
        self._clock = clock
        self._lock = threading.Lock()
        self._rows: list[tuple[np.ndarray, np.ndarray]] = []  # (matrix, seq) per held batch
        self._held = 0
        self.total_held = 0
        self.total_released = 0
        self._intervals: deque[_Interval] = deque(maxlen=policy.sustain_intervals)

    def split(self, matrix: np.ndarray, top: Mapping[str, np.ndarray] | None) -> np.ndarray:
        """Boolean mask of the rows to quarantine (none when the live model gave no ceiling)."""
        mask = np.zeros(len(matrix), dtype=bool)
        if top is None:
            return mask
        for name in MODEL_NAMES:
            ceiling = top[name] * self.policy.factor
            y = matrix[:, COL[TARGET_OF[name]]]
            with np.errstate(invalid="ignore"):
                mask |= np.isfinite(ceiling) & (y > ceiling)
        return mask

    def hold(self, first_seq: int, rows: np.ndarray) -> None:
        if not len(rows):
            return
        with self._lock:
            self._rows.append((rows, np.arange(first_seq, first_seq + len(rows), dtype=np.int64)))
            self._held += len(rows)
            self.total_held += len(rows)
            while self._held > self.policy.max_rows and len(self._rows) > 1:
                dropped, _ = self._rows.pop(0)
                self._held -= len(dropped)

    def note(self, clean: int, held: int, source: str) -> None:
        """Count one batch into the current interval."""
        now = self._clock()
        with self._lock:
            if not self._intervals or now - self._intervals[-1].start >= self.policy.interval_s:
                self._intervals.append(_Interval(now))
            current = self._intervals[-1]
            current.clean += clean
            current.held += held
            if held:
                current.sources.add(source)

    def due(self) -> bool:
        """True when held rows were the majority of every one of the last ``sustain_intervals`` intervals
        and came from at least ``min_sources`` clients."""
        with self._lock:
            intervals = list(self._intervals)
            if not self._held or len(intervals) < self.policy.sustain_intervals:
                return False
            sources = set().union(*(i.sources for i in intervals))
            majority = all(i.held > i.clean for i in intervals)
            return majority and len(sources) >= self.policy.min_sources

    def release(self) -> tuple[np.ndarray, int]:
        """Hand every held row back (stored layout) and the sequence number after the last one."""
        with self._lock:
            if not self._rows:
                return np.empty((0, 0)), 0
            rows = np.vstack([m for m, _ in self._rows])
            through = int(self._rows[-1][1][-1]) + 1
            self.total_released += len(rows)
            self._rows, self._held = [], 0
            self._intervals.clear()
            return rows, through

    def forget_through(self, seq: int) -> None:
        """Replay: a release record covers every held row before ``seq``."""
        with self._lock:
            kept = [(m[s >= seq], s[s >= seq]) for m, s in self._rows]
            self._rows = [(m, s) for m, s in kept if len(s)]
            self._held = sum(len(s) for _, s in self._rows)

    @property
    def held(self) -> int:
        return self._held
