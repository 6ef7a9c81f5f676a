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

Other quantiles follow a log-normal spread around the median ``base`` (the formula without the
1.3): ``q_a = base × exp(σ·z_a)`` with σ = ln(1.3) / z_0.9 ≈ 0.205, so p90 is the formula above, p50
is ``base`` and p99 ≈ 1.61 × base. One multi-output booster serves them all, like a trained bundle.
Targets are ≥ 10 ms on the whole grid and trees are piecewise constant inside it, so every
input (also beyond the grid: trees clamp) predicts > 0. The first real retrain replaces it
(the prior loses the champion/challenger test on real data).
"""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np
import xgboost as xgb

from shared.bundle import ModelEntry, encode_model
from shared.features import MODEL_NAMES, FeatureSpec, typical_columns
from shared.model import quantile_key

GRID_ROWS = 4000
P90_FACTOR = 1.3
SIGMA = math.log(P90_FACTOR) / NormalDist().inv_cdf(0.9)
FORMULA = {
    "ttft": "1.3*(25 + 0.08*effective_input_tokens + 0.04*prefill_tokens_in_flight + 60*num_request_waiting"
            " + 0.5*num_request_running)",
    "tpot": "1.3*(8 + 0.12*num_request_running + 12*kv_cache_percentage + 0.0004*decode_tokens_in_flight"
            " + 0.00002*prefill_tokens_in_flight)",
}


def grid_columns(n: int = GRID_ROWS, seed: int = 0) -> dict[str, np.ndarray]:
    """Every feature over its typical range (``shared.features.typical_columns``), deterministic."""
    return typical_columns(n, np.random.default_rng(seed))


def prior_targets(name: str, cols: dict[str, np.ndarray], quantile: float = 0.9) -> np.ndarray:
    if name == "ttft":
        effective = (1.0 - cols["prefix_cache_score"]) * cols["input_token_length"]
        base = (25 + 0.08 * effective + 0.04 * cols["prefill_tokens_in_flight"] + 60 * cols["num_request_waiting"]
                + 0.5 * cols["num_request_running"])
    else:
        base = (8 + 0.12 * cols["num_request_running"] + 12 * cols["kv_cache_percentage"]
                + 0.0004 * cols["decode_tokens_in_flight"] + 0.00002 * cols["prefill_tokens_in_flight"])
    return base * math.exp(SIGMA * NormalDist().inv_cdf(quantile))


def fit_prior(spec: FeatureSpec, quantiles: tuple[float, ...] = (0.5, 0.9, 0.99), primary: float = 0.9,
              nthread: int = 1) -> dict[str, tuple[dict[str, bytes], ModelEntry]]:
    """model name → ({file: UBJSON bytes}, manifest entry) of the prior, serving ``quantiles``."""
    cols = grid_columns()
    out: dict[str, tuple[dict[str, bytes], ModelEntry]] = {}
    identity = {"scale": 1.0, "offset": 0.0}
    for name in MODEL_NAMES:
        features = spec.columns(name)
        targets = np.column_stack([prior_targets(name, cols, q) for q in quantiles])
        dtrain = xgb.DMatrix(spec.matrix(name, cols), targets, feature_names=list(features))
        booster = xgb.train({"objective": "reg:squarederror", "max_depth": 5, "eta": 0.3, "tree_method": "hist",
                             "nthread": nthread, "seed": 0}, dtrain, num_boost_round=60)
        out[name] = encode_model(booster, name, features, {
            "quantiles": list(quantiles), "primary_quantile": primary, "target_transform": "identity",
            "calibration": identity, "calibrations": {quantile_key(q): identity for q in quantiles},
            "training_rows": 0, "holdout_rows": 0, "metrics": {}, "prior": True, "prior_formula": FORMULA[name]})
    return out
