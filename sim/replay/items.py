"""Turn trace rows into replay items (request views with synthetic prefix identity)."""

from __future__ import annotations

from collections.abc import Sequence

from sim.cluster.policy import RequestView
from sim.cluster.simulation import ReplayItem
from sim.workload.sessions import SessionModel, SessionModelConfig
from sim.workload.trace import TraceRequest


def build_items(
    trace: Sequence[TraceRequest],
    seed: int = 0,
    sessions: SessionModelConfig | None = None,
    expose_output_length: bool = True,
    slo_ttft_ms: float | None = None,
    slo_tpot_ms: float | None = None,
) -> list[ReplayItem]:
    model = SessionModel(sessions or SessionModelConfig(), seed=seed)
    items = []
    for r in trace:
        key, hashes = model.assign(r.arrival_s, r.prompt_tokens, r.output_tokens)
        view = RequestView(
            request_id=r.request_id,
            arrival_s=r.arrival_s,
            prompt_tokens=r.prompt_tokens,
            expected_output_tokens=r.output_tokens if expose_output_length else None,
            max_output_tokens=None,
            prefix_key=key,
            block_hashes=hashes,
            slo_ttft_ms=slo_ttft_ms,
            slo_tpot_ms=slo_tpot_ms,
        )
        items.append(ReplayItem(view, r.output_tokens))
    return items
