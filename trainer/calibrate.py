"""Conformal correction of each served quantile on the newest held-out rows, so coverage hits α.

Form: **multiplicative** — the correction is an additive offset ``c`` in log space, i.e. the served
value is ``expm1(raw + c) = expm1(raw) × e^c + (e^c − 1)`` ms (written into the bundle as
``scale = e^c``, ``offset = e^c − 1``). Latency noise is roughly proportional to the latency itself (a
2 s prefill varies by hundreds of ms, a 20 ms one by a few), so one additive offset in ms would
over-cover fast rows and under-cover slow ones, while one ratio keeps coverage uniform across the
range. ``c`` is the split-conformal quantile of ``log1p(y) − raw`` at level ⌈(n+1)α⌉/n, which gives
coverage ≥ α on exchangeable new rows. Below the rows that can certify α that rank is the largest residual, so one
outlier sets the whole quantile; the ``empirical`` rule then takes the plain α-quantile of the residuals (linear
interpolation) instead — the thin fits of the models ``LATENCY_THIN_EMPIRICAL_QUANTILE`` names use it
(``trainer.thin``). The scale is clamped to [0.25, 4] (what predictors accept) so a
tiny or odd holdout cannot wreck a model; below ``MIN_ROWS`` rows no correction. The newest rows are
used on purpose: after a level shift of the whole pool they are the first to say so. Mean objective:
no correction.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

P90_FACTOR = 1.3
SIGMA = math.log(P90_FACTOR) / NormalDist().inv_cdf(0.9)
"""The prior's log-normal spread: p90 = 1.3 × the median (``trainer.prior``), the floor of thin fits."""
MIN_ROWS = 1
CONFORMAL, EMPIRICAL = "conformal", "empirical"
"""Offset rules: the split-conformal rank always, or the plain α-quantile while that rank is the largest residual."""
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


def conformal_rank(n: int, alpha: float) -> int:
    """The 1-based order statistic of ``n`` residuals that covers a new exchangeable row with probability ≥ α:
    ⌈(n + 1)·α⌉, or ``n`` (the largest; coverage n / (n + 1)) when fewer rows cannot certify α."""
    return min(n, math.ceil((n + 1) * alpha - 1e-9))


def spread_floor(raw: np.ndarray, median: np.ndarray, alpha: float, rows: int, prior_rows: int) -> float:
    """The least log offset of quantile ``alpha`` (above the median only) while data is thin: the prior's spread
    above the median (``SIGMA``·z_α, p90 = 1.3 × median) weighted ``prior_rows / (rows + prior_rows)``, less what
    the raw quantile already adds above ``median`` — the model's calibrated median, log space — (median over the
    rows). −∞ when ``prior_rows`` is 0, and for ``alpha`` ≤ 0.5 (a median is what the rows say it is)."""
    if prior_rows <= 0 or not len(raw) or alpha <= 0.5:
        return -math.inf
    prior = SIGMA * NormalDist().inv_cdf(alpha) * prior_rows / (rows + prior_rows)
    return prior - float(np.median(raw - median))


def spread_floors(raw: np.ndarray, y: np.ndarray, served: tuple[float, ...], rows: int,
                  prior_rows: int, rule: str = CONFORMAL) -> list[float]:
    """``spread_floor`` of every served quantile's raw column ``(n, k)``: each above the calibrated median —
    the 0.5 column (or the lowest served one) with its own conformal median offset."""
    ref = raw[:, served.index(0.5) if 0.5 in served else 0]
    median = ref + log_offset(ref, y, 0.5, rule=rule)
    return [spread_floor(raw[:, j], median, q, rows, prior_rows) for j, q in enumerate(served)]


def log_offset(raw: np.ndarray, y: np.ndarray, alpha: float, floor: float = -math.inf,
               rule: str = CONFORMAL) -> float:
    """The conformal log-space offset of a quantile's raw outputs on rows with actuals ``y``, at least ``floor``
    (``rule`` ``empirical``: the plain α-quantile while the conformal rank is the largest residual)."""
    if len(y) < MIN_ROWS:
        return 0.0
    resid = np.sort(np.log1p(y) - raw)
    n, rank = len(resid), conformal_rank(len(resid), alpha)
    plain = rule == EMPIRICAL and n > 1 and rank == n
    c = max(float(np.quantile(resid, alpha)) if plain else float(resid[rank - 1]), floor)
    low, high = (math.log(b) for b in SCALE_BOUNDS)
    return min(max(c, low), high)


def calibrate(raw: np.ndarray, y: np.ndarray, alpha: float, objective: str, floor: float = -math.inf,
              rule: str = CONFORMAL) -> Calibration:
    if objective != "quantile":
        return Calibration()
    return Calibration.from_log_offset(log_offset(raw, y, alpha, floor, rule))


def cross_calibrated(raw: np.ndarray, y: np.ndarray, alpha: float, objective: str,
                     floor: float = -math.inf, rule: str = CONFORMAL) -> np.ndarray:
    """Out-of-sample calibrated ms: even rows corrected by the odd rows' offset and vice versa.

    Used for honest holdout metrics; the published calibration uses all the rows.
    """
    if objective != "quantile":
        return np.maximum(raw, 0.0)
    out = np.empty_like(raw)
    even, odd = slice(0, None, 2), slice(1, None, 2)
    out[even] = calibrate(raw[odd], y[odd], alpha, objective, floor, rule).apply_log(raw[even])
    out[odd] = calibrate(raw[even], y[even], alpha, objective, floor, rule).apply_log(raw[odd])
    return out
