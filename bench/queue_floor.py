"""An experiment for issue 23 item 3: predicted-latency whose TTFT answer is never below the time the pod needs to
prefill what is queued ahead plus the request itself.

``predicted-latency-queue-floor`` is the replay's ``predicted-latency`` with one change in the model's raw answer
(before the per-pod correction): ``ttft = max(model, floor)``, ``floor = (prefill_tokens_in_flight + prompt ×
(1 − prefix_score)) / rate`` — router-side features the model already receives. The trees answer a constant (or
less: the unconstrained candidate is not monotone) beyond the largest queue of their window; the floor grows with
the queue, so a pod whose queue has run away can no longer look like the fastest one.

``floor_tokens_per_s`` is the rate: a number (e.g. 15000, the llama3-8b-a100 preset's prefill throughput,
``python -m sim.calibrate``), or ``learned`` (the default): the pool's fastest prefill seen, a high quantile
(``floor_quantile``, 0.99) of ``tokens / actual TTFT`` over the newest completed requests (``floor_window``, 2,000)
whose dispatch-time tokens were at least ``floor_min_tokens`` (2,048) — an upper bound on the pod's rate makes the
floor a lower bound on its TTFT; no floor before ``floor_min_rows`` (50) such requests. Used by
``bench.bench_routing_matrix --policy-module bench.queue_floor`` (and :mod:`bench.routing_variants`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import replace

import numpy as np

from shared.features import FeatureRow
from sim.cluster.policy import Completion, PolicyContext
from sim.cluster.registry import PolicyRegistry
from sim.policies.predicted_latency import PredictedLatencyPolicy

NAME = "predicted-latency-queue-floor"
FLOOR_OPTIONS = ("floor_tokens_per_s", "floor_quantile", "floor_window", "floor_min_tokens", "floor_min_rows")


def queued_tokens(row: Mapping[str, float | int | str]) -> float:
    """Tokens the pod prefills before this request's first token: those in flight and its own uncached ones."""
    uncached = float(row["input_token_length"]) * (1.0 - float(row["prefix_cache_score"]))
    return float(row["prefill_tokens_in_flight"]) + uncached


class LearnedRate:
    """The pool's fastest prefill rate seen (tokens / s), a high quantile over the newest large requests."""

    def __init__(self, quantile: float, window: int, min_tokens: float, min_rows: int) -> None:
        self.quantile, self.min_tokens, self.min_rows = quantile, min_tokens, min_rows
        self._rates: deque[float] = deque(maxlen=window)
        self._cached: float | None = None

    def observe(self, tokens: float, ttft_ms: float) -> None:
        if tokens >= self.min_tokens and ttft_ms > 0.0:
            self._rates.append(tokens / (ttft_ms / 1e3))
            self._cached = None

    @property
    def rate(self) -> float | None:
        if len(self._rates) < self.min_rows:
            return None
        if self._cached is None:
            self._cached = float(np.quantile(np.fromiter(self._rates, float), self.quantile))
        return self._cached


class QueueFloorPolicy(PredictedLatencyPolicy):
    def __init__(self, ctx: PolicyContext) -> None:
        options = dict(ctx.options)
        mine = {k: options.pop(k) for k in FLOOR_OPTIONS if k in options}
        rate = mine.get("floor_tokens_per_s", "learned")
        self.fixed_rate = None if rate == "learned" else float(rate)
        self.learned = LearnedRate(float(mine.get("floor_quantile", "0.99")), int(mine.get("floor_window", "2000")),
                                   float(mine.get("floor_min_tokens", "2048")), int(mine.get("floor_min_rows", "50")))
        super().__init__(replace(ctx, options=options), dual=False)
        self.name = NAME

    @property
    def tokens_per_s(self) -> float | None:
        return self.fixed_rate if self.fixed_rate is not None else self.learned.rate

    def floor_ms(self, row: FeatureRow) -> float:
        rate = self.tokens_per_s
        return 0.0 if rate is None else queued_tokens(row) / rate * 1e3

    def _predict(self, pool: str, rows: Sequence[FeatureRow]) -> list[tuple[float, float]] | None:
        raw = super()._predict(pool, rows)
        if raw is None:
            return None
        return [(max(ttft, self.floor_ms(row)), tpot) for (ttft, tpot), row in zip(raw, rows, strict=True)]

    def on_complete(self, completion: Completion) -> None:
        super().on_complete(completion)
        sample = completion.sample
        self.learned.observe(queued_tokens(sample), float(sample["actual_ttft_ms"]))

    def status(self) -> dict[str, object]:
        rate = self.tokens_per_s
        return {**super().status(), "floor_tokens_per_s": None if rate is None else round(rate)}


def register_policies(registry: PolicyRegistry) -> None:
    registry.register(NAME, QueueFloorPolicy, replace=True)
