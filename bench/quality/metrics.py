"""Scores of served quantile predictions on a test split (scikit-learn metrics, offline only)."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
from sklearn.metrics import mean_absolute_percentage_error, mean_pinball_loss

from bench.quality.family import Split


def coverage(y: np.ndarray, pred: np.ndarray) -> float:
    """Share of rows whose latency is at or below the prediction (target: the quantile level)."""
    return float(np.mean(y <= pred))


def pinball(y: np.ndarray, pred: np.ndarray, alpha: float) -> float:
    return float(mean_pinball_loss(y, pred, alpha=alpha))


def score(test: Split, preds: Mapping[float, np.ndarray]) -> dict[float, dict[str, float]]:
    """Per quantile: coverage, pinball, and (analytic families) MAPE vs truth and pinball ÷ oracle."""
    out = {}
    for alpha, pred in preds.items():
        row = {"coverage": coverage(test.y, pred), "pinball": pinball(test.y, pred, alpha)}
        if test.truth is not None:
            truth = test.truth[alpha]
            row["mape"] = float(mean_absolute_percentage_error(truth, pred))
            row["bias"] = float(np.mean(pred - truth))
            row["pinball_ratio"] = row["pinball"] / pinball(test.y, truth, alpha)
            row["excess_top1"] = excess_share_top(test.y, pred, truth, alpha)
        out[alpha] = row
    return out


def excess_share_top(y: np.ndarray, pred: np.ndarray, truth: np.ndarray, alpha: float, top: float = 0.01) -> float:
    """Share of the pinball excess over the oracle that comes from the ``top`` rows with the largest truth."""
    def loss(p: np.ndarray) -> np.ndarray:
        diff = y - p
        return np.maximum(alpha * diff, (alpha - 1.0) * diff)

    excess = loss(pred) - loss(truth)
    total = float(excess.sum())
    if total <= 0:
        return float("nan")
    heavy = truth >= np.quantile(truth, 1.0 - top)
    return float(excess[heavy].sum()) / total
