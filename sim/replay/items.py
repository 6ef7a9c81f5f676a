"""Turn trace rows into replay items: request views with synthetic prefix identity and a client
``max_tokens`` drawn by a :class:`MaxTokensPolicy`; the true output length stays hidden from the
policy unless ``expose_output_length`` (an oracle) is set."""

from __future__ import annotations

from collections.abc import Sequence

from sim.cluster.policy import RequestView
from sim.cluster.simulation import ReplayItem
from sim.workload.budgets import DEFAULT_MAX_TOKENS_POLICY, MaxTokensPolicy
from sim.workload.sessions import SessionModel, SessionModelConfig
from sim.workload.trace import TraceRequest


def build_items(
    trace: Sequence[TraceRequest],
    seed: int = 0,
    sessions: SessionModelConfig | None = None,
    expose_output_length: bool = False,
    slo_ttft_ms: float | None = None,
    slo_tpot_ms: float | None = None,
    max_tokens: MaxTokensPolicy | None = None,
) -> list[ReplayItem]:
    """``expose_output_length`` puts the generated length in ``expected_output_tokens`` (oracle)."""
    model = SessionModel(sessions or SessionModelConfig(), seed=seed)
    budget = (max_tokens or MaxTokensPolicy.parse(DEFAULT_MAX_TOKENS_POLICY))
    draw = budget.sampler([r.output_tokens for r in trace], seed)
    items = []
    for r in trace:
        cap = draw()
        output = r.output_tokens if cap is None else min(r.output_tokens, cap)
        key, hashes = model.assign(r.arrival_s, r.prompt_tokens, output)
        view = RequestView(
            request_id=r.request_id,
            arrival_s=r.arrival_s,
            prompt_tokens=r.prompt_tokens,
            expected_output_tokens=output if expose_output_length else None,
            max_output_tokens=cap,
            prefix_key=key,
            block_hashes=hashes,
            slo_ttft_ms=slo_ttft_ms,
            slo_tpot_ms=slo_tpot_ms,
        )
        items.append(ReplayItem(view, output))
    return items
