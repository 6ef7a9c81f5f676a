"""Fitting one latency model: a physical base, a location booster and one multi-quantile booster on top of it.

The design (chosen on the accuracy suite, bench/results/quality/RESULTS-quality.md, by pinball on data the fits
never saw):

0. **Physical base.** A few non-negative coefficients on the work ahead of the request (``shared.base``,
   fitted by ``trainer.base_fit``); every booster starts from its margin (``base_margin``) and learns the residual,
   so past the window, where trees are constant, the base carries the growth.
1. **Log target.** Boosters are fitted on ``log1p(y)``; quantiles commute with that monotone map,
   so ``expm1`` of a log-space quantile is the quantile in ms, and multiplicative effects (a prompt
   twice as long, a pod twice as slow) become additive for the trees.
2. **Location per candidate.** Each candidate configuration (tree depth, monotone constraints)
   fits ``reg:squarederror`` on ``log1p y`` over the fit rows, rounds by early stopping on the
   stop rows (squared error is 3–4× cheaper per round than the quantile objective).
3. **Selection.** The candidate whose location has the lowest log-RMSE on the selection rows wins
   (picking by p90 pinball on a few thousand rows chose the worse candidate on 3 of 5 families).
4. **Quantiles.** One ``reg:quantileerror`` booster with one output per served quantile is fitted
   on a subsample, starting from the winner's location margin (``base_margin``), early-stopped:
   its trees learn only spread and skew. Served raw output = location + quantile trees.

Mean objective (``LATENCY_OBJECTIVE_TYPE=mean``): one ``reg:squarederror`` booster on ``y`` itself (over the base
in ms). Monotone constraints, on every candidate, encode what operators check (contract §8): TTFT does not fall
when the prompt, prefill tokens in flight or the queue grow; TPOT does not fall with running requests, decode
tokens in flight or KV usage. With the base (non-negative coefficients on non-negative features) every served
quantile is non-decreasing in them (``trainer.monotone_check`` sweeps it before a publish).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import orjson
import xgboost as xgb

from shared.candidates import Candidate
from trainer.base_fit import BaseFitParams
from trainer.store.record import STORED_FIELDS
from trainer.window import Rows

MONOTONE_UP: Mapping[str, frozenset[str]] = {
    "ttft": frozenset({"input_token_length", "effective_input_tokens", "prefill_tokens_in_flight",
                       "num_request_waiting", "is_queued"}),
    "tpot": frozenset({"num_request_running", "decode_tokens_in_flight", "kv_cache_percentage"}),
}

BASE_ONLY = "base"
"""The candidate that serves the base alone (no trees): the only one while rows are fewer than
``FitParams.tree_min_rows``."""


@dataclass(frozen=True)
class FitParams:
    objective: str = "quantile"
    alpha: float = 0.9
    """The primary quantile: the contract's ``ttft_ms`` / ``tpot_ms``."""
    quantiles: tuple[float, ...] = (0.5, 0.9, 0.99)
    """Every quantile served (sorted; contains ``alpha``)."""
    candidates: tuple[Candidate, ...] = (Candidate(6), Candidate(4, True))
    rounds: int = 300
    """Most rounds per booster; early stopping usually ends well before."""
    early_stopping: int = 15
    learning_rate: float = 0.1
    max_bin: int = 128
    nthread: int = 1
    quantile_rows: int = 20_000
    """Rows the quantile booster is fitted on (a subsample of the fit rows): the time budget."""
    quantile_max_depth: int = 3
    """The quantile booster's trees are at most this deep (the winner's depth when shallower): they learn the
    spread, and deeper ones lost more to the monotone leaf repair (accuracy suite, validation seed: sim p99 pinball
    9.9 at depth 6 vs 7.8 at 3; no family worse at 3)."""
    location_rows: int | None = None
    """At most this many fit rows for the location boosters (a seeded subsample; None: all) — set per cycle by
    ``trainer.budget.FitBudget`` when fits overrun their time budget."""
    tpot_zero_token_count: bool = True
    prefix_weighting: bool = False
    scale_weighting: bool = False
    """Quantile trees weigh each row by its location in ms (``expm1`` of the location margin, mean 1): a
    log-space pinball weighted by scale approximates the pinball in milliseconds, which the big rows dominate."""
    calibration_level: float | None = None
    """The conformal level of the primary quantile (None: ``alpha``); the retrain cycle adapts it to the live
    model's fresh coverage (``trainer.adaptive``)."""
    prior_spread_rows: int = 50
    """While data is thin each quantile keeps at least the prior's spread above the location, weighted
    ``prior_spread_rows / (rows + prior_rows)`` (``trainer.calibrate.spread_floor``; 0: no floor)."""
    thin_empirical: tuple[str, ...] = ("tpot",)
    """Models whose thin fits take the plain α-quantile of their residuals while the conformal rank would be the
    largest one (``trainer.thin``; ``LATENCY_THIN_EMPIRICAL_QUANTILE``)."""
    selection: str = "mae_ms"
    """How candidates are judged on the newest rows: the location's MAE in ms (what the p50 pinball weighs: the big
    rows count most), or ``log_rmse`` (the fit's own space; it preferred window-mode trees that were worse in ms on
    the accuracy suite's non-additive TTFT: p90 pinball 18.8 vs 16.2)."""
    tree_min_rows: int = 0
    """Below this many rows (train + newest) only the base is fitted (candidate ``base``); from there on the tree
    candidates compete with it."""
    base: BaseFitParams = field(default_factory=BaseFitParams)
    seed: int = 0
    extra: Mapping[str, object] = field(default_factory=dict)

    @property
    def served(self) -> tuple[float, ...]:
        return tuple(sorted(set(self.quantiles) | {self.alpha})) if self.objective == "quantile" else (self.alpha,)


