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
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import xgboost as xgb

from shared.base import Base, term_columns
from shared.bundle import ModelEntry, encode_model
from shared.features import TARGET_OF, FeatureSpec, typical_columns
from shared.model import quantile_key
from trainer.base_fit import fit_base, term_matrix
from trainer.calibrate import Calibration, calibrate, cross_calibrated, spread_floors
from trainer.evaluate import Scores, score
from trainer.fit import (
    BASE_ONLY,
    Candidate,
    FitParams,
    booster_params,
    empty_booster,
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
from trainer.thin import fit_thin
from trainer.window import Rows

STOP_ROWS = 2_000
WINDOW_HANDICAP = 0.03
"""A window-mode candidate wins only when its score is this much below the best other one: past the window it
adds the base's growth in ms, the same for every pod class, where a residual grows each class by its own factor
(``bench.trainer.extrapolation``, two pod classes, p90 TTFT at 8 × the window: 0.66 × the truth with window trees
chosen by a hair, 1.0 with residual trees); inside the window it wins where a residual cannot follow the shape (a
knee: the accuracy suite's threshold TPOT, p90 pinball 0.39 vs 0.64)."""
MIN_QUANTILE_ROWS = 50
ARBITRATION_ROWS = 100
"""Newest rows from which a window winner is judged again on the served quantile (``_arbitrate``): a p90 pinball
on a few dozen rows is noise (a 30-row fit of a quiet pool lost 0.19 of its coverage on drifted rows when 7 rows
overturned the location's choice)."""

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
    fitted_through: int = -1
    """The newest row (sequence number) the base and the trees were fitted on."""


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
    base: Base
    """The physical base, fitted on the fit rows."""
    transform: str
    m: np.ndarray
    """The base's margin (``transform(base)``) on ``x``: every booster's starting point."""
    m_new: np.ndarray


def stratified(buckets: np.ndarray, k: int, rng: np.random.Generator) -> np.ndarray:
    """``k`` row indices spread evenly over the buckets (systematic sample of the rows sorted by bucket)."""
    if k <= 0 or not len(buckets):
        return np.empty(0, np.int64)
    order = np.lexsort((rng.random(len(buckets)), buckets))
    step = len(order) / k
    return np.sort(order[(np.arange(k) * step + rng.random() * step).astype(np.int64)])


def _data(spec: FeatureSpec, name: str, train: Rows, newest: Rows, params: FitParams, recency: Recency,
          prior: Base | None) -> _Data:
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
    features = spec.columns(name)
    base = fit_base(name, features, x[fit], y[fit], weight[fit], prior, params.base)
    transform = "log1p" if logged else "identity"
    evaluator = base.compiled(features)
    return _Data(name, features, x, z, y, weight, fit, stop, x_new, newest.column(TARGET_OF[name]),
                 logged, loc, base, transform, evaluator.margin(x, transform), evaluator.margin(x_new, transform))


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
              dstop: xgb.QuantileDMatrix, intercept: float = 0.0) -> xgb.Booster:
    objective = {"objective": "reg:squarederror", "eval_metric": "rmse", "base_score": intercept}
    return train_stopped(booster_params(params, d.name, d.features, candidate, objective), dfit, dstop,
                         params.rounds, params.early_stopping)


def _rmse(z: np.ndarray, pred: np.ndarray) -> float:
    return round(float(np.sqrt(np.mean((z - pred) ** 2))), 6) if len(z) else 0.0


def _selection(d: _Data, params: FitParams, pred: np.ndarray) -> float:
    """How a location is judged on the newest rows (lower wins): log-RMSE, or the MAE in ms."""
    z_new = np.log1p(d.y_new) if d.logged else d.y_new
    if params.selection == "mae_ms" and d.logged:
        return round(float(np.mean(np.abs(d.y_new - np.expm1(pred)))), 6) if len(pred) else 0.0
    return _rmse(z_new, pred)


