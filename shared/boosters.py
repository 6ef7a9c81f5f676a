"""XGBoost boosters as a model's evaluator (``shared.model.Loader``): the trainer's, the replay's and the benchmarks'.

A model's raw margins are its booster's ``inplace_predict`` with, when the entry has a ``location_file``, the
location booster's output (float32) as base margin for every output column. The predictor does not use this: it
evaluates the same trees with the numpy forest (``predictor.serving``), bit-equal.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import orjson
import xgboost as xgb

from shared.bundle import Bundle
from shared.errors import BundleError

Evaluator = Callable[[np.ndarray], np.ndarray]
"""``shared.model.Evaluator`` (not imported: ``shared.model`` imports this module for its default loader)."""


def load_booster(data: bytes, name: str, n_features: int, nthread: int = 1) -> xgb.Booster:
    booster = xgb.Booster(params={"nthread": nthread})
    try:
        booster.load_model(bytearray(data))
    except xgb.core.XGBoostError as exc:
        raise BundleError(f"{name}: XGBoost cannot load the model: {exc}") from None
    if booster.num_features() != n_features:
        raise BundleError(f"{name}: model has {booster.num_features()} features, spec {n_features}")
    return booster


def outputs(booster: xgb.Booster) -> int:
    """Output columns of ``booster`` (``num_target``: one per quantile of a multi-quantile booster)."""
    params = orjson.loads(booster.save_config())["learner"]["learner_model_param"]
    return max(1, int(params.get("num_target", "1")))


def booster_raw(booster: xgb.Booster, location: xgb.Booster | None) -> Evaluator:
    k = outputs(booster)

    def raw(matrix: np.ndarray) -> np.ndarray:
        base = None
        if location is not None:
            start = np.asarray(location.inplace_predict(matrix, validate_features=False), dtype=np.float32)
            base = np.repeat(start.reshape(-1, 1), k, axis=1)
        out = booster.inplace_predict(matrix, validate_features=False, base_margin=base)
        return np.asarray(out, dtype=np.float64).reshape(len(matrix), -1)
    return raw


def booster_loader(bundle: Bundle, name: str, nthread: int) -> tuple[Evaluator, str]:
    """``shared.model.Loader`` with XGBoost: the entry's booster and location booster."""
    entry = bundle.model_entry(name)
    n = len(entry.features)
    booster = load_booster(bundle.model_bytes(name), name, n, nthread)
    location = None if not entry.location_file else load_booster(bundle.files[entry.location_file], name, n, nthread)
    return booster_raw(booster, location), "xgboost"
