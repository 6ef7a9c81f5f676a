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
prequential coverage is measured for it), nor while the live model was calibrated at another level than the current
one — a challenger at the new level was refused, so the coverage measured says nothing about that level. Without
this hold the level wound up to its bound behind an under-covering live model (a ``make demo`` run: short-pool
TTFT covered 78 %, each challenger calibrated ever higher, up to 98 % coverage, lost on pinball and the 34-row
model served the whole run).
"""

from __future__ import annotations

from shared.features import MODEL_NAMES

LEVEL_TOLERANCE = 5e-4
"""Levels are stored rounded to four places in the bundle's entries."""


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

    def observe(self, name: str, coverage: float | None, rows: int, served_level: float | None = None) -> None:
        """The live model's coverage on the ``rows`` that arrived since the previous cycle; ``served_level``: the
        level the live model was calibrated at (None: unknown, taken as the current one). While it is not the
        current level the level holds (anti-windup): a step is only measured once a model calibrated at it serves."""
        if coverage is None or not rows or self.gamma <= 0:
            return
        if served_level is not None and abs(served_level - self._level[name]) > LEVEL_TOLERANCE:
            self._pending[name] = (0.0, 0)
            return
        covered, seen = self._pending[name]
        covered, seen = covered + coverage * rows, seen + rows
        if seen < self.min_rows:
            self._pending[name] = (covered, seen)
            return
        self._pending[name] = (0.0, 0)
        low, high = self.bounds
        self._level[name] = min(high, max(low, self._level[name] + self.gamma * (self.alpha - covered / seen)))
