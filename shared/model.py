"""Evaluating a verified bundle: an evaluator per model (raw margins) + calibration, one call per model.

A model entry may serve several quantiles from one booster (XGBoost multi-quantile: one output
column per quantile, ascending), optionally on top of a *location* booster (``location_file``)
whose single output is the quantile booster's base margin for every column. Per output the served value is
``max(0, inverse_transform(raw) × scale + offset)`` — the conformal correction the trainer measured
on its holdout — and each row is sorted so quantiles never cross. ``target_transform`` is
``identity`` or ``log1p`` (the booster was fitted on ``log1p(y)``; quantiles commute with it).
The entry's primary quantile answers the contract fields (``ttft_ms`` / ``tpot_ms``). Entries
written before multi-quantile bundles (one output, ``calibration`` only) load unchanged. An entry with a ``base``
(format 2, ``shared.base``) adds the base's margin — ``transform(base(x))`` — to every output column (the boosters
are a residual on it), or, in window mode, the base's growth past the training window in ms.
Trainer (evaluation, in-process ``/predict``) and predictor share this code path; only the evaluator of the raw
margins differs: the trainer's is XGBoost (``shared.boosters``, the default of ``load_bundle``), the predictor's
the numpy forest (``predictor.serving``), bit-equal. This module itself needs numpy only.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from shared.base import Base, BaseEvaluator
from shared.bundle import Bundle, Calibration, Manifest, ModelEntry
from shared.errors import BundleError
from shared.features import MODEL_NAMES, FeatureSpec, smoke_columns

TRANSFORMS = ("identity", "log1p")
SCALE_BOUNDS = (1.0 / 16.0, 16.0)
"""Calibration scales a trainer may publish; anything else is refused at load. A fitted model's conformal
correction stays within ``trainer.calibrate.SCALE_BOUNDS`` (0.25–4); a prior rescaled to a pool's rows
(``trainer.rescaled_prior``) may go further: a GPU-roofline prior serving a CPU engine is 4–6× low."""
Evaluator = Callable[[np.ndarray], np.ndarray]
"""A model's raw margins: ``(n, features)`` float32 matrix → ``(n, outputs)`` (location booster included)."""
Loader = Callable[[Bundle, str, int], tuple[Evaluator, str]]
"""(bundle, model name, threads) → (that model's evaluator, its kind for status pages); ``BundleError`` to refuse."""


def quantile_key(q: float) -> str:
    """How a quantile is written in bundles and responses: ``0.5`` → ``"0.5"``, ``0.99`` → ``"0.99"``."""
    return format(q, "g")


@dataclass(frozen=True)
class LoadedModel:
    name: str
    evaluator: Evaluator
    features: tuple[str, ...]
    quantiles: tuple[float, ...]
    """The evaluator's output columns, ascending."""
    primary: int
    """Column of the quantile that answers the contract fields."""
    scales: np.ndarray
    offsets: np.ndarray
    transform: str = "identity"
    kind: str = "xgboost"
    """What evaluates it (``Loader``'s second value)."""
    base: BaseEvaluator | None = None
    """The physical base the evaluator's trees are a residual on (None: the trees alone)."""

    @property
    def scale(self) -> float:
        return float(self.scales[self.primary])

    @property
    def offset(self) -> float:
        return float(self.offsets[self.primary])

    def raw(self, matrix: np.ndarray) -> np.ndarray:
        """Uncalibrated output, ``(n, len(quantiles))`` float64: the trees plus the base's margin."""
        out = np.asarray(self.evaluator(matrix), dtype=np.float64).reshape(len(matrix), -1)
        return out if self.base is None else self.base.apply(out, matrix, self.transform)

    def calibrate(self, raw: np.ndarray) -> np.ndarray:
        """``(n, k)`` raw outputs → served quantiles ``(n, k)``: inverse transform, calibrate, clip at 0, sort."""
        values = np.expm1(raw) if self.transform == "log1p" else raw
        out = np.maximum(values * self.scales + self.offsets, 0.0)
        if out.shape[1] > 1:
            out.sort(axis=1)
        return out

    def column(self, q: float) -> int:
        return self.quantiles.index(q)


@dataclass(frozen=True)
class LoadedBundle:
    """An immutable, ready-to-serve bundle: swap one reference to it to hot-reload."""

    bundle: Bundle
    spec: FeatureSpec
    models: Mapping[str, LoadedModel]

    @property
    def version(self) -> int:
        return self.bundle.version

    def predict_all(self, name: str, cols: Mapping[str, np.ndarray]) -> np.ndarray:
        """Every served quantile of ``name``, ``(n, k)``, non-crossing."""
        model = self.models[name]
        return model.calibrate(model.raw(self.spec.matrix(name, cols)))

    def predict(self, name: str, cols: Mapping[str, np.ndarray]) -> np.ndarray:
        """The primary quantile of ``name`` (the contract's ``ttft_ms`` / ``tpot_ms``), ``(n,)``."""
        return self.predict_all(name, cols)[:, self.models[name].primary]


