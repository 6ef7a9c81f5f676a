"""Live prediction error and the drift alarm, shared by the trainer (prequential error) and the router.

``RollingError`` keeps the last ``window`` (predicted quantile, actual) pairs and answers coverage
(share of actuals at or below the prediction) and pinball loss at the model's quantile. ``DriftAlarm``
turns a coverage series into an alarm: it fires when coverage has stayed outside ``band`` for
``hold_s`` seconds (with at least ``min_samples`` pairs seen) and clears when coverage is back inside;
each transition is reported once so callers log one line per change.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

DEFAULT_BAND = (0.80, 0.97)


class RollingError:
    """Ring buffer of (predicted, actual) pairs; O(1) amortised per pair, numpy summaries."""

    def __init__(self, alpha: float, window: int = 1000) -> None:
        self.alpha = alpha
        self._pred = np.zeros(window)
        self._actual = np.zeros(window)
        self._next = 0
        self._count = 0
        self.total = 0
        self.covered_total = 0
        """Pairs seen and pairs covered since creation (``interval`` reads the difference)."""
        self._mark = (0, 0)

    def add(self, predicted: np.ndarray | float, actual: np.ndarray | float) -> None:
        p = np.atleast_1d(np.asarray(predicted, dtype=np.float64))
        a = np.atleast_1d(np.asarray(actual, dtype=np.float64))
        self.total += len(p)
        self.covered_total += int(np.sum(a <= p))
        size = len(self._pred)
        if len(p) >= size:
            p, a = p[-size:], a[-size:]
        slots = (self._next + np.arange(len(p))) % size
        self._pred[slots], self._actual[slots] = p, a
        self._next = int((self._next + len(p)) % size)
        self._count = min(size, self._count + len(p))

    def __len__(self) -> int:
        return self._count

    def coverage(self) -> float | None:
        if not self._count:
            return None
        return float(np.mean(self._actual[: self._count] <= self._pred[: self._count]))

    def interval(self) -> tuple[float | None, int]:
        """Coverage and pair count since the previous call (the first call: since creation)."""
        seen, covered = self.total - self._mark[0], self.covered_total - self._mark[1]
        self._mark = (self.total, self.covered_total)
        return (covered / seen if seen else None), seen

    def pinball(self) -> float | None:
        if not self._count:
            return None
        diff = self._actual[: self._count] - self._pred[: self._count]
        return float(np.mean(np.maximum(self.alpha * diff, (self.alpha - 1.0) * diff)))


@dataclass
class AlarmChange:
    raised: bool
    coverage: float
    seconds_outside: float


class DriftAlarm:
    """Coverage outside ``band`` for ``hold_s`` seconds → alarm; back inside → clear."""

    def __init__(self, band: tuple[float, float] = DEFAULT_BAND, hold_s: float = 60.0, min_samples: int = 50,
                 clock: Callable[[], float] | None = None) -> None:
        self.band = band
        self.hold_s = hold_s
        self.min_samples = min_samples
        self._clock = clock or time.monotonic
        self.active = False
        self._outside_since: float | None = None

    def update(self, coverage: float | None, samples: int) -> AlarmChange | None:
        """Feed the current coverage; returns a change when the alarm is raised or cleared."""
        if coverage is None or samples < self.min_samples:
            return None
        now = self._clock()
        inside = self.band[0] <= coverage <= self.band[1]
        if inside:
            self._outside_since = None
            if self.active:
                self.active = False
                return AlarmChange(False, coverage, 0.0)
            return None
        if self._outside_since is None:
            self._outside_since = now
        outside = now - self._outside_since
        if not self.active and outside >= self.hold_s:
            self.active = True
            return AlarmChange(True, coverage, outside)
        return None
