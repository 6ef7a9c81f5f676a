"""bench.queue_floor: the TTFT floor from the queued prefill, at a fixed or a learned rate."""

from __future__ import annotations

import pytest

from bench.queue_floor import LearnedRate, QueueFloorPolicy, queued_tokens
from sim.cluster.policy import PolicyContext

PODS = [(f"pod-{i}", "pod") for i in range(2)]


def _row(prompt: int, prefix: float, in_flight: int) -> dict[str, float | int | str]:
    return {"input_token_length": prompt, "prefix_cache_score": prefix, "prefill_tokens_in_flight": in_flight}


def test_queued_tokens_are_those_in_flight_and_the_uncached_part_of_the_prompt() -> None:
    assert queued_tokens(_row(1000, 0.25, 5000)) == 5750.0


def test_the_learned_rate_is_a_high_quantile_of_large_requests_only_after_enough_rows() -> None:
    rate = LearnedRate(quantile=0.5, window=3, min_tokens=2048, min_rows=2)
    rate.observe(1000, 1.0)  # too small: ignored
    rate.observe(3000, 1000.0)  # 3,000 tok/s
    assert rate.rate is None
    rate.observe(4000, 500.0)  # 8,000 tok/s
    assert rate.rate == pytest.approx(5500.0)
    rate.observe(10_000, 1000.0)
    rate.observe(10_000, 1000.0)  # the window keeps the newest 3: 8k, 10k, 10k
    assert rate.rate == pytest.approx(10_000.0)


def test_the_floor_raises_only_answers_below_it() -> None:
    policy = QueueFloorPolicy(PolicyContext(seed=0, pods=PODS, options={"floor_tokens_per_s": "10000"}))
    assert policy.tokens_per_s == 10_000.0
    assert policy.floor_ms(_row(1000, 0.0, 9000)) == pytest.approx(1000.0)  # type: ignore[arg-type]
    learned = QueueFloorPolicy(PolicyContext(seed=0, pods=PODS))
    assert learned.tokens_per_s is None and learned.floor_ms(_row(1000, 0.0, 9000)) == 0.0  # type: ignore[arg-type]
    assert learned.status()["floor_tokens_per_s"] is None


def test_model_answers_below_the_floor_are_raised_to_it(monkeypatch: pytest.MonkeyPatch) -> None:
    from sim.policies.predicted_latency import PredictedLatencyPolicy

    monkeypatch.setattr(PredictedLatencyPolicy, "_predict", lambda self, pool, rows: [(100.0, 7.0), (3000.0, 8.0)])
    policy = QueueFloorPolicy(PolicyContext(seed=0, pods=PODS, options={"floor_tokens_per_s": "10000"}))
    rows = [_row(1000, 0.0, 9000), _row(1000, 0.0, 9000)]
    assert policy._predict("all", rows) == [(1000.0, 7.0), (3000.0, 8.0)]  # type: ignore[arg-type]
