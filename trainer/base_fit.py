"""Fitting a model's physical base (``shared.base``) on the window: a handful of coefficients ≥ 0.

**Objective**: least squares in log space, ``Σ w·(log1p y − log1p base(x))²`` — the space the trees then learn the
residual in. Coefficients are written ``β = s·u·exp(φ)`` (so they are positive by construction) and ``φ`` is found
by Levenberg–Marquardt (p ≤ 6 unknowns: a p × p solve per step, numpy only), started from the prior and from the
solution of the convex relative-error problem, whichever is better. ``loss="l1"`` reweights every step to the least
absolute log error (the median: a burst of slow rows pulls less).

**Shrinkage while rows are few**: the rows are joined by ``prior_rows`` pseudo-rows (in weight) — ``GRID_ROWS``
rows of the typical grid (``shared.features.typical_columns``: every feature over a healthy pod's range, queues
included) labelled with the prior's base (the live model's, or the default) times the *level* ``s``, the median
ratio of latency to the prior's base over the real rows. So five rows set the level freely, however far the prior is
off (a CPU engine is 10× a GPU's roofline), while the shape stays the prior's where the rows say nothing (no queue
yet) and is the rows' wherever they speak; once a few hundred rows arrive the pseudo-rows are a rounding error.
``u`` (the unit of each coefficient) is the prior's coefficient, at least ``FLOOR`` × the default's, so a term the
prior made negligible can come back. CPU-bound: called from the fit threads.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from shared.base import DEFAULT_COEFFICIENTS, Base, model_terms, term_columns
from shared.features import FeatureSpec, typical_columns

FLOOR = 0.01
"""A term's unit is at least this × its default coefficient (a prior coefficient of 0 still has a scale)."""
MIN_THETA = 1e-9
"""Least ratio of a coefficient to its unit: a term the rows rule out ends here and is published as 0."""
L1_FLOOR = 0.02
"""``l1``: residuals below this (log space) weigh as this one (IRLS smoothing)."""
LEVEL_BOUNDS = (1e-3, 1e3)
GRID_ROWS = 256


@dataclass(frozen=True)
class BaseFitParams:
    prior_rows: float = 20.0
    """Weight of the prior's pseudo-rows, in rows (0: no shrinkage)."""
    loss: str = "l2"
    tau: float = 0.5
    """``l1``: the quantile of the log residual the base is fitted to (0.5: the median)."""
    iterations: int = 30


def term_matrix(terms: Sequence[str], features: Sequence[str], x: np.ndarray) -> np.ndarray:
    """``(n, terms)`` float64: each term's value per row (1 for the constant)."""
    index = {f: j for j, f in enumerate(features)}
    x = np.asarray(x, dtype=np.float64)
    out = np.ones((len(x), len(terms)))
    for k, term in enumerate(terms):
        for col in term_columns(term):
            out[:, k] *= x[:, index[col]]
    return out


@lru_cache(maxsize=16)
def grid_terms(name: str, features: tuple[str, ...]) -> np.ndarray:
    """The model's terms on the typical grid (``shared.features.typical_columns``, fixed seed)."""
    spec = FeatureSpec(token_in_flight="prefill_tokens_in_flight" in features,
                       encoder="encoder_input_size" in features)
    x = spec.matrix(name, typical_columns(GRID_ROWS, np.random.default_rng(0)))
    return term_matrix(model_terms(name, features), features, x)


def _weighted_median(values: np.ndarray, weight: np.ndarray) -> float:
    order = np.argsort(values)
    cum = np.cumsum(weight[order])
    return float(values[order][np.searchsorted(cum, 0.5 * cum[-1])])


def level(y: np.ndarray, prior: np.ndarray, weight: np.ndarray) -> float:
    """The median ratio of latency to the prior's base (``(1 + y) / (1 + base)``), within ``LEVEL_BOUNDS``."""
    ratio = np.log1p(y) - np.log1p(prior)
    return float(np.clip(math.exp(_weighted_median(ratio, weight)), *LEVEL_BOUNDS))


