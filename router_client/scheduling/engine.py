"""The scheduling engine: filters in order, weighted clamped scores, one pick — or "no endpoint".

Scorers for predictions run when every remaining candidate has a prediction; otherwise the
fallback scorers run. Scores are clamped to [0, 1] (non-finite → 0) before weighting.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass

from router_client.config import SchedulerConfig
from router_client.scheduling.contracts import Candidate, Filter, Picker, SchedulingRequest, Scorer
from router_client.scheduling.registry import PluginRegistry, default_registry


@dataclass(frozen=True)
class ScheduleResult:
    index: int | None
    """Index into the candidates given to :meth:`Scheduler.schedule`; None = no endpoint."""
    reason: str
    scores: tuple[float, ...] = ()


def _clamp(x: float) -> float:
    if not math.isfinite(x):
        return 0.0
    return 0.0 if x < 0.0 else 1.0 if x > 1.0 else x


class Scheduler:
    def __init__(self, filters: Sequence[Filter], scorers: Sequence[tuple[Scorer, float]],
                 fallback_scorers: Sequence[tuple[Scorer, float]], picker: Picker) -> None:
        self.filters = tuple(filters)
        self.scorers = tuple(scorers)
        self.fallback_scorers = tuple(fallback_scorers)
        self.picker = picker

    @classmethod
    def from_config(cls, cfg: SchedulerConfig, registry: PluginRegistry | None = None) -> Scheduler:
        reg = registry or default_registry()
        return cls([reg.filter(s) for s in cfg.filters], [(reg.scorer(s), s.weight) for s in cfg.scorers],
                   [(reg.scorer(s), s.weight) for s in cfg.fallback_scorers], reg.picker(cfg.picker))

    def schedule(self, request: SchedulingRequest, candidates: Sequence[Candidate],
                 rng: random.Random) -> ScheduleResult:
        remaining: Sequence[Candidate] = candidates
        for f in self.filters:
            remaining = f.filter(request, remaining)
            if not remaining:
                return ScheduleResult(None, f"no_endpoint:{f.name}")
        predicted = all(c.has_prediction for c in remaining)
        scorers = self.scorers if predicted else self.fallback_scorers
        totals = [0.0] * len(remaining)
        for scorer, weight in scorers:
            for i, s in enumerate(scorer.score(request, remaining)):
                totals[i] += weight * (s if 0.0 <= s <= 1.0 else _clamp(s))
        picked = self.picker.pick(remaining, totals, rng)
        if remaining is candidates:
            index = picked
        else:
            chosen = remaining[picked]
            index = next(i for i, c in enumerate(candidates) if c is chosen)
        return ScheduleResult(index, "predicted" if predicted else "composite", tuple(totals))