def _locations(d: _Data, params: FitParams, window: bool) -> dict[str, tuple[Candidate, xgb.Booster]]:
    """Every candidate of one mode: on top of the base (residual: its margin is every row's starting point), or
    learning the whole latency inside the window (from the fit rows' weighted mean)."""
    chosen = [c for c in params.candidates if c.window == window]
    if not chosen:
        return {}
    base = None if window else d.m
    dfit = _matrix(d, d.loc, params, base=None if base is None else base[d.loc])
    dstop = _matrix(d, d.stop, params, ref=dfit, base=None if base is None else base[d.stop], weighted=False)
    intercept = float(np.average(d.z[d.loc], weights=d.weight[d.loc])) if window else 0.0
    return {c.name: (c, _location(d, params, c, dfit, dstop, intercept)) for c in chosen}


_Fitted = dict[str, tuple[Candidate | None, xgb.Booster | None]]


def _select(d: _Data, params: FitParams, trees: bool) -> tuple[str, _Fitted, dict[str, float]]:
    """The base alone (candidate ``base``) and, with ``trees``, every candidate's location (on top of the base, or
    window mode); the lowest RMSE (the fit's space) on the newest rows wins. Returns (its name, every candidate's
    (candidate, location), every candidate's score)."""
    scores = {BASE_ONLY: _selection(d, params, d.m_new)}
    fitted: _Fitted = {BASE_ONLY: (None, None)}
    if trees:
        for window in (False, True):
            for name, (candidate, booster) in _locations(d, params, window).items():
                fitted[name] = (candidate, booster)
                scores[name] = _selection(d, params, margin(booster, d.x_new, None if window else d.m_new))
    best = min(scores, key=lambda n: scores[n] * (1.0 + WINDOW_HANDICAP * _is_window(fitted[n][0])))
    return best, fitted, scores


def _residual_rival(chosen: str, fitted: _Fitted, scores: dict[str, float]) -> str | None:
    """When a window candidate won the location, the best residual candidate (trees on the base): the two are
    judged again on the served quantile (``_arbitrate``). None otherwise."""
    if not _is_window(fitted[chosen][0]):
        return None
    residual = [n for n, (c, _) in fitted.items() if c is not None and not c.window]
    return min(residual, key=lambda n: scores[n]) if residual else None


def _residual_spread(params: FitParams, rows: int) -> Candidate | None:
    """When the base alone wins the location, its quantiles still get shallow trees on top of it (a residual
    candidate's, at most ``quantile_max_depth`` deep): the spread may grow with load where the location does not
    need trees (accuracy suite, heteroscedastic TPOT at 5k rows: p90 pinball 0.887 from the calibration alone)."""
    if rows < params.tree_min_rows:
        return None
    return next((c for c in params.candidates if not c.window), None)


def _is_window(candidate: Candidate | None) -> bool:
    return candidate is not None and candidate.window


def _start(location: xgb.Booster | None, x: np.ndarray, m: np.ndarray | None) -> np.ndarray:
    """The quantile booster's base margin on ``x``: the location's output on top of ``m`` (the base's margin in
    residual mode; None in window mode, where the location carries its own intercept)."""
    if location is None:
        return np.zeros(len(x)) if m is None else m
    return margin(location, x, m)


def _quantiles(d: _Data, params: FitParams, candidate: Candidate, location: xgb.Booster | None) -> xgb.Booster:
    """The multi-quantile booster on a subsample of the fit rows, starting from the location margin; its trees are
    repaired to stay monotone (``enforce_monotone``)."""
    rng = np.random.default_rng(params.seed + 1)
    rows = d.fit if len(d.fit) <= params.quantile_rows else np.sort(rng.choice(d.fit, params.quantile_rows,
                                                                               replace=False))
    k = len(params.served)
    m = None if candidate.window else d.m
    start = _start(location, d.x[rows], None if m is None else m[rows])
    start_stop = _start(location, d.x[d.stop], None if m is None else m[d.stop])
    scaled = params.scale_weighting
    dq = _matrix(d, rows, params, base=tiled(start, k), scale=_scale(start) if scaled else None)
    dstop = _matrix(d, d.stop, params, ref=dq, base=tiled(start_stop, k), weighted=False,
                    scale=_scale(start_stop) if scaled else None)
    objective = {"objective": "reg:quantileerror", "quantile_alpha": np.array(params.served),
                 "eval_metric": "quantile"}
    shallow = replace(candidate, max_depth=min(candidate.max_depth, params.quantile_max_depth))
    booster = train_stopped(booster_params(params, d.name, d.features, shallow, objective), dq, dstop,
                            params.rounds, params.early_stopping)
    return enforce_monotone(booster, monotone_signs(d.name, d.features))


