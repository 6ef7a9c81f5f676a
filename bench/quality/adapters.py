"""The model contract of the suite and its adapters.

``Model.fit(target, train, quantiles)`` sees only the training rows (in arrival order) and
returns a ``Fitted`` that answers every asked quantile on new rows; the harness times the fit
(wall and thread CPU) and never shows it the test set.

* ``Trainer`` ("trainer"): the trainer exactly as it runs now — ``trainer.window.Window`` with the
  default settings (water-filled 100k window, newest holdout), ``trainer.fitted.fit_model`` with
  ``trainer.service.fit_params(TrainerSettings())`` (candidates, location + multi-quantile booster,
  per-quantile calibration), served through ``shared.model`` like a predictor does.
* ``V1`` ("v1"): the trainer before this rework, reproduced here (xgboost + numpy only) so both are
  measured in the same run: per-bucket cap 500, one ``reg:quantileerror`` model per quantile, depth 3,
  200 rounds at 0.15, monotone constraints, multiplicative conformal scale on the newest rows.
* ``Proposed`` ("proposed"): ``bench.quality.proposed``, the research design the trainer was ported from.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import numpy as np
import xgboost as xgb

from bench.quality.family import Split
from bench.quality.proposed import DesignParams, QuantileModel, fit_quantiles
from shared.bundle import assemble, in_memory
from shared.features import RAW_FEATURE_NAMES, TARGET_OF, FeatureSpec, feature_columns
from shared.model import LoadedBundle, load_model
from shared.trainer_settings import TrainerSettings
from trainer.cycle import bundle_meta
from trainer.fit import MONOTONE_UP, monotone_signs
from trainer.fitted import fit_model
from trainer.recency import Recency
from trainer.service import fit_params
from trainer.store.record import columns_to_matrix
from trainer.window import Window, bucket_ids

SPEC = FeatureSpec()


class Fitted(Protocol):
    @property
    def info(self) -> Mapping[str, Any]: ...

    def predict(self, cols: Mapping[str, np.ndarray]) -> dict[float, np.ndarray]: ...


class Model(Protocol):
    name: str

    def fit(self, target: str, train: Split, quantiles: tuple[float, ...]) -> Fitted: ...


def stored_matrix(target: str, split: Split) -> np.ndarray:
    """The trainer's stored row layout: features (absent ones defaulted) + both targets (the other 0)."""
    n = len(split)
    cols = feature_columns({k: np.asarray(v) for k, v in split.cols.items() if k in RAW_FEATURE_NAMES}, n)
    cols.update(actual_ttft_ms=np.zeros(n), actual_tpot_ms=np.zeros(n))
    cols[TARGET_OF[target]] = split.y
    return columns_to_matrix(cols)


