"""prefix-affinity: keep the pods that likely hold the request's prefix, unless that costs too much TTFT.

With predictions, the gate compares the best predicted TTFT among the affine pods with the best
overall: affinity applies iff ``affine_best ≤ best × (1 + ttft_penalty_ratio) + ttft_penalty_ms``.
Without predictions the gate is a load gap (waiting + running) of at most ``max_queue_gap``.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict, Field

from router_client.scheduling.contracts import Candidate, SchedulingRequest


class Params(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    min_score: float = Field(0.5, description="Best prefix score needed before affinity applies.", ge=0, le=1)
    keep_ratio: float = Field(0.9, description="Affine pods score ≥ keep_ratio × best score.", ge=0, le=1)
    ttft_penalty_ms: float = Field(100.0, description="Absolute TTFT the affinity may cost.", ge=0)
    ttft_penalty_ratio: float = Field(0.25, description="Relative TTFT the affinity may cost.", ge=0)
    max_queue_gap: int = Field(4, description="Load gap allowed without predictions.", ge=0)


def _load(c: Candidate) -> int:
    return c.waiting + c.running


class PrefixAffinity:
    name = "prefix-affinity"

    def __init__(self, params: Params) -> None:
        self.p = params

    def filter(self, request: SchedulingRequest, candidates: Sequence[Candidate]) -> Sequence[Candidate]:
        best = max((c.prefix_score for c in candidates), default=0.0)
        if best < self.p.min_score or best <= 0.0:
            return candidates
        keep = best * self.p.keep_ratio
        affine = [c for c in candidates if c.prefix_score >= keep]
        if len(affine) == len(candidates):
            return candidates
        if all(c.has_prediction for c in candidates):
            overall = min(c.predicted_ttft_ms or 0.0 for c in candidates)
            mine = min(c.predicted_ttft_ms or 0.0 for c in affine)
            ok = mine <= overall * (1.0 + self.p.ttft_penalty_ratio) + self.p.ttft_penalty_ms
        else:
            ok = min(map(_load, affine)) <= min(map(_load, candidates)) + self.p.max_queue_gap
        return affine if ok else candidates
