"""max: the highest score; ties broken uniformly at random."""

from __future__ import annotations

import random
from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict

from router_client.scheduling.contracts import Candidate


class Params(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class MaxScore:
    name = "max"

    def __init__(self, params: Params) -> None:
        self.p = params

    def pick(self, candidates: Sequence[Candidate], scores: Sequence[float], rng: random.Random) -> int:
        top = max(scores)
        ties = [i for i, s in enumerate(scores) if s >= top - 1e-12]
        return ties[0] if len(ties) == 1 else ties[rng.randrange(len(ties))]
