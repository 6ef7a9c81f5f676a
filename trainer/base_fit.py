"""Fitting a model's physical base (``shared.base``) on the window: a handful of coefficients ≥ 0.

**Objective**: least squares in log space, ``Σ w·(log1p y − log1p base(x))²`` — the space the trees then learn the
residual in — over coefficients ≥ 0, solved by Gauss-Newton steps that are each a small non-negative least-squares
problem (``scipy.optimize.nnls`` on the p × p system after a QR of the rows; p ≤ 6), with backtracking.
``loss="l1"`` reweights every step to the least absolute log error (the median: a burst of slow rows pulls less).

**Shrinkage while rows are few**: coefficients are ``β = s·d·θ`` — ``d`` the default coefficients
(``shared.base.DEFAULT_COEFFICIENTS``, all > 0), ``s`` the *level*: the median ratio of latency to the prior's base
over the rows (the prior = the live model's base, or the default) — so ten rows set the level freely, however far
the prior is off (a CPU engine is 10× a GPU's roofline). The *shape* ``θ`` is pulled toward the prior's
(``θ̃ = prior / (s·d)``) by ``prior_rows`` pseudo-rows per term, each weighted by the term's share of the default
base on the typical grid (at least ``MIN_SHARE``): where the rows say nothing about a term (no queue yet) the prior
keeps it; once a few hundred rows speak, the penalty is a rounding error. CPU-bound: called from the fit threads.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from shared.base import CONSTANT, DEFAULT_COEFFICIENTS, Base, model_terms, term_columns
from shared.features import typical_columns

MIN_SHARE = 0.05
"""Least weight of a term's shrinkage pseudo-rows (the constant's share of a loaded GPU pod's base is ~1 %)."""
L1_FLOOR = 0.02
"""``l1``: residuals below this (log space) weigh as this one (IRLS smoothing)."""
LEVEL_BOUNDS = (1e-3, 1e3)
GRID_ROWS = 2000


@dataclass(frozen=True)
class BaseFitParams:
    prior_rows: float = 20.0
    """Pseudo-rows that hold each term's shape at the prior's (0: no shrinkage)."""
    loss: str = "l2"
    iterations: int = 8


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
def shares(name: str, features: tuple[str, ...]) -> np.ndarray:
    """Each term's mean share of the default base over the typical grid, at least ``MIN_SHARE``."""
    from shared.features import FeatureSpec  # the grid is built from raw columns

    spec = FeatureSpec(token_in_flight="prefill_tokens_in_flight" in features,
                       encoder="encoder_input_size" in features)
    x = spec.matrix(name, typical_columns(GRID_ROWS, np.random.default_rng(0)))
    base = Base.default(name, features)
    parts = term_matrix(base.terms, features, x) * np.array(base.coefficients)
    share = (parts / np.maximum(parts.sum(axis=1, keepdims=True), 1e-12)).mean(axis=0)
    return np.maximum(share, MIN_SHARE)


def _weighted_median(values: np.ndarray, weight: np.ndarray) -> float:
    order = np.argsort(values)
    cum = np.cumsum(weight[order])
    return float(values[order][np.searchsorted(cum, 0.5 * cum[-1])])


def level(y: np.ndarray, prior: np.ndarray, weight: np.ndarray) -> float:
    """The median ratio of latency to the prior's base (``(1 + y) / (1 + base)``), within ``LEVEL_BOUNDS``."""
    ratio = np.log1p(y) - np.log1p(prior)
    return float(np.clip(math.exp(_weighted_median(ratio, weight)), *LEVEL_BOUNDS))


def _nnls(a: np.ndarray, b: np.ndarray, pen: np.ndarray, center: np.ndarray) -> np.ndarray:
    """``argmin ||a θ − b||² + ||pen·(θ − center)||²`` over θ ≥ 0 (rows reduced by QR first)."""
    from scipy.optimize import nnls  # the trainer's fit threads only; scipy comes with XGBoost

    q, r = np.linalg.qr(a, mode="reduced")
    stacked = np.vstack([r, np.diag(pen)])
    rhs = np.concatenate([q.T @ b, pen * center])
    theta, _ = nnls(stacked, rhs, maxiter=50 * len(center))
    return np.asarray(theta, dtype=np.float64)


def _objective(c: np.ndarray, theta: np.ndarray, z: np.ndarray, w: np.ndarray, pen: np.ndarray,
               center: np.ndarray, loss: str) -> float:
    r = z - np.log1p(c @ theta)
    data = np.sum(w * (np.abs(r) if loss == "l1" else r * r))
    return float(data + np.sum((pen * (theta - center)) ** 2))


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
    s = level(y, t @ np.array(prior.coefficients), w)
    scale = s * np.array([DEFAULT_COEFFICIENTS[name][k] for k in terms])
    c = t * scale
    center = np.array(prior.coefficients) / (scale / s)
    pen = math.sqrt(params.prior_rows) * shares(name, tuple(features))
    theta = _gauss_newton(c, np.log1p(np.asarray(y, dtype=np.float64)), w, pen, center, params)
    return Base(terms, tuple(float(v) for v in theta * scale), rows=len(y), source="fit")


def _gauss_newton(c: np.ndarray, z: np.ndarray, w: np.ndarray, pen: np.ndarray, center: np.ndarray,
                  params: BaseFitParams) -> np.ndarray:
    theta = center.copy()
    best = _objective(c, theta, z, w, pen, center, params.loss)
    for _ in range(params.iterations):
        b = c @ theta
        r = z - np.log1p(b)
        j = c / (1.0 + b)[:, None]
        wi = w / np.maximum(np.abs(r), L1_FLOOR) if params.loss == "l1" else w
        root = np.sqrt(wi)
        step = _nnls(j * root[:, None], (r + j @ theta) * root, pen, center)
        for _ in range(6):  # backtrack: a Gauss-Newton step can overshoot where log1p bends
            value = _objective(c, step, z, w, pen, center, params.loss)
            if value <= best:
                break
            step = 0.5 * (step + theta)
        else:
            return theta
        converged = best - value <= 1e-9 * max(best, 1e-12)
        theta, best = step, value
        if converged:
            break
    return theta


def constant_only(base: Base) -> bool:
    """Whether every coefficient but the constant's is 0 (the base then says nothing about load)."""
    return all(c == 0 for t, c in zip(base.terms, base.coefficients, strict=True) if t != CONSTANT)
