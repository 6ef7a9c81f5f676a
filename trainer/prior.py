"""The prior bundle published at first start with no data, so predictors are ready at once.

Each model is its physical base alone (``shared.base``): the default coefficients — a GPU roofline of a mid-size
(~8B) model on one GPU, ``shared.base.DEFAULT_COEFFICIENTS`` — or a profile's (a seed learnt on a simulated engine,
``sim.prior_seed``), no trees, and a log-normal spread around it: quantile ``q`` is ``(1 + base)·exp(σ·z_q) − 1``
with σ = ln(1.3) / z_0.9 ≈ 0.205 (p50 = the base, p90 ≈ 1.3 × the base, p99 ≈ 1.61 ×), written as each quantile's
calibration. Every input predicts > 0 and grows with load past any range. From the first
``LATENCY_MIN_SAMPLES_FOR_RETRAIN_FRESH`` rows the trainer refits the base's level and shape (shrunk toward these
coefficients while rows are few, ``trainer.base_fit``); the trees join from ``LATENCY_MIN_SAMPLES_FOR_RETRAIN``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from statistics import NormalDist

import numpy as np

from shared.base import Base
from shared.bundle import ModelEntry, encode_model
from shared.features import MODEL_NAMES, FeatureSpec
from shared.model import quantile_key
from trainer.calibrate import SIGMA
from trainer.fit import BASE_ONLY, empty_booster


def spread(q: float) -> dict[str, float]:
    """The calibration of quantile ``q`` around a median base: log offset σ·z_q."""
    scale = math.exp(SIGMA * NormalDist().inv_cdf(q))
    return {"scale": scale, "offset": scale - 1.0}


def fit_prior(spec: FeatureSpec, quantiles: tuple[float, ...] = (0.5, 0.9, 0.99), primary: float = 0.9,
              bases: Mapping[str, Base] | None = None) -> dict[str, tuple[dict[str, bytes], ModelEntry]]:
    """model name → ({file: bytes}, manifest entry) of the prior, serving ``quantiles``: the base of ``bases``
    (default: ``Base.default``) with the log-normal spread."""
    out: dict[str, tuple[dict[str, bytes], ModelEntry]] = {}
    for name in MODEL_NAMES:
        features = spec.columns(name)
        base = (bases or {}).get(name) or Base.default(name, features)
        booster = empty_booster(np.zeros((1, len(features)), np.float32), len(quantiles), features)
        cals = {quantile_key(q): spread(q) for q in quantiles}
        out[name] = encode_model(booster, name, features, {
            "quantiles": list(quantiles), "primary_quantile": primary, "target_transform": "log1p",
            "calibration": cals[quantile_key(primary)], "calibrations": cals, "candidate": BASE_ONLY,
            "training_rows": 0, "holdout_rows": 0, "metrics": {}, "prior": True, "base": base.as_dict()})
    return out
