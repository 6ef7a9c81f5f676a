"""prefix-cache-scorer (llm-d's name): prefer prefix hits — score = the router-side prefix score, i.e.
the share of the request's prompt blocks the pod has seen (llm-d's match ratio, length weight 0)."""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict

from router_client.scheduling.contracts import Candidate, SchedulingRequest


class Params(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class PrefixCache:
    name = "prefix-cache-scorer"

    def __init__(self, params: Params) -> None:
        self.p = params

    def score(self, request: SchedulingRequest, candidates: Sequence[Candidate]) -> Sequence[float]:
        return [c.prefix_score for c in candidates]
