"""latency-headroom: prefer the pods with the lowest predicted TTFT and TPOT.

Each latency scores ``(best + eps) / (value + eps)`` relative to the best candidate (1 for the best,
½ for one predicted twice as slow); with an SLO the headroom ``1 − value / SLO`` is averaged in,
so within the positive tier pods far from the SLO are preferred. The two are blended by
``ttft_weight``. Candidates without predictions score 0.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict, Field

from router_client.scheduling.contracts import Candidate, SchedulingRequest


class Params(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    ttft_weight: float = Field(0.8, description="Weight of TTFT against TPOT (0..1).", ge=0, le=1)
    eps_ms: float = Field(1.0, description="Added to every latency before taking ratios.", gt=0)


def _relative(values: Sequence[float], slo: float | None, eps: float) -> list[float]:
    best = min(values)
    out = [(best + eps) / (v + eps) for v in values]
    if slo is not None:
        out = [0.5 * r + 0.5 * max(0.0, 1.0 - v / slo) for r, v in zip(out, values, strict=True)]
    return out


class LatencyHeadroom:
    name = "latency-headroom"

    def __init__(self, params: Params) -> None:
        self.p = params

    def score(self, request: SchedulingRequest, candidates: Sequence[Candidate]) -> Sequence[float]:
        known = [c for c in candidates if c.has_prediction]
        if not known:
            return [0.0] * len(candidates)
        ttft = _relative([c.predicted_ttft_ms or 0.0 for c in known], request.slo_ttft_ms, self.p.eps_ms)
        tpot = _relative([c.predicted_tpot_ms or 0.0 for c in known], request.slo_tpot_ms, self.p.eps_ms)
        w = self.p.ttft_weight
        scores = [w * a + (1.0 - w) * b for a, b in zip(ttft, tpot, strict=True)]
        if len(known) == len(candidates):
            return scores
        by_pod = {c.pod: s for c, s in zip(known, scores, strict=True)}
        return [by_pod.get(c.pod, 0.0) for c in candidates]
