"""round-robin: the candidates in turn, ignoring scores (the replay's ``round-robin`` baseline as a picker).

The picker keeps one counter per instance (one scheduler = one router): decision ``k`` takes candidate
``k mod len(candidates)``. Candidates come in the pool's pod order, so with a fixed pod list this is exactly
pod 0, 1, …, n − 1, 0, …; a pod dropped for a stale scrape only shortens the cycle. Use it with no filters,
``exploration`` 0 and ``min_share`` 0 (those would override the turn).
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict

from router_client.scheduling.contracts import Candidate


class Params(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class RoundRobin:
    name = "round-robin"

    def __init__(self, params: Params) -> None:
        self.p = params
        self._next = 0

    def pick(self, candidates: Sequence[Candidate], scores: Sequence[float], rng: random.Random) -> int:
        index = self._next % len(candidates)
        self._next += 1
        return index
