"""One model fitted for publication: candidates → selection → quantiles → calibration → scores.

Shared by the retrain cycle (``trainer.cycle``) and the replay's in-process retrainer
(``sim.policies.retrainer``), so both publish exactly the same kind of model. The rows:

* **fit**: the window's train store minus the stop rows (recent rows weigh more: ``recency``);
* **stop**: a stratified sample of the train store across the (queue, cache, prefix) buckets —
  early stopping, and the *reference slice* (not dominated by the newest rows) that every model
  is also scored on;
* **newest**: the window's holdout, the newest rows — candidate selection, calibration and the
  honest (cross-calibrated) holdout scores. While data is thin the holdout (10 % of the rows) is too small to
  calibrate on (a conformal p90 needs ≥ 9 rows, and is loose below ~100), so it is grown with the newest train
  rows to ``min(MIN_NEWEST, rows // 4)`` rows (``newest_split``): a fit on fewer rows whose calibration is
  honest, rather than a fit on every row whose served p90 no held-out row has checked.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import xgboost as xgb

from shared.bundle import ModelEntry, encode_model
from shared.features import TARGET_OF, FeatureSpec, typical_columns
from shared.model import quantile_key
from trainer.calibrate import Calibration, calibrate, cross_calibrated, spread_floor
from trainer.evaluate import Scores, score
from trainer.fit import (
    Candidate,
    FitParams,
    booster_params,
    enforce_monotone,
    importances,
    margin,
    monotone_signs,
    prefix_weights,
    tiled,
    train_stopped,
    training_columns,
)
from trainer.recency import Recency
from trainer.window import Rows

STOP_ROWS = 2_000
MIN_QUANTILE_ROWS = 50
PROBE_ROWS = 512
MIN_NEWEST = 100
MIN_NEWEST_ROWS = 2
"""The newest rows (calibration, selection, scores) are at least this many, or a quarter of the rows while fewer
(half cost 0.15 of coverage in the class-blind correction replay, tests/sim/test_pipeline_policies.py)."""


def newest_split(train: Rows, holdout: Rows) -> tuple[Rows, Rows]:
    """(train, newest): the holdout grown with the newest train rows to ``min(MIN_NEWEST, rows // 4)`` rows, and
    at least ``MIN_NEWEST_ROWS``."""
    want = max(MIN_NEWEST_ROWS, min(MIN_NEWEST, (len(train) + len(holdout)) // 4)) - len(holdout)
    if want <= 0 or want >= len(train):
        return train, holdout
    order = np.argsort(train.seq, kind="stable")
    moved, kept = np.sort(order[-want:]), np.sort(order[:-want])
    return train.take(kept), Rows.concat([train.take(moved), holdout])


def probe_columns() -> dict[str, np.ndarray]:
    """A fixed grid over every feature's typical range (the same rows every cycle)."""
    return typical_columns(PROBE_ROWS, np.random.default_rng(20261201))


@dataclass(frozen=True)
class FittedModel:
    name: str
    files: dict[str, bytes]
    entry: ModelEntry
    """The manifest entry (calibrated on the newest rows)."""
    scores: Scores
    """Primary quantile on the newest rows, cross-calibrated (honest)."""
    reference: Scores
    """Primary quantile on the stratified reference slice."""
    fit_seconds: float
    probe: np.ndarray
    """Served primary quantile on the fixed probe grid (``probe_columns``): how far a publish moves predictions."""
    holdout_pred: np.ndarray = field(default_factory=lambda: np.empty(0))
    """The primary quantile on the newest rows, cross-calibrated: what ``scores`` were computed from (row by row,
    for the paired champion/challenger comparison)."""
    newest: Rows = field(default_factory=Rows.empty)
    """The newest rows the model was selected, calibrated and scored on (``newest_split``): the live model is
    judged on the same rows."""


@dataclass(frozen=True)
class _Data:
    name: str
    features: tuple[str, ...]
    x: np.ndarray
    z: np.ndarray
    y: np.ndarray
    weight: np.ndarray
    fit: np.ndarray
    stop: np.ndarray
    x_new: np.ndarray
    y_new: np.ndarray
    logged: bool
    """The fit is in log1p space and calibrated (quantile objective); else on the raw target, served as is."""
    loc: np.ndarray
    """The fit rows the location boosters use (all of ``fit`` unless ``FitParams.location_rows`` caps them)."""


def stratified(buckets: np.ndarray, k: int, rng: np.random.Generator) -> np.ndarray:
    """``k`` row indices spread evenly over the buckets (systematic sample of the rows sorted by bucket)."""
    if k <= 0 or not len(buckets):
        return np.empty(0, np.int64)
    order = np.lexsort((rng.random(len(buckets)), buckets))
    step = len(order) / k
    return np.sort(order[(np.arange(k) * step + rng.random() * step).astype(np.int64)])


def _data(spec: FeatureSpec, name: str, train: Rows, newest: Rows, params: FitParams, recency: Recency) -> _Data:
    rng = np.random.default_rng(params.seed)
    x = spec.matrix(name, training_columns(name, train, params.tpot_zero_token_count))
    y = train.column(TARGET_OF[name])
    stop = stratified(train.bucket, max(1, min(STOP_ROWS, len(train) // 10)), rng)
    fit = np.setdiff1d(np.arange(len(train)), stop, assume_unique=True)
    x_new = spec.matrix(name, training_columns(name, newest, params.tpot_zero_token_count))
    weight = recency.weights(train.wall, float(max(train.wall.max(initial=0.0), newest.wall.max(initial=0.0))))
    if params.prefix_weighting:
        weight = weight * prefix_weights(train)
    logged = params.objective == "quantile"
    z = np.log1p(y) if logged else y
    cap = params.location_rows
    loc = fit if cap is None or len(fit) <= cap else np.sort(rng.choice(fit, cap, replace=False))
    return _Data(name, spec.columns(name), x, z, y, weight, fit, stop, x_new, newest.column(TARGET_OF[name]),
                 logged, loc)


def _matrix(d: _Data, rows: np.ndarray, params: FitParams, ref: xgb.QuantileDMatrix | None = None,
            base: np.ndarray | None = None, weighted: bool = True,
            scale: np.ndarray | None = None) -> xgb.QuantileDMatrix:
    weight = d.weight[rows] if weighted else None
    if scale is not None:
        weight = scale if weight is None else weight * scale
    return xgb.QuantileDMatrix(d.x[rows], d.z[rows], weight=weight, ref=ref,
                               base_margin=base, feature_names=list(d.features), max_bin=params.max_bin,
                               nthread=params.nthread)


def _scale(start: np.ndarray) -> np.ndarray:
    """Row weights ∝ the location in ms, mean 1 (``FitParams.scale_weighting``)."""
    ms = np.expm1(np.clip(start, 0.0, 30.0))
    return ms / max(float(ms.mean()), 1e-12)


def _location(d: _Data, params: FitParams, candidate: Candidate, dfit: xgb.QuantileDMatrix,
              dstop: xgb.QuantileDMatrix, anchor: xgb.Booster | None) -> xgb.Booster:
    objective = {"objective": "reg:squarederror", "eval_metric": "rmse"}
    return train_stopped(booster_params(params, d.name, d.features, candidate, objective), dfit, dstop,
                         params.rounds, params.early_stopping, anchor)


def _select(d: _Data, params: FitParams,
            anchor: xgb.Booster | None) -> tuple[str, Candidate, xgb.Booster, dict[str, float]]:
    """Fit every candidate's location — from a constant and, with ``anchor``, also continued from it (named
    ``prior+…``; ``FitParams.anchored_only``: only those) —; the lowest RMSE (log space) on the newest rows wins.
    Returns (its name, the candidate, its location, every candidate's RMSE)."""
    dfit = _matrix(d, d.loc, params)
    dstop = _matrix(d, d.stop, params, ref=dfit, weighted=False)
    z_new = np.log1p(d.y_new) if d.logged else d.y_new
    plain = [] if anchor is not None and params.anchored_only else [("", None)]
    starts = plain + ([("prior+", anchor)] if anchor is not None else [])
    fitted, scores = {}, {}
    for candidate in params.candidates:
        for prefix, start in starts:
            booster = _location(d, params, candidate, dfit, dstop, start)
            name = prefix + candidate.name
            fitted[name] = (candidate, booster)
            scores[name] = round(float(np.sqrt(np.mean((z_new - margin(booster, d.x_new)) ** 2))), 6)
    best = min(scores, key=scores.__getitem__)
    return best, fitted[best][0], fitted[best][1], scores


def _quantiles(d: _Data, params: FitParams, candidate: Candidate, location: xgb.Booster) -> xgb.Booster:
    """The multi-quantile booster on a subsample of the fit rows, starting from the location margin."""
    rng = np.random.default_rng(params.seed + 1)
    rows = d.fit if len(d.fit) <= params.quantile_rows else np.sort(rng.choice(d.fit, params.quantile_rows,
                                                                               replace=False))
    k = len(params.served)
    start, start_stop = margin(location, d.x[rows]), margin(location, d.x[d.stop])
    scaled = params.scale_weighting
    dq = _matrix(d, rows, params, base=tiled(start, k), scale=_scale(start) if scaled else None)
    dstop = _matrix(d, d.stop, params, ref=dq, base=tiled(start_stop, k), weighted=False,
                    scale=_scale(start_stop) if scaled else None)
    objective = {"objective": "reg:quantileerror", "quantile_alpha": np.array(params.served),
                 "eval_metric": "quantile", "base_score": 0.0}
    booster = train_stopped(booster_params(params, d.name, d.features, candidate, objective), dq, dstop,
                            params.rounds, params.early_stopping)
    if not candidate.monotone:
        return booster
    return enforce_monotone(booster, monotone_signs(d.name, d.features))


def _raw(location: xgb.Booster, booster: xgb.Booster | None, x: np.ndarray, k: int) -> np.ndarray:
    start = margin(location, x)
    if booster is None:
        return start.reshape(-1, 1)
    return margin(booster, x, tiled(start, k)).reshape(len(x), k)


def fit_model(spec: FeatureSpec, name: str, train: Rows, newest: Rows, params: FitParams,
              recency: Recency | None = None, anchor: xgb.Booster | None = None) -> FittedModel:
    """Fit, select, calibrate and score model ``name`` (CPU-bound: call off the event loop); with ``anchor`` (a
    location booster in log1p space, ``trainer.anchor``) every candidate is also fitted continuing from it."""
    started, cpu_started = time.perf_counter(), time.thread_time()
    train, newest = newest_split(train, newest)
    d = _data(spec, name, train, newest, params, recency or Recency())
    location_started = time.perf_counter()
    chosen, candidate, location, selection = _select(d, params, anchor if d.logged else None)
    location_seconds = time.perf_counter() - location_started
    booster = _quantiles(d, params, candidate, location) if d.logged and len(d.fit) >= MIN_QUANTILE_ROWS else None
    served = params.served if booster is not None else (params.alpha,)
    x_probe = spec.matrix(name, {**probe_columns(), **({"num_tokens_generated": np.zeros(PROBE_ROWS)}
                                                       if name == "tpot" and params.tpot_zero_token_count else {})})
    raw_new, raw_ref, raw_probe = (_raw(location, booster, x, len(served)) for x in (d.x_new, d.x[d.stop], x_probe))
    floors = [spread_floor(raw_new[:, j], margin(location, d.x_new), q, len(train) + len(newest),
                           params.prior_spread_rows) for j, q in enumerate(served)]
    levels = [(params.calibration_level or q) if q == params.alpha else q for q in served]
    cals = [calibrate(raw_new[:, j], d.y_new, level, params.objective, floors[j]) if d.logged else Calibration()
            for j, level in enumerate(levels)]
    primary = served.index(params.alpha)
    holdout_pred = _served(raw_new[:, primary], d.y_new, params, d.logged, floors[primary], levels[primary])
    scores = score(holdout_pred, d.y_new, params.alpha)
    reference = _reference(raw_ref[:, primary], d.y[d.stop], cals[primary], params, d.logged)
    fit_seconds = time.perf_counter() - started
    entry = _entry(d, params, served, cals, chosen, selection, location, booster, len(train), len(newest))
    entry.update(fit_seconds=round(fit_seconds, 4), fit_cpu_seconds=round(time.thread_time() - cpu_started, 4),
                 location_seconds=round(location_seconds, 4), location_fit_rows=len(d.loc),
                 calibration_level=round(levels[primary], 4),
                 metrics=scores.as_dict(), reference_metrics=reference.as_dict())
    files, manifest_entry = encode_model(booster or location, name, d.features, entry,
                                location if booster is not None else None)
    probe = cals[primary].apply_log(raw_probe[:, primary]) if d.logged else np.maximum(raw_probe[:, 0], 0)
    return FittedModel(name, files, manifest_entry, scores, reference, fit_seconds, probe, holdout_pred, newest)


def _served(raw: np.ndarray, y: np.ndarray, params: FitParams, logged: bool, floor: float,
            level: float) -> np.ndarray:
    return cross_calibrated(raw, y, level, params.objective, floor) if logged else np.maximum(raw, 0.0)


def _reference(raw: np.ndarray, y: np.ndarray, cal: Calibration, params: FitParams, logged: bool) -> Scores:
    pred = cal.apply_log(raw) if logged else np.maximum(raw, 0.0)
    return score(pred, y, params.alpha)


def _entry(d: _Data, params: FitParams, served: tuple[float, ...], cals: list[Calibration], candidate: str,
           selection: dict[str, float], location: xgb.Booster, booster: xgb.Booster | None, train_rows: int,
           newest_rows: int) -> dict[str, Any]:
    return {
        "quantiles": list(served), "primary_quantile": params.alpha, "objective": params.objective,
        "target_transform": "log1p" if d.logged else "identity",
        "calibration": cals[served.index(params.alpha)].as_dict(),
        "calibrations": {quantile_key(q): c.as_dict() for q, c in zip(served, cals, strict=True)},
        "candidate": candidate, "selection_log_rmse": selection,
        "location_rounds": location.num_boosted_rounds(),
        "quantile_rounds": booster.num_boosted_rounds() if booster is not None else 0,
        "training_rows": train_rows, "fit_rows": len(d.fit), "stop_rows": len(d.stop), "holdout_rows": newest_rows,
        "importances": importances(location, d.features), "prior": False,
    }
