"""queue-scorer (llm-d's ``queue-scorer``): prefer the shortest scraped waiting queue.

score = (max − waiting) / (max − min) over the candidates (min-max normalised: the shortest queue
scores 1, the longest 0); all queues equal → 1 for every candidate.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict

from router_client.scheduling.contracts import Candidate, SchedulingRequest
from router_client.scheduling.scorers.minmax import fewest_best


class Params(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class QueueDepth:
    name = "queue-scorer"

    def __init__(self, params: Params) -> None:
        self.p = params

    def score(self, request: SchedulingRequest, candidates: Sequence[Candidate]) -> Sequence[float]:
        return fewest_best([c.waiting for c in candidates])
