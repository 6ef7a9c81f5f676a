"""slo-headroom: keep the pods predicted to meet the request's TTFT and TPOT SLOs (the positive tier).

If none is predicted to meet them, all candidates stay (the negative tier; the scorers then prefer
the least violation). Requests without SLOs, or candidates without predictions, pass unchanged.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict, Field

from router_client.scheduling.contracts import Candidate, SchedulingRequest


class Params(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    margin: float = Field(1.0, description="A pod meets an SLO iff predicted ≤ margin × SLO.", gt=0)


def meets_slo(request: SchedulingRequest, c: Candidate, margin: float = 1.0) -> bool:
    """Predicted TTFT and TPOT within ``margin`` × the request's SLOs (absent SLOs always met)."""
    if request.slo_ttft_ms is not None and (c.predicted_ttft_ms or 0.0) > request.slo_ttft_ms * margin:
        return False
    return request.slo_tpot_ms is None or (c.predicted_tpot_ms or 0.0) <= request.slo_tpot_ms * margin


class SloHeadroom:
    name = "slo-headroom"

    def __init__(self, params: Params) -> None:
        self.p = params

    def filter(self, request: SchedulingRequest, candidates: Sequence[Candidate]) -> Sequence[Candidate]:
        if request.slo_ttft_ms is None and request.slo_tpot_ms is None:
            return candidates
        if not all(c.has_prediction for c in candidates):
            return candidates
        positive = [c for c in candidates if meets_slo(request, c, self.p.margin)]
        return positive or candidates
