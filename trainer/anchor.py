"""The prior as the starting point of a fit while a pool's data is thin: shrinkage toward the prior.

A fit on a pool's first few dozen rows early-stops after a round or two, so its location is nearly a constant and
its served p90 is that constant times the conformal scale: it covers the rows it was calibrated on and not the
next regime (a burst of long prompts, a decode batch that grows). On a real engine (conv, two engines, the seed
learnt for the deployed shape) such a fit on 50 rows replaced a prior that covered 0.92 of TPOTs and covered 0.78.

An *anchored* fit continues boosting from the prior's location (log1p ms) instead of from a constant: the trees
learn the correction the rows support, the prior's shape stays where they say nothing, and the conformal calibration
sets the level as for any fit. Anchored and plain candidates compete on the newest rows (the lower log-RMSE wins: a
prior whose shape is wrong for the pool loses to the plain fit). The published booster holds the prior's trees and
the new ones (XGBoost training continuation), so predictors evaluate it like any other. The anchor of a model is the
prior's own location booster when it has one in log1p space (a seed learnt in the simulator, ``sim.prior_seed``);
otherwise a booster distilled from the prior's p50 over the typical grid (the built-in roofline prior serves its
quantiles in ms from one multi-output booster).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping

import numpy as np
import xgboost as xgb

from shared.features import MODEL_NAMES, FeatureSpec
from shared.model import LoadedBundle
from trainer.prior import grid_columns

DISTILL_ROUNDS = 60
DISTILL_DEPTH = 5


def _own_location(prior: LoadedBundle, name: str) -> xgb.Booster | None:
    entry = prior.bundle.model_entry(name)
    single = len(prior.models[name].quantiles) == 1
    file = entry.location_file or (entry.file if single else None)
    if file is None or entry.target_transform != "log1p":
        return None
    booster = xgb.Booster()
    booster.load_model(bytearray(prior.bundle.model_files(name)[file]))
    return booster


def _distilled(prior: LoadedBundle, name: str, spec: FeatureSpec, nthread: int) -> xgb.Booster:
    cols = grid_columns()
    served = prior.predict_all(name, cols)
    quantiles = prior.models[name].quantiles
    column = quantiles.index(0.5) if 0.5 in quantiles else prior.models[name].primary
    features = list(spec.columns(name))
    dtrain = xgb.DMatrix(spec.matrix(name, cols), np.log1p(served[:, column]), feature_names=features)
    return xgb.train({"objective": "reg:squarederror", "max_depth": DISTILL_DEPTH, "eta": 0.3, "tree_method": "hist",
                      "nthread": nthread, "seed": 0}, dtrain, num_boost_round=DISTILL_ROUNDS)


def anchors_of(prior: LoadedBundle, spec: FeatureSpec, nthread: int = 1) -> dict[str, xgb.Booster]:
    """Per model, the location booster (log1p ms) an anchored fit continues from."""
    return {name: _own_location(prior, name) or _distilled(prior, name, spec, nthread) for name in MODEL_NAMES}


class Anchors:
    """The anchors of the trainer's prior, built on first use (a restart that has data enough never needs them)."""

    def __init__(self, source: Callable[[], LoadedBundle | None], spec: FeatureSpec, rows: int) -> None:
        self._source, self._spec, self.rows = source, spec, rows
        """Below this many rows (train + holdout) a model is also fitted anchored; from there on plain only."""
        self._built: Mapping[str, xgb.Booster] | None = None
        self._lock = threading.Lock()

    def for_fit(self, name: str, rows: int) -> xgb.Booster | None:
        """The anchor of ``name`` when a fit on ``rows`` rows should use one, else None."""
        if rows >= self.rows:
            return None
        with self._lock:
            if self._built is None:
                prior = self._source()
                self._built = {} if prior is None else anchors_of(prior, self._spec)
        return self._built.get(name)
