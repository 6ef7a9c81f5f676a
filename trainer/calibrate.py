"""Conformal correction of each served quantile on the newest held-out rows, so coverage hits α.

Form: **multiplicative** — the correction is an additive offset ``c`` in log space, i.e. the served
value is ``expm1(raw + c) = expm1(raw) × e^c + (e^c − 1)`` ms (written into the bundle as
``scale = e^c``, ``offset = e^c − 1``). Latency noise is roughly proportional to the latency itself (a
2 s prefill varies by hundreds of ms, a 20 ms one by a few), so one additive offset in ms would
over-cover fast rows and under-cover slow ones, while one ratio keeps coverage uniform across the
range. ``c`` is the split-conformal quantile of ``log1p(y) − raw`` at level ⌈(n+1)α⌉/n, which gives
coverage ≥ α on exchangeable new rows. The scale is clamped to [0.25, 4] (what predictors accept) so a
tiny or odd holdout cannot wreck a model; below ``MIN_ROWS`` rows no correction. The newest rows are
used on purpose: after a level shift of the whole pool they are the first to say so. Mean objective:
no correction.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

MIN_ROWS = 10
SCALE_BOUNDS = (0.25, 4.0)


@dataclass(frozen=True)
class Calibration:
    scale: float = 1.0
    offset: float = 0.0

    @classmethod
    def from_log_offset(cls, c: float) -> Calibration:
        scale = math.exp(c)
        return cls(scale, scale - 1.0)

    def apply_log(self, raw: np.ndarray) -> np.ndarray:
        """Served ms of log-space raw outputs."""
        return np.maximum(np.expm1(raw) * self.scale + self.offset, 0.0)

    def as_dict(self) -> dict[str, float]:
        return {"scale": self.scale, "offset": self.offset}


def log_offset(raw: np.ndarray, y: np.ndarray, alpha: float) -> float:
    """The conformal log-space offset of a quantile's raw outputs on rows with actuals ``y``."""
    if len(y) < MIN_ROWS:
        return 0.0
    resid = np.log1p(y) - raw
    n = len(resid)
    level = min(1.0, math.ceil((n + 1) * alpha) / n)
    c = float(np.quantile(resid, level, method="higher"))
    low, high = (math.log(b) for b in SCALE_BOUNDS)
    return min(max(c, low), high)


def calibrate(raw: np.ndarray, y: np.ndarray, alpha: float, objective: str) -> Calibration:
    if objective != "quantile":
        return Calibration()
    return Calibration.from_log_offset(log_offset(raw, y, alpha))


def cross_calibrated(raw: np.ndarray, y: np.ndarray, alpha: float, objective: str) -> np.ndarray:
    """Out-of-sample calibrated ms: even rows corrected by the odd rows' offset and vice versa.

    Used for honest holdout metrics; the published calibration uses all the rows.
    """
    if objective != "quantile":
        return np.maximum(raw, 0.0)
    out = np.empty_like(raw)
    even, odd = slice(0, None, 2), slice(1, None, 2)
    out[even] = calibrate(raw[odd], y[odd], alpha, objective).apply_log(raw[even])
    out[odd] = calibrate(raw[even], y[even], alpha, objective).apply_log(raw[odd])
    return out