def _trees(location: xgb.Booster | None, booster: xgb.Booster, x: np.ndarray, k: int) -> np.ndarray:
    """The trees' own raw output ``(n, k)`` (no base): location (its intercept included) + quantile trees."""
    start = margin(location, x) if location is not None else np.zeros(len(x))
    return margin(booster, x, tiled(start, k)).reshape(len(x), k)


def _served_base(d: _Data, candidate: Candidate | None, x_new: np.ndarray) -> Base:
    """The base the entry carries: the fitted one, with the window's bounds in window mode."""
    if candidate is None or not candidate.window:
        return d.base
    columns = d.base.columns()
    index = [d.features.index(c) for c in columns]
    top = np.vstack([d.x[:, index], x_new[:, index]]).max(axis=0) if len(d.x) + len(x_new) else np.zeros(len(index))
    return replace(d.base, window=tuple((c, float(v)) for c, v in zip(columns, top, strict=True)))


@dataclass(frozen=True)
class _Spread:
    """One location's quantiles, calibration and honest scores on the newest rows."""
    chosen: str
    candidate: Candidate | None
    location: xgb.Booster | None
    booster: xgb.Booster
    base: Base
    levels: list[float]
    cals: list[Calibration]
    holdout_pred: np.ndarray
    scores: Scores


def _spread(d: _Data, params: FitParams, rows: int, chosen: str, candidate: Candidate | None,
            location: xgb.Booster | None) -> _Spread:
    served = params.served
    spread = candidate if candidate is not None else _residual_spread(params, rows)
    quantiles = spread is not None and d.logged and len(d.fit) >= MIN_QUANTILE_ROWS
    booster = _quantiles(d, params, spread, location) if quantiles and spread is not None else \
        empty_booster(d.x, len(served), d.features)
    base = _served_base(d, candidate, d.x_new)
    raw_new = _raw(d, base, location, booster, d.x_new, len(served))
    floors = spread_floors(raw_new, d.y_new, served, rows, params.prior_spread_rows)
    levels = [(params.calibration_level or q) if q == params.alpha else q for q in served]
    cals = [calibrate(raw_new[:, j], d.y_new, level, params.objective, floors[j]) if d.logged else Calibration()
            for j, level in enumerate(levels)]
    primary = served.index(params.alpha)
    holdout_pred = _served(raw_new[:, primary], d.y_new, params, d.logged, floors[primary], levels[primary])
    return _Spread(chosen, candidate, location, booster, base, levels, cals, holdout_pred,
                   score(holdout_pred, d.y_new, params.alpha))


def _raw(d: _Data, base: Base, location: xgb.Booster | None, booster: xgb.Booster, x: np.ndarray,
         k: int) -> np.ndarray:
    """``(rows, k)``: the base with the trees on top, in the fit's space, before calibration."""
    return base.compiled(d.features).apply(_trees(location, booster, x, k), x, d.transform)


def _arbitrate(d: _Data, params: FitParams, rows: int, chosen: str, fitted: _Fitted,
               selection: dict[str, float]) -> _Spread:
    """The chosen candidate's quantiles; when a window candidate won the location, the best residual candidate's
    too, and the one whose served primary quantile has the lower pinball on the newest rows serves (the window one
    only when it is ``WINDOW_HANDICAP`` better). A location's squared error does not rank the tails: on the
    simulator's replay (accuracy suite, 100k rows) the window location won by 6 % in MAE while its p90 pinball on
    unseen rows was 1.17x the residual one's."""
    won = _spread(d, params, rows, chosen, *fitted[chosen])
    rival = _residual_rival(chosen, fitted, selection)
    if rival is None or len(d.y_new) < ARBITRATION_ROWS:
        return won
    other = _spread(d, params, rows, rival, *fitted[rival])
    return won if won.scores.pinball * (1.0 + WINDOW_HANDICAP) < other.scores.pinball else other