def training_columns(name: str, rows: Rows, tpot_zero_token_count: bool) -> dict[str, np.ndarray]:
    """Raw columns of window ``rows`` as the model trains on them."""
    return matrix_columns(name, rows.data, tpot_zero_token_count)


def matrix_columns(name: str, data: np.ndarray, tpot_zero_token_count: bool) -> dict[str, np.ndarray]:
    """Raw columns of a stored-layout matrix as model ``name`` trains on them (TPOT: tokens generated 0, §5)."""
    cols = {f: data[:, j] for j, f in enumerate(STORED_FIELDS)}
    if name == "tpot" and tpot_zero_token_count:
        cols["num_tokens_generated"] = np.zeros(len(data))
    return cols


def booster_params(params: FitParams, name: str, features: Sequence[str], candidate: Candidate,
                   objective: Mapping[str, object]) -> dict[str, object]:
    out: dict[str, object] = {"tree_method": "hist", "max_depth": candidate.max_depth, "eta": params.learning_rate,
                              "max_bin": params.max_bin, "nthread": params.nthread, "seed": params.seed,
                              "base_score": 0.0, **objective}
    out["monotone_constraints"] = "(" + ",".join(map(str, monotone_signs(name, features))) + ")"
    return out


def train_stopped(params: Mapping[str, object], dfit: xgb.DMatrix, dstop: xgb.DMatrix, rounds: int,
                  patience: int) -> xgb.Booster:
    """Boost up to ``rounds`` with early stopping on ``dstop``; keep the best iteration."""
    booster = xgb.train(dict(params), dfit, num_boost_round=rounds, evals=[(dstop, "stop")],
                        early_stopping_rounds=patience, verbose_eval=False)
    return booster[: booster.best_iteration + 1]


def empty_booster(x: np.ndarray, outputs: int, features: Sequence[str]) -> xgb.Booster:
    """A booster of ``outputs`` columns and no trees: its output is its base margin (a model served by its base,
    or by its location booster alone)."""
    rows = np.asarray(x[:1], dtype=np.float32)
    if not len(rows):
        rows = np.zeros((1, len(features)), dtype=np.float32)
    label = np.zeros((1, outputs)) if outputs > 1 else np.zeros(1)
    dtrain = xgb.DMatrix(rows, label, feature_names=list(features))
    return xgb.train({"objective": "reg:squarederror", "base_score": 0.0, "nthread": 1}, dtrain, num_boost_round=0)


def margin(booster: xgb.Booster, x: np.ndarray, base: np.ndarray | None = None) -> np.ndarray:
    """Raw output (``(n,)`` or ``(n, k)``) of ``booster`` on ``x``, starting from ``base`` when given."""
    out = booster.inplace_predict(x, validate_features=False, base_margin=base)
    return np.asarray(out, dtype=np.float64)


def tiled(location: np.ndarray, k: int) -> np.ndarray:
    """A location margin repeated for each of ``k`` quantile outputs (the quantile booster's base margin)."""
    return np.repeat(np.asarray(location, dtype=np.float32).reshape(-1, 1), k, axis=1)


def prefix_weights(rows: Rows) -> np.ndarray:
    """Inverse-frequency weights by prefix bucket (LATENCY_SAMPLE_WEIGHTING_FOR_PREFIX_CACHE), mean 1."""
    bucket = rows.bucket % 4
    counts = np.bincount(bucket, minlength=4).astype(np.float64)
    weights = 1.0 / counts[bucket]
    return weights * (len(weights) / weights.sum())


