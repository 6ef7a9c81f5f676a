"""A model fitted on fewer rows than the trees need: the physical base alone, calibrated on every row.

Below ``FitParams.tree_min_rows`` (``LATENCY_MIN_SAMPLES_FOR_RETRAIN``) the served model is the base with a
conformal offset per quantile. Holding the newest quarter of ten or forty rows out to calibrate on leaves a p90
decided by two to ten rows (the largest of them, mostly); instead every row is both fitted and held out: the
base is refitted ``folds`` times, each time without one interleaved fold of the rows, and each row's residual is
taken against the fit that did not see it (cross-validation: honest residuals, all ``n`` of them). The served base
is the fit on every row; each quantile's offset is the split-conformal one over the ``n`` residuals, never below
the prior's spread while rows are few (``trainer.calibrate.spread_floor``). For the models in
``FitParams.thin_empirical`` (TPOT by default) a quantile whose conformal rank would be the largest residual is the
plain α-quantile of the residuals instead: on a real-engine run one 14-token response's 88 ms TPOT (typical 13 ms)
otherwise set the p90 of every fit on fewer than 19 rows, pinball refused each and a 6-row model served for 90 s
(coverage 0.71, bench/results/real_engine/noprofile-engine.json). TTFT keeps the conformal rank: the empirical one
had the higher pinball on both traces of the learning replay's suite. Every row is then also a *newest* row: the
challenger and the live model are judged on all of them (even rows by the odd rows' offset and vice versa, as the
holdout scores are).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from shared.base import Base
from trainer.base_fit import fit_base
from trainer.calibrate import CONFORMAL, EMPIRICAL, Calibration, calibrate, cross_calibrated, spread_floors
from trainer.fit import FitParams

MAX_FOLDS = 20


@dataclass(frozen=True)
class ThinFit:
    base: Base
    margin: np.ndarray
    """Each row's base margin (log1p ms) from the fit that did not see it."""
    calibrations: list[Calibration]
    """Per served quantile."""
    levels: list[float]
    holdout_pred: np.ndarray
    """The primary quantile per row, cross-calibrated (honest)."""


def folds_of(n: int) -> np.ndarray:
    """Each row's fold: interleaved in arrival order, ``min(n, MAX_FOLDS)`` folds."""
    return np.arange(n) % min(n, MAX_FOLDS)


def held_out_margin(name: str, features: tuple[str, ...], x: np.ndarray, y: np.ndarray, weight: np.ndarray,
                    prior: Base | None, params: FitParams) -> np.ndarray:
    """log1p of each row's base from the fit on the other folds."""
    fold = folds_of(len(y))
    out = np.empty(len(y))
    for k in range(int(fold.max(initial=-1)) + 1):
        keep, held = fold != k, fold == k
        base = fit_base(name, features, x[keep], y[keep], weight[keep], prior, params.base)
        out[held] = np.log1p(base.compiled(features)(x[held]))
    return out


def fit_thin(name: str, features: tuple[str, ...], x: np.ndarray, y: np.ndarray, weight: np.ndarray,
             prior: Base | None, params: FitParams) -> ThinFit:
    """The base on every row, calibrated on cross-validated residuals (quantile objective, log1p space)."""
    base = fit_base(name, features, x, y, weight, prior, params.base)
    margin = held_out_margin(name, features, x, y, weight, prior, params) if len(y) > 1 else \
        np.log1p(base.compiled(features)(x))
    served = params.served
    rule = EMPIRICAL if name in params.thin_empirical else CONFORMAL
    floors = spread_floors(np.repeat(margin[:, None], len(served), axis=1), y, served, len(y),
                           params.prior_spread_rows, rule)
    levels = [(params.calibration_level or q) if q == params.alpha else q for q in served]
    cals = [calibrate(margin, y, level, params.objective, floor, rule)
            for level, floor in zip(levels, floors, strict=True)]
    primary = served.index(params.alpha)
    holdout = cross_calibrated(margin, y, levels[primary], params.objective, floors[primary], rule)
    return ThinFit(base, margin, cals, levels, holdout)
