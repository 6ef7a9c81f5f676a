"""The contract of a workload family: draw rows of one target with their true conditional quantiles.

A family generates the eleven contract feature columns (``shared.features.FEATURE_FIELDS``;
``pod_type`` as its numeric code) and one observed latency per row for ``target`` ("ttft" or
"tpot"). Analytic families also return the true conditional quantile of every row at the asked
levels; the simulator family cannot (``truth`` is ``None``), so only pinball and coverage apply.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from shared.features import FEATURE_FIELDS

QUANTILES: tuple[float, ...] = (0.5, 0.9, 0.99)
TARGETS: tuple[str, ...] = ("ttft", "tpot")


@dataclass(frozen=True)
class Split:
    """Rows of one target, in arrival (sequence) order."""

    cols: Mapping[str, np.ndarray]
    """The eleven feature columns, float64."""
    y: np.ndarray
    truth: Mapping[float, np.ndarray] | None
    """True conditional quantile per level, or ``None`` when it is not known."""

    def __len__(self) -> int:
        return len(self.y)

    def take(self, index: np.ndarray | slice) -> Split:
        truth = None if self.truth is None else {q: v[index] for q, v in self.truth.items()}
        return Split({k: v[index] for k, v in self.cols.items()}, self.y[index], truth)

    def check(self) -> Split:
        missing = {f.name for f in FEATURE_FIELDS if f.required} - set(self.cols)
        if missing:
            raise ValueError(f"split lacks feature columns {sorted(missing)}")
        if not np.isfinite(self.y).all() or (self.y < 0).any():
            raise ValueError("split has a negative or non-finite latency")
        return self


class Family(Protocol):
    name: str
    analytic: bool
    """True when ``truth`` is known for every row."""

    def train(self, target: str, n: int, seed: int) -> Split:
        """``n`` training rows (the window a trainer would hold), in arrival order."""
        ...

    def test(self, target: str, n: int, seed: int) -> Split:
        """A fresh test set never seen by any fit (``n`` is a minimum for replayed families)."""
        ...


class AnalyticFamily:
    """A family whose train and test rows come from one generator (independent draws per seed)."""

    name = "analytic"
    analytic = True

    def draw(self, target: str, n: int, rng: np.random.Generator) -> Split:
        raise NotImplementedError

    def train(self, target: str, n: int, seed: int) -> Split:
        return self.draw(target, n, np.random.default_rng([seed, 1, _salt(self.name, target)])).check()

    def test(self, target: str, n: int, seed: int) -> Split:
        return self.draw(target, n, np.random.default_rng([seed, 2, _salt(self.name, target)])).check()


def _salt(name: str, target: str) -> int:
    return sum((i + 1) * ord(c) for i, c in enumerate(f"{name}/{target}"))