def fit_model(spec: FeatureSpec, name: str, train: Rows, newest: Rows, params: FitParams,
              recency: Recency | None = None, prior: Base | None = None) -> FittedModel:
    """Fit, select, calibrate and score model ``name`` (CPU-bound: call off the event loop). The base is shrunk
    toward ``prior`` while rows are few (``trainer.base_fit``; None: the default coefficients)."""
    started, cpu_started = time.perf_counter(), time.thread_time()
    if params.objective == "quantile" and len(train) + len(newest) < params.tree_min_rows:
        return _thin_model(spec, name, Rows.concat([r for r in (train, newest) if len(r)]), params,
                           recency or Recency(), prior, (started, cpu_started))
    train, newest = newest_split(train, newest)
    rows = len(train) + len(newest)
    d = _data(spec, name, train, newest, params, recency or Recency(), prior)
    location_started = time.perf_counter()
    chosen, fitted, selection = _select(d, params, rows >= params.tree_min_rows)
    location_seconds = time.perf_counter() - location_started
    won = _arbitrate(d, params, rows, chosen, fitted, selection)
    served = params.served
    raw_ref, raw_probe = (_raw(d, won.base, won.location, won.booster, x, len(served))
                          for x in (d.x[d.stop], _probe(spec, name, params)))
    primary = served.index(params.alpha)
    cals, levels, scores = won.cals, won.levels, won.scores
    reference = _reference(raw_ref[:, primary], d.y[d.stop], cals[primary], params, d.logged)
    fit_seconds = time.perf_counter() - started
    entry = _entry(d, params, served, cals, won.chosen, selection, won.location, won.booster, len(train),
                   len(newest))
    entry["base"] = won.base.as_dict()
    entry.update(fit_seconds=round(fit_seconds, 4), fit_cpu_seconds=round(time.thread_time() - cpu_started, 4),
                 location_seconds=round(location_seconds, 4), location_fit_rows=len(d.loc),
                 calibration_level=round(levels[primary], 4),
                 metrics=scores.as_dict(), reference_metrics=reference.as_dict())
    files, manifest_entry = encode_model(won.booster, name, d.features, entry, won.location)
    probe = cals[primary].apply_log(raw_probe[:, primary]) if d.logged else np.maximum(raw_probe[:, primary], 0)
    return FittedModel(name, files, manifest_entry, scores, reference, fit_seconds, probe, won.holdout_pred, newest,
                       int(train.seq.max(initial=-1)))


def _probe(spec: FeatureSpec, name: str, params: FitParams) -> np.ndarray:
    zero = {"num_tokens_generated": np.zeros(PROBE_ROWS)} if name == "tpot" and params.tpot_zero_token_count else {}
    return spec.matrix(name, {**probe_columns(), **zero})


