"""One model fitted for publication: its file bytes, holdout predictions and manifest entry.

Shared by the retrain cycle (``trainer.cycle``) and the replay's in-process retrainer
(``sim.policies.retrainer``), so both publish exactly the same kind of model.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from shared.bundle import encode_model
from shared.features import FeatureSpec
from trainer.calibrate import calibrate
from trainer.fit import FitParams, design, fit_booster, importances
from trainer.window import Rows


@dataclass(frozen=True)
class FittedModel:
    name: str
    data: bytes
    raw_holdout: np.ndarray
    """Uncalibrated predictions on the holdout rows."""
    y_holdout: np.ndarray
    entry: dict[str, Any]
    """The manifest entry (calibrated on the whole holdout); holdout metrics are the caller's."""
    fit_seconds: float


def fit_model(spec: FeatureSpec, name: str, train: Rows, holdout: Rows, params: FitParams) -> FittedModel:
    """Fit ``name`` on ``train``, predict the holdout, calibrate on it (CPU-bound: off the event loop)."""
    started, cpu_started = time.perf_counter(), time.thread_time()
    booster = fit_booster(spec, name, train, params)
    fit_seconds = time.perf_counter() - started
    fit_cpu_seconds = time.thread_time() - cpu_started
    x_hold, y_hold = design(spec, name, holdout, params)
    raw = np.asarray(booster.inplace_predict(x_hold), dtype=np.float64).reshape(-1) if len(holdout) \
        else np.empty(0)
    features = spec.columns(name)
    data, entry = encode_model(booster, name, features, {
        "quantiles": [params.alpha], "objective": params.objective,
        "calibration": calibrate(raw, y_hold, params.alpha, params.objective).as_dict(),
        "training_rows": len(train), "holdout_rows": len(holdout), "importances": importances(booster, features),
        "fit_seconds": round(fit_seconds, 4), "fit_cpu_seconds": round(fit_cpu_seconds, 4), "prior": False})
    return FittedModel(name, data, raw, y_hold, entry, fit_seconds)
