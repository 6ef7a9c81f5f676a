"""weighted-random: pick with probability ∝ score^power (uniform when every score is 0).

A power above 1 concentrates traffic on the best pods while still spreading concurrent decisions
made from the same (stale) snapshot.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict, Field

from router_client.scheduling.contracts import Candidate


class Params(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    power: float = Field(4.0, description="Exponent applied to scores before sampling.", gt=0)


class WeightedRandom:
    name = "weighted-random"

    def __init__(self, params: Params) -> None:
        self.p = params

    def pick(self, candidates: Sequence[Candidate], scores: Sequence[float], rng: random.Random) -> int:
        power = self.p.power
        weights = [s**power for s in scores]
        total = sum(weights)
        if total <= 0.0:
            return rng.randrange(len(candidates))
        x = rng.random() * total
        acc = 0.0
        for i, w in enumerate(weights):
            acc += w
            if x < acc:
                return i
        return len(weights) - 1
