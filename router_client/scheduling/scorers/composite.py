"""composite: the fallback when predictions are missing — low KV usage, short queue, prefix hits.

score = (w_kv·(1 − kv) + w_queue·(1 − load / max load) + w_prefix·prefix) / Σw, with
load = scraped waiting + router-side running.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict, Field

from router_client.scheduling.contracts import Candidate, SchedulingRequest


class Params(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    kv_weight: float = Field(1.0, description="Weight of free KV cache.", ge=0)
    queue_weight: float = Field(2.0, description="Weight of a short queue.", ge=0)
    prefix_weight: float = Field(1.0, description="Weight of the prefix-cache score.", ge=0)


class Composite:
    name = "composite"

    def __init__(self, params: Params) -> None:
        self.p = params
        self._total = max(params.kv_weight + params.queue_weight + params.prefix_weight, 1e-9)

    def score(self, request: SchedulingRequest, candidates: Sequence[Candidate]) -> Sequence[float]:
        loads = [c.waiting + c.running for c in candidates]
        top = max(loads, default=0)
        p = self.p
        return [(p.kv_weight * (1.0 - c.kv_cache) + p.queue_weight * (1.0 - load / top if top else 1.0)
                 + p.prefix_weight * c.prefix_score) / self._total for c, load in zip(candidates, loads, strict=True)]
