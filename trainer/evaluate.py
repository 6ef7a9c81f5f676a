"""Holdout scores: MAE, RMSE, coverage (share of rows with y ≤ prediction) and pinball loss."""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np


@dataclass(frozen=True)
class Scores:
    n: int
    mae: float
    rmse: float
    coverage: float
    pinball: float

    def as_dict(self) -> dict[str, float]:
        return {k: float(v) for k, v in asdict(self).items()}

    def loss(self, objective: str) -> float:
        """The champion/challenger criterion: pinball loss (quantile) or RMSE (mean)."""
        return self.pinball if objective == "quantile" else self.rmse


def pinball(pred: np.ndarray, y: np.ndarray, alpha: float) -> float:
    diff = y - pred
    return float(np.mean(np.maximum(alpha * diff, (alpha - 1.0) * diff)))


def score(pred: np.ndarray, y: np.ndarray, alpha: float) -> Scores:
    if len(y) == 0:
        return Scores(0, 0.0, 0.0, 0.0, 0.0)
    err = pred - y
    return Scores(n=len(y), mae=float(np.mean(np.abs(err))), rmse=float(np.sqrt(np.mean(err * err))),
                  coverage=float(np.mean(y <= pred)), pinball=pinball(pred, y, alpha))


def row_losses(pred: np.ndarray, y: np.ndarray, alpha: float, objective: str) -> np.ndarray:
    """Each row's loss under the champion/challenger criterion: pinball (quantile) or squared error (mean)."""
    diff = y - pred
    if objective == "quantile":
        return np.maximum(alpha * diff, (alpha - 1.0) * diff)
    return diff * diff


def not_worse(challenger: np.ndarray, live: np.ndarray, z: float) -> bool:
    """Paired comparison on the same rows: the challenger is *not worse* unless its mean loss exceeds the live
    model's by more than ``z`` standard errors of the mean difference (on stationary traffic two fits differ by
    noise, and the newer one — it has seen the newest rows — should be published)."""
    d = challenger - live
    if len(d) < 2:
        return float(d.sum()) <= 0.0
    return float(d.mean()) <= z * float(d.std(ddof=1)) / float(np.sqrt(len(d)))


def covers(coverage: float, n: int, alpha: float, z: float) -> bool:
    """A coverage measured on ``n`` rows is consistent with ``alpha``: at most ``z`` binomial standard errors below
    it (the one-sided check that keeps an under-covering fit out)."""
    return n > 0 and coverage >= alpha - z * float(np.sqrt(alpha * (1.0 - alpha) / n))
