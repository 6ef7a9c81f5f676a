"""Evaluating a verified bundle: XGBoost boosters + calibration, one call per model.

``calibration`` in a model's manifest entry is ``{"scale": s, "offset": o}``: the served value
is ``max(0, raw × s + o)`` — the conformal correction the trainer measured on its holdout.
Trainer (evaluation, in-process ``/predict``) and predictor share this code path. A bundle whose
calibration lies outside what the trainer can produce (scale in ``SCALE_BOUNDS``, the trainer's
clamp; a finite offset) is refused: a hand-edited manifest must not scale every answer.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import xgboost as xgb

from shared.bundle import Bundle
from shared.errors import BundleError
from shared.features import MODEL_NAMES, FeatureSpec, smoke_columns

SCALE_BOUNDS = (0.25, 4.0)
"""The calibration scales a bundle may carry (= trainer.calibrate.SCALE_BOUNDS, checked by a test)."""


@dataclass(frozen=True)
class LoadedModel:
    name: str
    booster: xgb.Booster
    features: tuple[str, ...]
    scale: float
    offset: float

    def raw(self, matrix: np.ndarray) -> np.ndarray:
        out = self.booster.inplace_predict(matrix, validate_features=False)
        return np.asarray(out, dtype=np.float64).reshape(len(matrix), -1)[:, 0]

    def calibrate(self, raw: np.ndarray) -> np.ndarray:
        return np.maximum(raw * self.scale + self.offset, 0.0)


@dataclass(frozen=True)
class LoadedBundle:
    """An immutable, ready-to-serve bundle: swap one reference to it to hot-reload."""

    bundle: Bundle
    spec: FeatureSpec
    models: Mapping[str, LoadedModel]

    @property
    def version(self) -> int:
        return self.bundle.version

    def predict(self, name: str, cols: Mapping[str, np.ndarray]) -> np.ndarray:
        model = self.models[name]
        return model.calibrate(model.raw(self.spec.matrix(name, cols)))


def spec_of(bundle: Bundle) -> FeatureSpec:
    flags = bundle.manifest.get("feature_flags", {})
    return FeatureSpec(token_in_flight=bool(flags.get("token_in_flight", True)),
                       encoder=bool(flags.get("encoder", True)))


def _load_model(bundle: Bundle, name: str, spec: FeatureSpec, nthread: int) -> LoadedModel:
    entry = bundle.model_entry(name)
    features = tuple(entry.get("features", ()))
    if features != spec.columns(name):
        raise BundleError(f"{name}: bundle features {list(features)} do not match the feature spec")
    booster = xgb.Booster(params={"nthread": nthread})
    try:
        booster.load_model(bytearray(bundle.model_bytes(name)))
    except xgb.core.XGBoostError as exc:
        raise BundleError(f"{name}: XGBoost cannot load the model: {exc}") from None
    if booster.num_features() != len(features):
        raise BundleError(f"{name}: model has {booster.num_features()} features, spec {len(features)}")
    scale, offset = _calibration(name, entry.get("calibration") or {})
    return LoadedModel(name, booster, features, scale, offset)


def _calibration(name: str, calibration: Mapping[str, object]) -> tuple[float, float]:
    scale, offset = calibration.get("scale", 1.0), calibration.get("offset", 0.0)
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (scale, offset)):
        raise BundleError(f"{name}: calibration scale/offset must be numbers, got {scale!r}/{offset!r}")
    scale, offset = float(scale), float(offset)  # type: ignore[arg-type]
    if not (np.isfinite(scale) and SCALE_BOUNDS[0] <= scale <= SCALE_BOUNDS[1]) or not np.isfinite(offset):
        raise BundleError(f"{name}: calibration scale {scale:g} / offset {offset:g} outside the trainer's bounds "
                          f"(scale in [{SCALE_BOUNDS[0]:g}, {SCALE_BOUNDS[1]:g}], finite offset)")
    return scale, offset


def load_bundle(bundle: Bundle, expected: FeatureSpec | None = None, nthread: int = 1) -> LoadedBundle:
    """Load every model of a verified bundle and run a smoke prediction; raise ``BundleError``."""
    spec = spec_of(bundle)
    if expected is not None and spec != expected:
        raise BundleError(f"bundle feature flags {spec.as_dict()} differ from ours {expected.as_dict()}")
    models = {name: _load_model(bundle, name, spec, nthread) for name in MODEL_NAMES}
    loaded = LoadedBundle(bundle, spec, models)
    _smoke(loaded)
    return loaded


def _smoke(loaded: LoadedBundle) -> None:
    cols = smoke_columns()
    for name in MODEL_NAMES:
        value = loaded.predict(name, cols)
        if value.shape != (1,) or not np.isfinite(value).all():
            raise BundleError(f"{name}: smoke prediction failed ({value!r})")
