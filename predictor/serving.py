"""The immutable thing a request predicts with: a loaded bundle plus its evaluator per model.

``build_serving`` runs off the event loop: XGBoost load + smoke (``shared.model``), then, when
allowed, compiles each booster into the numpy ``Forest`` and proves it bit-equal to XGBoost on
a probe matrix built from the model's own thresholds. If the proof fails the bundle is still
served, through ``inplace_predict``. In ``auto`` mode small calls (≤ ``native_max_rows``) use the
forest (no fixed per-call cost) and larger ones XGBoost (lower cost per row): same numbers.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

import numpy as np
import xgboost as xgb

from predictor.forest import Forest, Unsupported, compile_forest
from shared.bundle import Bundle
from shared.errors import LatencyError
from shared.features import MODEL_NAMES, FeatureSpec
from shared.model import LoadedBundle, LoadedModel, load_bundle
from shared.predictor_settings import PredictorSettings
from shared.timefmt import from_epoch

log = logging.getLogger(__name__)

RawFn = Callable[[np.ndarray], np.ndarray]
PROBE_ROWS = 512


class PredictionFailed(LatencyError):
    """The model produced no usable output (never a partial or non-finite answer)."""

    status = 500


@dataclass(frozen=True)
class Serving:
    """One live bundle. Swapped as a single reference; never mutated."""

    loaded: LoadedBundle
    raw: Mapping[str, RawFn]
    evaluator: Mapping[str, str]
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

    def predict(self, name: str, cols: Mapping[str, np.ndarray]) -> np.ndarray:
        """Calibrated, non-crossing quantiles of model ``name`` for every row: ``(n, k)`` float64, ≥ 0."""
        model: LoadedModel = self.loaded.models[name]
        try:
            raw = self.raw[name](self.loaded.spec.matrix(name, cols))
        except xgb.core.XGBoostError as exc:
            raise PredictionFailed(f"{name}: {exc}") from None
        return model.calibrate(raw.astype(np.float64))

    def quantiles(self, name: str) -> tuple[float, ...]:
        return self.loaded.models[name].quantiles

    def primary(self, name: str) -> int:
        return self.loaded.models[name].primary


def _xgb_raw(model: LoadedModel) -> RawFn:
    """``(n, outputs)`` raw margins from XGBoost (location booster first when the model has one)."""
    return model.raw


def _forest_raw(forest: Forest, location: Forest | None) -> RawFn:
    """``(n, outputs)`` raw margins from the numpy evaluator, the same sums as XGBoost in float32."""
    outputs = forest.n_outputs

    def raw(matrix: np.ndarray) -> np.ndarray:
        base = None
        if location is not None:
            base = np.repeat(location.predict(matrix).reshape(-1, 1), outputs, axis=1)
        return forest.predict(matrix, base).reshape(len(matrix), -1).astype(np.float64)
    return raw


def probe_matrix(forest: Forest, rows: int = PROBE_ROWS, seed: int = 0) -> np.ndarray:
    """Rows whose values sit exactly on, just below and around the forest's thresholds."""
    rng = np.random.default_rng(seed)
    out = np.zeros((rows, forest.n_features), dtype=np.float32)
    real = np.isfinite(forest.thr)
    for j in range(forest.n_features):
        cuts = forest.thr[real & (forest.feat == j)]
        if cuts.size == 0:
            out[:, j] = rng.uniform(0, 1000, rows).astype(np.float32)
            continue
        picked = rng.choice(cuts, rows)
        nudge = rng.integers(-1, 2, rows)  # below / on / above the threshold
        out[:, j] = np.where(nudge < 0, np.nextafter(picked, np.float32(-np.inf)),
                             np.where(nudge > 0, np.nextafter(picked, np.float32(np.inf)), picked))
    return out


def _native_or_none(model: LoadedModel) -> RawFn | None:
    try:
        forest = compile_forest(model.booster)
        location = compile_forest(model.location) if model.location is not None else None
    except Unsupported as exc:
        log.info("%s: numpy evaluator not used (%s); serving with XGBoost", model.name, exc)
        return None
    probe = probe_matrix(forest) if location is None else np.vstack([probe_matrix(forest), probe_matrix(location)])
    native = _forest_raw(forest, location)
    if not np.array_equal(native(probe), _xgb_raw(model)(probe)):
        log.warning("%s: numpy evaluator differs from XGBoost on the probe; serving with XGBoost", model.name)
        return None
    return native


def _choose(native: RawFn | None, fallback: RawFn, settings: PredictorSettings) -> tuple[RawFn, str]:
    if native is None:
        return fallback, "xgboost"
    if settings.evaluator == "native":
        return native, "numpy-forest"
    limit = settings.native_max_rows

    def hybrid(matrix: np.ndarray) -> np.ndarray:
        return native(matrix) if len(matrix) <= limit else fallback(matrix)
    return hybrid, "hybrid"


def _meta(bundle: Bundle, settings: PredictorSettings) -> tuple[str, str, float]:
    manifest = bundle.manifest
    quantile = manifest.quantile
    if quantile is None or not 0 < quantile <= 1:
        quantile = settings.quantile_alpha
    return (manifest.model_type or settings.model_type, manifest.objective_type or settings.objective_type,
            quantile)


def build_serving(bundle: Bundle, settings: PredictorSettings, source: str,
                  expected: FeatureSpec | None = None) -> Serving:
    """Load, smoke-test and (if possible) compile ``bundle``; raise ``BundleError`` to refuse it."""
    loaded = load_bundle(bundle, expected or settings.feature_spec, nthread=settings.xgb_nthread)
    raw: dict[str, RawFn] = {}
    evaluator: dict[str, str] = {}
    for name in MODEL_NAMES:
        model = loaded.models[name]
        native = _native_or_none(model) if settings.evaluator != "xgboost" else None
        raw[name], evaluator[name] = _choose(native, _xgb_raw(model), settings)
    model_type, objective_type, quantile = _meta(bundle, settings)
    return Serving(loaded, MappingProxyType(raw), MappingProxyType(evaluator), source, time.time(), model_type,
                   objective_type, quantile)