def _thin_model(spec: FeatureSpec, name: str, rows: Rows, params: FitParams, recency: Recency, prior: Base | None,
                clocks: tuple[float, float]) -> FittedModel:
    """Fewer rows than the trees need: the base alone on every row, calibrated on cross-validated residuals
    (``trainer.thin``); every row is a newest row."""
    features = spec.columns(name)
    x = spec.matrix(name, training_columns(name, rows, params.tpot_zero_token_count))
    y = rows.column(TARGET_OF[name])
    weight = recency.weights(rows.wall, float(rows.wall.max(initial=0.0)))
    thin = fit_thin(name, features, x, y, weight, prior, params)
    primary = params.served.index(params.alpha)
    scores = score(thin.holdout_pred, y, params.alpha)
    served_probe = thin.calibrations[primary].apply_log(np.log1p(thin.base.compiled(features)(_probe(spec, name,
                                                                                                        params))))
    k = len(params.served)
    booster = empty_booster(x, k, features)
    entry: dict[str, Any] = {
        "quantiles": list(params.served), "primary_quantile": params.alpha, "objective": params.objective,
        "target_transform": "log1p", "calibration": thin.calibrations[primary].as_dict(),
        "calibrations": {quantile_key(q): c.as_dict() for q, c in zip(params.served, thin.calibrations, strict=True)},
        "candidate": BASE_ONLY, "selection": {BASE_ONLY: _rmse(np.log1p(y), thin.margin)},
        "selection_metric": "log_rmse",
        "location_rounds": 0, "quantile_rounds": 0, "training_rows": len(rows), "fit_rows": len(rows),
        "stop_rows": 0, "holdout_rows": len(rows), "prior": False, "base": thin.base.as_dict(),
        "importances": _term_shares(thin.base, features, x),
        "fit_seconds": round(time.perf_counter() - clocks[0], 4),
        "fit_cpu_seconds": round(time.thread_time() - clocks[1], 4), "location_seconds": 0.0,
        "location_fit_rows": len(rows), "calibration_level": round(thin.levels[primary], 4),
        "metrics": scores.as_dict(), "reference_metrics": scores.as_dict()}
    files, manifest_entry = encode_model(booster, name, features, entry)
    return FittedModel(name, files, manifest_entry, scores, scores, entry["fit_seconds"], served_probe,
                       thin.holdout_pred, rows, int(rows.seq.max(initial=-1)))


def _served(raw: np.ndarray, y: np.ndarray, params: FitParams, logged: bool, floor: float,
            level: float) -> np.ndarray:
    return cross_calibrated(raw, y, level, params.objective, floor) if logged else np.maximum(raw, 0.0)


def _reference(raw: np.ndarray, y: np.ndarray, cal: Calibration, params: FitParams, logged: bool) -> Scores:
    pred = cal.apply_log(raw) if logged else np.maximum(raw, 0.0)
    return score(pred, y, params.alpha)


def _term_shares(base: Base, features: tuple[str, ...], x: np.ndarray) -> dict[str, float]:
    """A model served by its base alone: each feature's mean share of the base over the rows (a product term's
    share split between its two columns; the constant's left out), normalised to 1."""
    parts = term_matrix(base.terms, features, x) * np.array(base.coefficients)
    share = (parts / np.maximum(parts.sum(axis=1, keepdims=True), 1e-12)).mean(axis=0) if len(parts) else \
        np.zeros(len(base.terms))
    out = dict.fromkeys(features, 0.0)
    for term, value in zip(base.terms, share, strict=True):
        for col in term_columns(term):
            out[col] += float(value) / len(term_columns(term))
    total = sum(out.values())
    return {f: v / total for f, v in out.items()} if total > 0 else out


def _entry(d: _Data, params: FitParams, served: tuple[float, ...], cals: list[Calibration], candidate: str,
           selection: dict[str, float], location: xgb.Booster | None, booster: xgb.Booster, train_rows: int,
           newest_rows: int) -> dict[str, Any]:
    return {
        "quantiles": list(served), "primary_quantile": params.alpha, "objective": params.objective,
        "target_transform": "log1p" if d.logged else "identity",
        "calibration": cals[served.index(params.alpha)].as_dict(),
        "calibrations": {quantile_key(q): c.as_dict() for q, c in zip(served, cals, strict=True)},
        "candidate": candidate, "selection": selection, "selection_metric": params.selection,
        "location_rounds": location.num_boosted_rounds() if location is not None else 0,
        "quantile_rounds": booster.num_boosted_rounds(),
        "training_rows": train_rows, "fit_rows": len(d.fit), "stop_rows": len(d.stop), "holdout_rows": newest_rows,
        "importances": importances(location, d.features) if location is not None else
        _term_shares(d.base, d.features, d.x[d.fit]),
        "prior": False, "base": d.base.as_dict(),
    }
