"""The prior bundle published at first start with no data, so predictors are ready at once.

A roofline-style estimate of the p90 latency of a mid-size model (~8B) on one GPU, fitted as
a tiny real XGBoost model on a fixed synthetic grid (deterministic, seed 0):

* TTFT_ms = 1.3 × (25 + 0.08·effective_input_tokens + 0.04·prefill_tokens_in_flight
                   + 60·num_request_waiting + 0.5·num_request_running)
  — prefill is compute-bound (~12k tokens/s), queued work is served first, each waiting
  request costs about one prefill.
* TPOT_ms = 1.3 × (8 + 0.12·num_request_running + 12·kv_cache_percentage
                   + 0.0004·decode_tokens_in_flight + 0.02·prefill_tokens_in_flight/1000)
  — decode is memory-bound: the batch and the KV read per step set the step time.

Targets are ≥ 10 ms on the whole grid and trees are piecewise constant inside it, so every
input (also beyond the grid: trees clamp) predicts > 0. The first real retrain replaces it
(the prior loses the champion/challenger test on real data).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import xgboost as xgb

from shared.bundle import encode_model
from shared.features import MODEL_NAMES, FeatureSpec, typical_columns

GRID_ROWS = 4000
P90_FACTOR = 1.3
FORMULA = {
    "ttft": "1.3*(25 + 0.08*effective_input_tokens + 0.04*prefill_tokens_in_flight + 60*num_request_waiting"
            " + 0.5*num_request_running)",
    "tpot": "1.3*(8 + 0.12*num_request_running + 12*kv_cache_percentage + 0.0004*decode_tokens_in_flight"
            " + 0.00002*prefill_tokens_in_flight)",
}


def grid_columns(n: int = GRID_ROWS, seed: int = 0) -> dict[str, np.ndarray]:
    """Every feature over its typical range (``shared.features.typical_columns``), deterministic."""
    return typical_columns(n, np.random.default_rng(seed))


def prior_targets(name: str, cols: dict[str, np.ndarray]) -> np.ndarray:
    if name == "ttft":
        effective = (1.0 - cols["prefix_cache_score"]) * cols["input_token_length"]
        base = (25 + 0.08 * effective + 0.04 * cols["prefill_tokens_in_flight"] + 60 * cols["num_request_waiting"]
                + 0.5 * cols["num_request_running"])
    else:
        base = (8 + 0.12 * cols["num_request_running"] + 12 * cols["kv_cache_percentage"]
                + 0.0004 * cols["decode_tokens_in_flight"] + 0.00002 * cols["prefill_tokens_in_flight"])
    return P90_FACTOR * base


def fit_prior(spec: FeatureSpec, nthread: int = 1) -> dict[str, tuple[bytes, dict[str, Any]]]:
    """model name → (UBJSON bytes, manifest entry) of the prior."""
    cols = grid_columns()
    out: dict[str, tuple[bytes, dict[str, Any]]] = {}
    for name in MODEL_NAMES:
        features = spec.columns(name)
        dtrain = xgb.DMatrix(spec.matrix(name, cols), prior_targets(name, cols), feature_names=list(features))
        booster = xgb.train({"objective": "reg:squarederror", "max_depth": 5, "eta": 0.3, "tree_method": "hist",
                             "nthread": nthread, "seed": 0}, dtrain, num_boost_round=60)
        out[name] = encode_model(booster, name, features, {
            "training_rows": 0, "holdout_rows": 0, "calibration": {"scale": 1.0, "offset": 0.0}, "metrics": {},
            "prior": True, "prior_formula": FORMULA[name]})
    return out
