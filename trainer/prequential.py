"""Prequential error: every incoming row is predicted by the live bundle before it is stored.

So drift is visible even when routers report no predictions: per model, the rolling coverage and
pinball of the live primary quantile on rows the model has never seen (``shared.drift``), an alarm
with one log line when coverage leaves the band for ``hold_s`` seconds, and per row the live
model's highest served quantile (the plausibility ceiling the quarantine compares against).
Skipped while the live bundle is the prior (it describes no real pool).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from shared.drift import DriftAlarm, RollingError
from shared.features import MODEL_NAMES, TARGET_OF
from shared.model import LoadedBundle
from trainer.fit import matrix_columns
from trainer.history import LiveSeries
from trainer.window import COL

log = logging.getLogger("trainer.drift")


@dataclass(frozen=True)
class LiveCheck:
    """What the live model said about a batch, per model: its top quantile per row (NaN where the row
    does not feed that model)."""

    top: Mapping[str, np.ndarray]


class Prequential:
    def __init__(self, alpha: float, window: int, band: tuple[float, float], hold_s: float,
                 tpot_zero_token_count: bool, clock: Callable[[], float] | None = None,
                 series: LiveSeries | None = None) -> None:
        self.errors = {name: RollingError(alpha, window) for name in MODEL_NAMES}
        self.alarms = {name: DriftAlarm(band, hold_s, clock=clock) for name in MODEL_NAMES}
        self._zero = tpot_zero_token_count
        self.series = series
        self._lock = threading.Lock()

    def check(self, live: LoadedBundle | None, matrix: np.ndarray) -> LiveCheck | None:
        """Predict ``matrix`` (stored layout) with ``live``; record the primary-quantile error. None when
        there is no trained live model."""
        if live is None or live.bundle.manifest.prior or not len(matrix):
            return None
        top: dict[str, np.ndarray] = {}
        for name in MODEL_NAMES:
            y = matrix[:, COL[TARGET_OF[name]]]
            feeds = y > 0
            top[name] = np.full(len(matrix), np.nan)
            if not feeds.any():
                continue
            values = live.predict_all(name, matrix_columns(name, matrix[feeds], self._zero))
            top[name][feeds] = values[:, -1]
            self._observe(name, values[:, live.models[name].primary], y[feeds])
        return LiveCheck(top)

    def _observe(self, name: str, predicted: np.ndarray, actual: np.ndarray) -> None:
        with self._lock:
            error = self.errors[name]
            error.add(predicted, actual)
            change = self.alarms[name].update(error.coverage(), len(error))
            point = (error.coverage(), error.pinball(), error.total, self.alarms[name].active)
        if self.series is not None:
            self.series.observe(name, *point)
            if change is not None:
                self.series.alarm(name, change.raised, change.coverage)
        if change is not None:
            if change.raised:
                log.warning("%s drift alarm: live coverage %.3f outside %s for %.0f s (prequential, last %d rows)",
                            name.upper(), change.coverage, list(self.alarms[name].band), change.seconds_outside,
                            len(error))
            else:
                log.info("%s drift alarm cleared: live coverage %.3f back inside %s", name.upper(), change.coverage,
                         list(self.alarms[name].band))

    def interval(self, name: str) -> tuple[float | None, int]:
        """Live coverage of ``name`` on the rows that arrived since the previous call (retrain cycles)."""
        with self._lock:
            return self.errors[name].interval()

    @property
    def band(self) -> tuple[float, float]:
        return self.alarms[MODEL_NAMES[0]].band

    def state(self) -> dict[str, dict[str, float | int | bool | None]]:
        with self._lock:
            return {name: {"rows": e.total, "window": len(e), "coverage": e.coverage(), "pinball": e.pinball(),
                           "alarm": self.alarms[name].active} for name, e in self.errors.items()}