def importances(booster: xgb.Booster, features: Sequence[str]) -> dict[str, float]:
    """Normalised gain importance per feature column (0.0 for unused columns)."""
    gains = {k: float(v) for k, v in booster.get_score(importance_type="gain").items()
             if isinstance(v, (int, float))}
    total = sum(gains.values()) or 1.0
    return {f: gains.get(f, 0.0) / total for f in features}


def monotone_signs(name: str, features: Sequence[str]) -> tuple[int, ...]:
    up = MONOTONE_UP.get(name, frozenset())
    return tuple(1 if f in up else 0 for f in features)


def enforce_monotone(booster: xgb.Booster, signs: Sequence[int]) -> xgb.Booster:
    """Repair the leaves of a quantile booster so every tree is monotone again.

    XGBoost grows every tree under the monotone constraints, but the quantile objective then re-fits
    each leaf to the α-quantile of its residuals, which can break the order the constraint had set
    (LightGBM and CatBoost share the limitation). Per tree, leaf A must not exceed leaf B whenever
    their boxes overlap in every feature but one constrained feature, in which A lies wholly below B
    (above, for a decreasing constraint). The repair pools violators (``pool_violators``): leaves in
    order keep their value. A sum of monotone trees is monotone, so the whole booster is.
    """
    if not any(signs):
        return booster
    model = orjson.loads(bytes(booster.save_raw("json")))
    for tree in model["learner"]["gradient_booster"]["model"]["trees"]:
        _repair_tree(tree, np.asarray(signs))
    repaired = xgb.Booster()
    repaired.load_model(bytearray(orjson.dumps(model)))
    return repaired


def _leaf_boxes(tree: dict[str, Any], n_features: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(leaf node ids, low bounds, high bounds): each leaf's box ``[low, high)`` per feature."""
    left, right = tree["left_children"], tree["right_children"]
    index, cond = tree["split_indices"], tree["split_conditions"]
    leaves, lows, highs = [], [], []
    stack = [(0, np.full(n_features, -np.inf), np.full(n_features, np.inf))]
    while stack:
        node, low, high = stack.pop()
        if left[node] == -1:
            leaves.append(node)
            lows.append(low)
            highs.append(high)
            continue
        f, t = index[node], cond[node]
        left_high, right_low = high.copy(), low.copy()
        left_high[f], right_low[f] = min(high[f], t), max(low[f], t)
        stack += [(left[node], low, left_high), (right[node], right_low, high)]
    return np.array(leaves), np.array(lows), np.array(highs)


def _repair_tree(tree: dict[str, Any], signs: np.ndarray) -> None:
    leaves, low, high = _leaf_boxes(tree, len(signs))
    if len(leaves) < 2:
        return
    overlap = (low[:, None, :] < high[None, :, :]) & (low[None, :, :] < high[:, None, :])  # (A, B, feature)
    below = np.zeros((len(leaves), len(leaves)), dtype=bool)  # below[a, b]: leaf a must not exceed leaf b
    for f in np.flatnonzero(signs):
        others = np.delete(overlap, f, axis=2).all(axis=2)
        ordered = high[:, None, f] <= low[None, :, f] if signs[f] > 0 else low[:, None, f] >= high[None, :, f]
        below |= others & ordered
    values = np.array([tree["split_conditions"][n] for n in leaves], dtype=np.float64)
    if not (below & (values[:, None] > values[None, :])).any():
        return
    weights = np.maximum(np.array([tree["sum_hessian"][n] for n in leaves], dtype=np.float64), 1e-12)
    for node, value in zip(leaves, pool_violators(values, weights, below), strict=True):
        tree["split_conditions"][node] = float(value)


def pool_violators(values: np.ndarray, weights: np.ndarray, below: np.ndarray) -> np.ndarray:
    """Leaf values that respect ``below`` (``below[a, b]``: a must not exceed b), changed as little as pooling
    allows: the worst violating pair's blocks are merged at their weighted mean (the leaves' row counts) until none
    is left — at most one merge per leaf, each block one value, so the result is monotone. (The average of the
    upward and downward closures, used before, moved deep trees' leaves far: depth-6 p99 pinball 3.5× on the
    accuracy suite's sim family.)"""
    v, block = values.astype(np.float64).copy(), np.arange(len(values))
    for _ in range(len(values)):
        excess = np.where(below, v[:, None] - v[None, :], 0.0)
        a, b = np.unravel_index(int(np.argmax(excess)), excess.shape)
        if excess[a, b] <= 1e-12 * max(1.0, abs(float(v[a]))):
            break
        members = (block == block[a]) | (block == block[b])
        v[members] = float(np.sum(weights[members] * v[members]) / np.sum(weights[members]))
        block[members] = block[a]
    return v
