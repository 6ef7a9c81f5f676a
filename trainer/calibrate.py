"""Conformal correction of a quantile model on the holdout, so measured coverage hits α.

Form: **multiplicative** — served = raw × scale (offset 0). Latency noise is roughly
proportional to the latency itself (a 2 s prefill varies by hundreds of ms, a 20 ms one by a
few), so one additive offset would over-cover fast rows and under-cover slow ones, while one
ratio keeps coverage uniform across the range (it is the additive correction in log space).
``scale`` is the split-conformal quantile of ``y / raw`` at level ⌈(n+1)α⌉/n, which gives
coverage ≥ α on exchangeable new rows. It is clamped to [0.25, 4] so a tiny or odd holdout
cannot wreck a model, and 1.0 is used below ``MIN_ROWS`` rows. Mean objective: no correction.
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

    def apply(self, raw: np.ndarray) -> np.ndarray:
        return np.maximum(raw * self.scale + self.offset, 0.0)

    def as_dict(self) -> dict[str, float]:
        return {"scale": self.scale, "offset": self.offset}


def conformal_scale(raw: np.ndarray, y: np.ndarray, alpha: float) -> float:
    usable = raw > 1e-9
    if usable.sum() < MIN_ROWS:
        return 1.0
    ratios = y[usable] / raw[usable]
    n = len(ratios)
    level = min(1.0, math.ceil((n + 1) * alpha) / n)
    value = float(np.quantile(ratios, level, method="higher"))
    return float(np.clip(value, *SCALE_BOUNDS))


def calibrate(raw: np.ndarray, y: np.ndarray, alpha: float, objective: str) -> Calibration:
    if objective != "quantile":
        return Calibration()
    return Calibration(scale=conformal_scale(raw, y, alpha))


def cross_calibrated(raw: np.ndarray, y: np.ndarray, alpha: float, objective: str) -> np.ndarray:
    """Out-of-sample calibrated predictions: even rows scaled by the odd rows' fit and vice versa.

    Used for honest holdout metrics; the published calibration uses the whole holdout.
    """
    out = np.empty_like(raw)
    even, odd = slice(0, None, 2), slice(1, None, 2)
    out[even] = calibrate(raw[odd], y[odd], alpha, objective).apply(raw[even])
    out[odd] = calibrate(raw[even], y[even], alpha, objective).apply(raw[odd])
    return out
