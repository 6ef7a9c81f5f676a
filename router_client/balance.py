"""Exploration and a bound on load skew inside a pool, so cold pods keep getting traffic (and samples).

Shares are measured with an exponential decay over about ``window`` decisions of the pool. A pod
whose share fell below ``min_share`` × fair share gets the next request of its pool; otherwise an
``exploration`` share of decisions goes to a uniformly random pod.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from router_client.scheduling.contracts import Candidate

_RENORMALISE_AT = 1e12


class ShareTracker:
    """Exponentially decayed dispatch counts of one pool's pods (O(1) per record)."""

    def __init__(self, pods: Sequence[str], window: int) -> None:
        self._decay = 1.0 - 1.0 / window
        self._weights = dict.fromkeys(pods, 0.0)
        self._inc = 1.0
        self._total = 0.0

    def record(self, pod: str) -> None:
        self._inc /= self._decay
        self._weights[pod] = self._weights.get(pod, 0.0) + self._inc
        self._total = self._total + self._inc
        if self._inc > _RENORMALISE_AT:
            scale = 1.0 / self._inc
            self._weights = {p: w * scale for p, w in self._weights.items()}
            self._total *= scale
            self._inc = 1.0

    def share(self, pod: str) -> float:
        return self._weights.get(pod, 0.0) / self._total if self._total > 0 else 0.0

    def forget(self, pod: str) -> None:
        """Drop a pod that left: the others' shares are then measured among themselves."""
        self._total = max(self._total - self._weights.pop(pod, 0.0), 0.0)

    def most_starved(self, candidates: Sequence[Candidate], min_share: float, warmup: float) -> int | None:
        """Index of the candidate furthest below ``min_share`` × fair share, if any (after warm-up)."""
        n = len(candidates)
        if min_share <= 0.0 or n < 2 or self._total < warmup * self._inc:
            return None
        fair = 1.0 / n
        worst, worst_share = None, min_share * fair
        for i, c in enumerate(candidates):
            s = self.share(c.pod)
            if s < worst_share:
                worst, worst_share = i, s
        return worst


class Balancer:
    """Per-pool exploration and anti-starvation overrides."""

    def __init__(self, pools: dict[str, list[str]], exploration: float, min_share: float, window: int) -> None:
        self.exploration = exploration
        self.min_share = min_share
        self._warmup = float(min(window, 50))
        self._trackers = {name: ShareTracker(pods, window) for name, pods in pools.items()}

    def override(self, pool: str, candidates: Sequence[Candidate], rng: random.Random) -> tuple[int, str] | None:
        starved = self._trackers[pool].most_starved(candidates, self.min_share, self._warmup)
        if starved is not None:
            return starved, "anti_starvation"
        if self.exploration > 0.0 and len(candidates) > 1 and rng.random() < self.exploration:
            return rng.randrange(len(candidates)), "explore"
        return None

    def record(self, pool: str, pod: str) -> None:
        self._trackers[pool].record(pod)

    def share(self, pool: str, pod: str) -> float:
        return self._trackers[pool].share(pod)

    def forget(self, pool: str, pod: str) -> None:
        self._trackers[pool].forget(pod)
