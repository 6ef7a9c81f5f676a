"""kv-cache-utilization-scorer (llm-d's name): prefer free KV cache — score = 1 − scraped KV usage."""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict

from router_client.scheduling.contracts import Candidate, SchedulingRequest


class Params(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class KvUtilization:
    name = "kv-cache-utilization-scorer"

    def __init__(self, params: Params) -> None:
        self.p = params

    def score(self, request: SchedulingRequest, candidates: Sequence[Candidate]) -> Sequence[float]:
        return [1.0 - c.kv_cache for c in candidates]
