"""SLO admission: a sheddable request that no candidate is predicted to serve within its SLO is shed.

Only predictions can justify shedding: without them (fallback) a request is always admitted.
Non-sheddable requests are never shed; they go to the least-bad pod. With ``slo.admission_quantile``
configured the judgement uses that quantile's predictions (e.g. p99), routing keeps the primary one.
"""

from __future__ import annotations

from collections.abc import Sequence

from router_client.scheduling.contracts import Candidate, SchedulingRequest
from router_client.scheduling.filters.slo_headroom import meets_slo


def shed_reason(request: SchedulingRequest, candidates: Sequence[Candidate]) -> str | None:
    """``None`` to admit, else ``"<code> <details>"`` with code ``slo_ttft`` | ``slo_tpot`` | ``slo_ttft_tpot``."""
    if not request.sheddable or (request.slo_ttft_ms is None and request.slo_tpot_ms is None):
        return None
    if not candidates or not all(c.has_prediction for c in candidates):
        return None
    candidates = [c.admission for c in candidates]
    if any(meets_slo(request, c) for c in candidates):
        return None
    best_ttft = min(c.predicted_ttft_ms or 0.0 for c in candidates)
    best_tpot = min(c.predicted_tpot_ms or 0.0 for c in candidates)
    ttft_bad = request.slo_ttft_ms is not None and best_ttft > request.slo_ttft_ms
    tpot_bad = request.slo_tpot_ms is not None and best_tpot > request.slo_tpot_ms
    code = "slo_ttft_tpot" if ttft_bad and tpot_bad else "slo_ttft" if ttft_bad else "slo_tpot"
    if not ttft_bad and not tpot_bad:
        code = "slo_ttft_tpot"  # each SLO met somewhere, never both on one pod
    return (f"{code} best_predicted_ttft_ms={best_ttft:.1f} slo_ttft_ms={request.slo_ttft_ms} "
            f"best_predicted_tpot_ms={best_tpot:.2f} slo_tpot_ms={request.slo_tpot_ms}")
