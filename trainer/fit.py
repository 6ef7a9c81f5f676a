"""Fitting one XGBoost model: ``reg:quantileerror`` at α (or ``reg:squarederror`` for mean).

Tuned for the 3-second TTFT+TPOT budget on 2 cores at a 100k-row window and for accuracy at
20k rows: ``hist`` trees with 128 bins, 200 rounds of depth-3 trees at learning rate 0.15, built
from a ``QuantileDMatrix`` (see bench/RESULTS-trainer.md for the measurements behind it). Monotone
constraints (on by default) encode what operators check (contract §8): TTFT does not fall when
the prompt, prefill tokens in flight or the queue grow; TPOT does not fall with running
requests, decode tokens in flight or KV usage.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import xgboost as xgb

from shared.features import TARGET_OF, FeatureSpec
from trainer.store.record import STORED_FIELDS
from trainer.window import Rows

MONOTONE_UP: Mapping[str, frozenset[str]] = {
    "ttft": frozenset({"input_token_length", "effective_input_tokens", "prefill_tokens_in_flight",
                       "num_request_waiting"}),
    "tpot": frozenset({"num_request_running", "decode_tokens_in_flight", "kv_cache_percentage"}),
}


@dataclass(frozen=True)
class FitParams:
    objective: str = "quantile"
    alpha: float = 0.9
    rounds: int = 200
    max_depth: int = 3
    learning_rate: float = 0.15
    max_bin: int = 128
    nthread: int = 2
    monotone: bool = True
    tpot_zero_token_count: bool = True
    prefix_weighting: bool = False

    def booster_params(self, name: str, features: tuple[str, ...]) -> dict[str, object]:
        params: dict[str, object] = {"tree_method": "hist", "max_depth": self.max_depth, "eta": self.learning_rate,
                                     "max_bin": self.max_bin, "nthread": self.nthread, "seed": 0}
        if self.objective == "quantile":
            params.update(objective="reg:quantileerror", quantile_alpha=self.alpha)
        else:
            params["objective"] = "reg:squarederror"
        if self.monotone:
            up = MONOTONE_UP.get(name, frozenset())
            params["monotone_constraints"] = "(" + ",".join("1" if f in up else "0" for f in features) + ")"
        return params


def training_columns(name: str, rows: Rows, tpot_zero_token_count: bool) -> dict[str, np.ndarray]:
    """Raw columns of ``rows`` as the model trains on them (TPOT: tokens generated zeroed, §5)."""
    return matrix_columns(name, rows.data, tpot_zero_token_count)


def matrix_columns(name: str, data: np.ndarray, tpot_zero_token_count: bool) -> dict[str, np.ndarray]:
    """Raw columns of a stored-layout matrix as model ``name`` trains on them."""
    cols = {field: data[:, j] for j, field in enumerate(STORED_FIELDS)}
    if name == "tpot" and tpot_zero_token_count:
        cols["num_tokens_generated"] = np.zeros(len(data))
    return cols


def design(spec: FeatureSpec, name: str, rows: Rows, params: FitParams) -> tuple[np.ndarray, np.ndarray]:
    cols = training_columns(name, rows, params.tpot_zero_token_count)
    return spec.matrix(name, cols), rows.column(TARGET_OF[name])


def prefix_weights(rows: Rows) -> np.ndarray:
    """Inverse-frequency weights by prefix bucket (LATENCY_SAMPLE_WEIGHTING_FOR_PREFIX_CACHE), mean 1."""
    bucket = rows.bucket % 4
    counts = np.bincount(bucket, minlength=4).astype(np.float64)
    weights = 1.0 / counts[bucket]
    return weights * (len(weights) / weights.sum())


def fit_booster(spec: FeatureSpec, name: str, rows: Rows, params: FitParams) -> xgb.Booster:
    """Fit ``name`` on ``rows`` (a real XGBoost training run; CPU-bound, call off the event loop)."""
    features = spec.columns(name)
    x, y = design(spec, name, rows, params)
    weight = prefix_weights(rows) if params.prefix_weighting else None
    dtrain = xgb.QuantileDMatrix(x, y, weight=weight, feature_names=list(features), max_bin=params.max_bin,
                                 nthread=params.nthread)
    return xgb.train(params.booster_params(name, features), dtrain, num_boost_round=params.rounds)


def importances(booster: xgb.Booster, features: tuple[str, ...]) -> dict[str, float]:
    """Normalised gain importance per feature column (0.0 for unused columns)."""
    gains = {k: float(v) for k, v in booster.get_score(importance_type="gain").items()
             if isinstance(v, (int, float))}
    total = sum(gains.values()) or 1.0
    return {f: gains.get(f, 0.0) / total for f in features}