def spec_of(bundle: Bundle) -> FeatureSpec:
    flags = bundle.manifest.feature_flags
    return FeatureSpec(token_in_flight=flags.token_in_flight, encoder=flags.encoder)


def _quantiles(entry: ModelEntry, default: float) -> tuple[float, ...]:
    quantiles = entry.quantiles or (default,)
    if any(not 0 < q < 1 for q in quantiles) or list(quantiles) != sorted(set(quantiles)):
        raise BundleError(f"quantiles {list(quantiles)} must be ascending, distinct, in (0, 1)")
    return quantiles


def _calibration(entry: ModelEntry, quantiles: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    per = entry.calibrations
    if per is None and len(quantiles) == 1:
        per = {quantile_key(quantiles[0]): entry.calibration or Calibration()}
    if per is None or any(quantile_key(q) not in per for q in quantiles):
        raise BundleError(f"calibrations must cover every quantile {list(quantiles)}")
    scales, offsets = [], []
    for q in quantiles:
        cal = per[quantile_key(q)]
        if not SCALE_BOUNDS[0] <= cal.scale <= SCALE_BOUNDS[1]:
            raise BundleError(f"calibration scale {cal.scale} of {quantile_key(q)} outside {list(SCALE_BOUNDS)}")
        scales.append(cal.scale)
        offsets.append(cal.offset)
    return np.array(scales), np.array(offsets)


def _single_quantile(manifest: Manifest) -> float:
    """The quantile an older entry without ``quantiles`` serves (0.9 when the manifest does not say)."""
    return manifest.quantile if manifest.quantile is not None else 0.9


def entry_base(entry: ModelEntry) -> Base | None:
    """The entry's physical base, unchecked (None when it has none)."""
    b = entry.base
    return None if b is None else Base(tuple(b.terms), tuple(b.coefficients), b.rows, b.source,
                                       tuple((b.window or {}).items()))


def load_model(bundle: Bundle, name: str, spec: FeatureSpec, nthread: int, loader: Loader | None = None) -> LoadedModel:
    entry = bundle.model_entry(name)
    if entry.features != spec.columns(name):
        raise BundleError(f"{name}: bundle features {list(entry.features)} do not match the feature spec")
    evaluator, kind = (loader or _xgboost_loader())(bundle, name, nthread)
    try:
        quantiles = _quantiles(entry, _single_quantile(bundle.manifest))
        scales, offsets = _calibration(entry, quantiles)
        base = entry_base(entry)
        compiled = None if base is None else base.compiled(entry.features)
    except BundleError as exc:
        raise BundleError(f"{name}: {exc.message}") from None
    primary = entry.primary_quantile if entry.primary_quantile is not None else (
        bundle.manifest.quantile if bundle.manifest.quantile is not None else quantiles[0])
    if primary not in quantiles or entry.target_transform not in TRANSFORMS:
        raise BundleError(f"{name}: primary_quantile {primary!r} not served or target_transform "
                          f"{entry.target_transform!r} not one of {TRANSFORMS}")
    return LoadedModel(name, evaluator, entry.features, quantiles, quantiles.index(primary), scales, offsets,
                       entry.target_transform, kind, compiled)


def _xgboost_loader() -> Loader:
    from shared.boosters import booster_loader  # imported here: a reader that passes its own loader needs no XGBoost

    return booster_loader


def load_bundle(bundle: Bundle, expected: FeatureSpec | None = None, nthread: int = 1,
                loader: Loader | None = None) -> LoadedBundle:
    """Load every model of a verified bundle (with ``loader``; default XGBoost) and run a smoke prediction; raise
    ``BundleError``."""
    spec = spec_of(bundle)
    if expected is not None and spec != expected:
        raise BundleError(f"bundle feature flags {spec.as_dict()} differ from ours {expected.as_dict()}")
    models = {name: load_model(bundle, name, spec, nthread, loader) for name in MODEL_NAMES}
    loaded = LoadedBundle(bundle, spec, models)
    _smoke(loaded)
    return loaded


def _smoke(loaded: LoadedBundle) -> None:
    cols = smoke_columns()
    for name in MODEL_NAMES:
        value = loaded.predict_all(name, cols)
        if value.shape != (1, len(loaded.models[name].quantiles)) or not np.isfinite(value).all():
            raise BundleError(f"{name}: smoke prediction failed: {value.shape} outputs for "
                              f"{len(loaded.models[name].quantiles)} quantiles ({value!r})")
