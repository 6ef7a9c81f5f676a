"""The immutable thing a request predicts with: a loaded bundle whose models the numpy forest evaluates.

``build_serving`` runs off the event loop: per model it reads the trees' array form the trainer published in the
bundle (``forest_file``, proven bit-equal to XGBoost when it was published; ``shared.forest_file``), folds the
location and quantile boosters into one forest (``shared.forest.fold``), then checks features, quantiles and
calibrations and runs a smoke prediction (``shared.model``). The predictor never imports XGBoost.

A bundle without the array form (written by an older trainer, or by hand) is still served when its booster files
can be compiled without XGBoost: the ``.ubj`` / ``.json`` files are read as model documents (``shared.ubjson``) and
compiled by the same code the trainer uses (gbtree, identity-link objectives, numeric splits, depth ≤ 10, ≤ 256
features). Anything else (a booster the forest does not reproduce, a file XGBoost wrote in another format) is
refused with the reason; the previous bundle keeps serving.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

import numpy as np

from shared.bundle import Bundle
from shared.errors import LatencyError
from shared.features import MODEL_NAMES, FeatureSpec
from shared.forest_loader import forest_loader
from shared.model import LoadedBundle, LoadedModel, load_bundle
from shared.predictor_settings import PredictorSettings
from shared.timefmt import from_epoch

EVALUATOR = "numpy-forest"


class PredictionFailed(LatencyError):
    """The model produced no usable output (never a partial or non-finite answer)."""

    status = 500


@dataclass(frozen=True)
class Serving:
    """One live bundle. Swapped as a single reference; never mutated."""

    loaded: LoadedBundle
    source: str
    loaded_at: float
    model_type: str
    objective_type: str
    quantile: float

    @property
    def version(self) -> int:
        return self.loaded.version

    @property
    def prior(self) -> bool:
        return self.loaded.bundle.manifest.prior

    @property
    def last_model_load(self) -> str:
        return from_epoch(self.loaded_at)

    @property
    def evaluator(self) -> Mapping[str, str]:
        return MappingProxyType({name: EVALUATOR for name in MODEL_NAMES})

    @property
    def forest_from(self) -> Mapping[str, str]:
        """Per model where its trees came from: the bundle's array form, or its booster files (older bundles)."""
        return MappingProxyType({name: self.loaded.models[name].kind for name in MODEL_NAMES})

    def predict(self, name: str, cols: Mapping[str, np.ndarray]) -> np.ndarray:
        """Calibrated, non-crossing quantiles of model ``name`` for every row: ``(n, k)`` float64, ≥ 0."""
        model: LoadedModel = self.loaded.models[name]
        return model.calibrate(model.raw(self.loaded.spec.matrix(name, cols)))

    def quantiles(self, name: str) -> tuple[float, ...]:
        return self.loaded.models[name].quantiles

    def primary(self, name: str) -> int:
        return self.loaded.models[name].primary


def _meta(bundle: Bundle, settings: PredictorSettings) -> tuple[str, str, float]:
    manifest = bundle.manifest
    quantile = manifest.quantile
    if quantile is None or not 0 < quantile <= 1:
        quantile = settings.quantile_alpha
    return (manifest.model_type or settings.model_type, manifest.objective_type or settings.objective_type,
            quantile)


def build_serving(bundle: Bundle, settings: PredictorSettings, source: str,
                  expected: FeatureSpec | None = None) -> Serving:
    """Load, fold and smoke-test ``bundle``; raise ``BundleError`` to refuse it."""
    loaded = load_bundle(bundle, expected or settings.feature_spec, loader=forest_loader)
    return Serving(loaded, source, time.time(), *_meta(bundle, settings))
