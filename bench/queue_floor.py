"""An experiment for issue 23 item 3, not a product change: predicted-latency whose TTFT answer is never below
the time the pod needs to prefill what is queued ahead plus the request itself.

``predicted-latency-queue-floor`` is the replay's ``predicted-latency`` with one change in the model's raw answer
(before the per-pod correction): ``ttft = max(model, floor)``, ``floor = (prefill_tokens_in_flight + prompt ×
(1 − prefix_score)) / floor_tokens_per_s`` — router-side features the model already receives. The trees answer a
constant beyond the largest queue of their window; the floor grows with the queue. ``floor_tokens_per_s``
(default 15,000: the llama3-8b-a100 preset's prefill throughput, ``python -m sim.calibrate``) is a constant here; a
product version would learn it per pod class. Used by ``bench.bench_routing_matrix --policy-module
bench.queue_floor``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from shared.features import FeatureRow
from sim.cluster.policy import PolicyContext
from sim.cluster.registry import PolicyRegistry
from sim.policies.predicted_latency import PredictedLatencyPolicy

NAME = "predicted-latency-queue-floor"


class QueueFloorPolicy(PredictedLatencyPolicy):
    def __init__(self, ctx: PolicyContext) -> None:
        options = dict(ctx.options)
        self.tokens_per_s = float(options.pop("floor_tokens_per_s", "15000"))
        super().__init__(replace(ctx, options=options), dual=False)
        self.name = NAME

    def floor_ms(self, row: FeatureRow) -> float:
        uncached = float(row["input_token_length"]) * (1.0 - float(row["prefix_cache_score"]))
        return (float(row["prefill_tokens_in_flight"]) + uncached) / self.tokens_per_s * 1e3

    def _predict(self, pool: str, rows: Sequence[FeatureRow]) -> list[tuple[float, float]] | None:
        raw = super()._predict(pool, rows)
        if raw is None:
            return None
        return [(max(ttft, self.floor_ms(row)), tpot) for (ttft, tpot), row in zip(raw, rows, strict=True)]


def register_policies(registry: PolicyRegistry) -> None:
    registry.register(NAME, QueueFloorPolicy, replace=True)