def model_columns(target: str, cols: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Raw columns as the model reads them (absent features defaulted; TPOT: tokens generated 0)."""
    n = len(next(iter(cols.values())))
    out = feature_columns({k: np.asarray(v) for k, v in cols.items() if k in RAW_FEATURE_NAMES}, n)
    if target == "tpot":
        out["num_tokens_generated"] = np.zeros(n)
    return out


@dataclass(frozen=True)
class _BundleFitted:
    loaded: LoadedBundle
    target: str
    info: Mapping[str, Any] = field(default_factory=dict)

    def predict(self, cols: Mapping[str, np.ndarray]) -> dict[float, np.ndarray]:
        table = self.loaded.predict_all(self.target, model_columns(self.target, cols))
        return {q: table[:, j] for j, q in enumerate(self.loaded.models[self.target].quantiles)}


class Trainer:
    """The trainer as it runs now (default ``TrainerSettings``; keyword arguments override settings)."""

    def __init__(self, name: str = "trainer", params: Mapping[str, Any] | None = None, **settings: Any) -> None:
        self.name = name
        self.settings = TrainerSettings(**settings)
        self.params = dict(params or {})
        """FitParams overrides (design research on fit options that have no setting yet)."""

    def fit(self, target: str, train: Split, quantiles: tuple[float, ...]) -> Fitted:
        s = self.settings
        window = Window(s.max_training_data_size_per_bucket, s.test_train_ratio, s.max_test_data_size,
                        s.window_max_rows)
        window.add(0, stored_matrix(target, train), 0.0)
        rows, holdout = window.snapshot(target)
        params = replace(fit_params(s), quantiles=quantiles, alpha=0.9 if 0.9 in quantiles else quantiles[0],
                         **self.params)
        fitted = fit_model(SPEC, target, rows, holdout, params, Recency(s.recency_half_life_sec, s.recency_floor))
        manifest, files = assemble(1, "2026-12-01T00:00:00+00:00", {target: (fitted.files, fitted.entry)},
                                   bundle_meta(SPEC, params, prior=False), None)
        bundle = in_memory(manifest, files)
        loaded = LoadedBundle(bundle, SPEC, {target: load_model(bundle, target, SPEC, 1)})
        info = fitted.entry.written("candidate", "location_rounds", "quantile_rounds", "training_rows")
        return _BundleFitted(loaded, target, info)


@dataclass(frozen=True)
class _V1Fitted:
    boosters: Mapping[float, xgb.Booster]
    scales: Mapping[float, float]
    target: str
    info: Mapping[str, Any] = field(default_factory=dict)

    def predict(self, cols: Mapping[str, np.ndarray]) -> dict[float, np.ndarray]:
        x = SPEC.matrix(self.target, model_columns(self.target, cols))
        return {q: np.maximum(np.asarray(b.inplace_predict(x), dtype=np.float64) * self.scales[q], 0.0)
                for q, b in self.boosters.items()}


class V1:
    """The pre-rework trainer fit (see the module docstring), for a same-run baseline."""

    name = "v1"

    def fit(self, target: str, train: Split, quantiles: tuple[float, ...]) -> Fitted:
        window = Window(500, 0.1, 2000, 10**9)
        window.add(0, stored_matrix(target, train), 0.0)
        rows, holdout = window.snapshot(target)
        x = SPEC.matrix(target, model_columns(target, {f: rows.column(f) for f in RAW_FEATURE_NAMES}))
        x_hold = SPEC.matrix(target, model_columns(target, {f: holdout.column(f) for f in RAW_FEATURE_NAMES}))
        y, y_hold = rows.column(TARGET_OF[target]), holdout.column(TARGET_OF[target])
        signs = "(" + ",".join(str(v) for v in monotone_signs(target, SPEC.columns(target))) + ")"
        dtrain = xgb.QuantileDMatrix(x, y, max_bin=128, nthread=1)
        boosters, scales = {}, {}
        for q in quantiles:
            params = {"tree_method": "hist", "max_depth": 3, "eta": 0.15, "max_bin": 128, "nthread": 1, "seed": 0,
                      "objective": "reg:quantileerror", "quantile_alpha": q, "monotone_constraints": signs}
            boosters[q] = xgb.train(params, dtrain, num_boost_round=200)
            raw = np.asarray(boosters[q].inplace_predict(x_hold), dtype=np.float64)
            scales[q] = _v1_scale(raw, y_hold, q)
        return _V1Fitted(boosters, scales, target, {"train_rows": len(rows)})


def _v1_scale(raw: np.ndarray, y: np.ndarray, alpha: float) -> float:
    usable = raw > 1e-9
    if usable.sum() < 10:
        return 1.0
    ratios = y[usable] / raw[usable]
    n = len(ratios)
    level = min(1.0, math.ceil((n + 1) * alpha) / n)
    return float(np.clip(np.quantile(ratios, level, method="higher"), 0.25, 4.0))


@dataclass(frozen=True)
class _ProposedFitted:
    model: QuantileModel
    target: str
    info: Mapping[str, Any] = field(default_factory=dict)

    def predict(self, cols: Mapping[str, np.ndarray]) -> dict[float, np.ndarray]:
        out = self.model.predict(SPEC.matrix(self.target, model_columns(self.target, cols)))
        return {alpha: out[:, j] for j, alpha in enumerate(self.model.quantiles)}


class Proposed:
    """``bench.quality.proposed.fit_quantiles`` on the window's rows (strata = the trainer's buckets)."""

    def __init__(self, params: DesignParams | None = None, name: str = "proposed") -> None:
        self.params, self.name = params or DesignParams(), name

    def fit(self, target: str, train: Split, quantiles: tuple[float, ...]) -> Fitted:
        matrix = stored_matrix(target, train)
        cols = model_columns(target, train.cols)
        params = replace(self.params, quantiles=quantiles)
        model = fit_quantiles(SPEC.matrix(target, cols), train.y, SPEC.columns(target), MONOTONE_UP[target],
                              bucket_ids(matrix), params)
        return _ProposedFitted(model, target, dict(model.info))
