"""The model contract of the suite, and adapter 1: the trainer's current path, exactly as it runs.

``Model.fit(target, train, quantiles)`` sees only the training rows (in arrival order) and
returns a ``Fitted`` that answers every asked quantile on new rows; the harness times the fit
(wall and thread CPU) and never shows it the test set.

``Proposed``: the design of ``bench.quality.proposed`` on the same rows.

``Current``: rows go into ``trainer.window.Window`` (stratified train store capped per bucket +
newest holdout, the trainer's default settings), then ``trainer.fitted.fit_model`` with
``trainer.service.fit_params(TrainerSettings())`` at α = each quantile (one model per quantile,
as the trainer would with ``LATENCY_QUANTILE_ALPHA``), conformal scale from the holdout, served
as ``shared.model``'s ``max(0, raw × scale + offset)``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import numpy as np
import xgboost as xgb

from bench.quality.family import Split
from bench.quality.proposed import DesignParams, QuantileModel, fit_quantiles
from shared.features import TARGET_OF, FeatureSpec
from shared.model import LoadedModel
from shared.trainer_settings import TrainerSettings
from trainer.fit import MONOTONE_UP
from trainer.fitted import fit_model
from trainer.service import fit_params
from trainer.store.record import STORED_FIELDS, columns_to_matrix
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
    """The trainer's stored row layout: features + both targets (the other target 0, as the EPP sends)."""
    n = len(split)
    cols: dict[str, np.ndarray] = {name: np.asarray(split.cols[name]) for name in STORED_FIELDS
                                   if name in split.cols}
    cols.update(actual_ttft_ms=np.zeros(n), actual_tpot_ms=np.zeros(n))
    cols[TARGET_OF[target]] = split.y
    return columns_to_matrix(cols)


@dataclass(frozen=True)
class _CurrentFitted:
    models: Mapping[float, LoadedModel]
    target: str
    info: Mapping[str, Any] = field(default_factory=dict)

    def predict(self, cols: Mapping[str, np.ndarray]) -> dict[float, np.ndarray]:
        x = SPEC.matrix(self.target, cols)
        return {alpha: m.calibrate(m.raw(x)) for alpha, m in self.models.items()}


class Current:
    """The trainer as it runs today (default ``TrainerSettings``; ``per_bucket`` overrides the cap)."""

    name = "current"

    def __init__(self, per_bucket: int | None = None, **settings: Any) -> None:
        self.settings = TrainerSettings(**settings)
        self.per_bucket = per_bucket or self.settings.max_training_data_size_per_bucket

    def fit(self, target: str, train: Split, quantiles: tuple[float, ...]) -> Fitted:
        s = self.settings
        window = Window(self.per_bucket, s.test_train_ratio, s.max_test_data_size)
        window.add(0, stored_matrix(target, train))
        rows, holdout = window.snapshot(target)
        models, info = {}, {"train_rows": len(rows), "holdout_rows": len(holdout)}
        for alpha in quantiles:
            fitted = fit_model(SPEC, target, rows, holdout, replace(fit_params(s), alpha=alpha))
            booster = xgb.Booster(params={"nthread": 1})
            booster.load_model(bytearray(fitted.data))
            cal = fitted.entry["calibration"]
            models[alpha] = LoadedModel(target, booster, SPEC.columns(target), cal["scale"], cal["offset"])
            info[f"scale_{alpha}"] = cal["scale"]
        return _CurrentFitted(models, target, info)


@dataclass(frozen=True)
class _ProposedFitted:
    model: QuantileModel
    target: str
    info: Mapping[str, Any] = field(default_factory=dict)

    def predict(self, cols: Mapping[str, np.ndarray]) -> dict[float, np.ndarray]:
        out = self.model.predict(SPEC.matrix(self.target, cols))
        return {alpha: out[:, j] for j, alpha in enumerate(self.model.quantiles)}


class Proposed:
    """``bench.quality.proposed.fit_quantiles`` on the window's rows (strata = the trainer's buckets)."""

    def __init__(self, params: DesignParams | None = None, name: str = "proposed") -> None:
        self.params, self.name = params or DesignParams(), name

    def fit(self, target: str, train: Split, quantiles: tuple[float, ...]) -> Fitted:
        matrix = stored_matrix(target, train)
        cols = dict(train.cols)
        if target == "tpot":
            cols["num_tokens_generated"] = np.zeros(len(train))
        params = replace(self.params, quantiles=quantiles)
        model = fit_quantiles(SPEC.matrix(target, cols), train.y, SPEC.columns(target), MONOTONE_UP[target],
                              bucket_ids(matrix), params)
        return _ProposedFitted(model, target, dict(model.info))
