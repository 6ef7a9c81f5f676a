"""Adaptive calibration level: the primary quantile's conformal level follows the live model's fresh coverage.

Split-conformal calibration on the newest rows covers α of *exchangeable* new rows. A pool whose latency drifts
between the rows a model was calibrated on and the rows it then serves (load ramping up, a neighbour taking CPU)
breaks that, and the model under-covers until the drift stops. Adaptive conformal inference (Gibbs & Candès,
"Adaptive conformal inference under distribution shift", NeurIPS 2021) corrects it online: after each interval,

    level ← level + γ · (α − coverage of the live model on the rows that arrived in the interval)

so a model that under-covered makes the next calibration more conservative, one that over-covered less, and
the long-run coverage is α whatever the drift. A step needs ``min_rows`` fresh rows: a thin pool's cycles (one to
five rows each) are pooled until that many arrived, so the level follows its coverage too; the level stays within
``[α − spread, α + (1 − α) · 0.9]`` (a p90 is calibrated at 0.80–0.99). On stationary traffic coverage
fluctuates around α and the level stays close to it. Nothing moves while the live model is the prior (no
prequential coverage is measured for it).
"""

from __future__ import annotations

from shared.features import MODEL_NAMES


class AdaptiveLevel:
    def __init__(self, alpha: float, gamma: float, min_rows: int = 20, spread: float = 0.1) -> None:
        self.alpha, self.gamma, self.min_rows = alpha, gamma, min_rows
        self.bounds = (max(0.5, alpha - spread), alpha + (1.0 - alpha) * 0.9)
        self._level = dict.fromkeys(MODEL_NAMES, alpha)
        self._pending = {name: (0.0, 0) for name in MODEL_NAMES}
        """Per model: (rows covered, rows) seen since the last step, until ``min_rows`` arrived."""

    def level(self, name: str) -> float:
        """The level ``name``'s primary quantile is calibrated at in the next fit."""
        return self._level[name]

    def observe(self, name: str, coverage: float | None, rows: int) -> None:
        """The live model's coverage on the ``rows`` that arrived since the previous cycle."""
        if coverage is None or not rows or self.gamma <= 0:
            return
        covered, seen = self._pending[name]
        covered, seen = covered + coverage * rows, seen + rows
        if seen < self.min_rows:
            self._pending[name] = (covered, seen)
            return
        self._pending[name] = (0.0, 0)
        low, high = self.bounds
        self._level[name] = min(high, max(low, self._level[name] + self.gamma * (self.alpha - covered / seen)))