def _check(r: np.ndarray, tau: float) -> np.ndarray:
    """The pinball (check) loss of residuals ``r`` at quantile ``tau`` (twice it: ``|r|`` at the median)."""
    return 2.0 * r * (tau - (r < 0))


def _objective(c: np.ndarray, phi: np.ndarray, z: np.ndarray, w: np.ndarray, params: BaseFitParams) -> float:
    r = z - np.log1p(c @ np.exp(phi))
    return float(np.sum(w * (_check(r, params.tau) if params.loss == "l1" else r * r)))


def fit_base(name: str, features: Sequence[str], x: np.ndarray, y: np.ndarray, weight: np.ndarray | None,
             prior: Base | None, params: BaseFitParams) -> Base:
    """The base of model ``name`` fitted on rows ``x`` (the model's feature matrix) with latencies ``y`` (ms),
    shrunk toward ``prior`` (None or other terms: the default)."""
    terms = model_terms(name, features)
    if prior is None or prior.terms != terms:
        prior = Base.default(name, features)
    if not len(y):
        return prior
    w = np.ones(len(y)) if weight is None else np.asarray(weight, dtype=np.float64)
    w = w * (len(w) / max(float(w.sum()), 1e-12))
    t = term_matrix(terms, features, x)
    coefficients = np.array(prior.coefficients)
    s = level(y, t @ coefficients, w)
    grid = grid_terms(name, tuple(features))
    t_all = np.vstack([t, grid])
    z_all = np.concatenate([np.log1p(np.asarray(y, dtype=np.float64)), np.log1p(s * (grid @ coefficients))])
    w_all = np.concatenate([w, np.full(len(grid), params.prior_rows / len(grid))])
    scale = s * np.maximum(coefficients, FLOOR * np.array([DEFAULT_COEFFICIENTS[name][k] for k in terms]))
    phi = _levenberg_marquardt(t_all * scale, z_all, w_all, params)
    theta = np.where(phi <= math.log(MIN_THETA) + 1e-9, 0.0, np.exp(phi))  # at the floor: the rows ruled it out
    return Base(terms, tuple(float(v) for v in theta * scale), rows=len(y), source="fit")


def _relative_start(c: np.ndarray, z: np.ndarray, w: np.ndarray) -> np.ndarray:
    """``log θ`` of the convex relative-error problem ``min Σ w·((c θ − y) / (1 + y))²``, θ ≥ ``MIN_THETA`` (a
    projected least-squares solution): near the log-space optimum however far the prior is off."""
    y1 = np.expm1(z) + 1.0
    root = np.sqrt(w) / y1
    theta, *_ = np.linalg.lstsq(c * root[:, None], (y1 - 1.0) * root, rcond=None)
    return np.log(np.maximum(theta, MIN_THETA))


def _levenberg_marquardt(c: np.ndarray, z: np.ndarray, w: np.ndarray, params: BaseFitParams) -> np.ndarray:
    starts = (np.zeros(c.shape[1]), _relative_start(c, z, w))
    values = [_objective(c, p, z, w, params) for p in starts]
    phi, best = min(zip(starts, values, strict=True), key=lambda pv: pv[1])
    damping = 1e-3
    for _ in range(params.iterations):
        theta = np.exp(phi)
        b = c @ theta
        r = z - np.log1p(b)
        wi = w * np.where(r >= 0, params.tau, 1 - params.tau) * 2 / np.maximum(np.abs(r), L1_FLOOR) \
            if params.loss == "l1" else w
        j = c * theta / (1.0 + b)[:, None]
        hessian = (j * wi[:, None]).T @ j
        gradient = j.T @ (wi * r)
        while damping < 1e8:
            step = np.linalg.solve(hessian + damping * np.diag(np.diag(hessian) + 1e-12), gradient)
            candidate = np.clip(phi + step, math.log(MIN_THETA), -math.log(MIN_THETA))
            value = _objective(c, candidate, z, w, params)
            if value < best:
                break
            damping *= 10.0
        else:
            return phi
        converged = best - value <= 1e-10 * max(best, 1e-12)
        phi, best, damping = candidate, value, max(damping / 10.0, 1e-9)
        if converged:
            break
    return phi
