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
