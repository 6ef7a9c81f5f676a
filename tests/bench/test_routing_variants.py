"""bench.routing_variants: each variant is predicted-latency with its options, under its own name."""

from __future__ import annotations

from bench.queue_floor import QueueFloorPolicy
from bench.routing_variants import FLOOR_VARIANTS, VARIANTS, register_policies
from sim.cluster.policy import PolicyContext
from sim.cluster.registry import PolicyRegistry
from sim.policies.predicted_latency import PredictedLatencyPolicy

PODS = [(f"pod-{i}", "pod") for i in range(4)]


def _build(name: str, **options: str) -> PredictedLatencyPolicy:
    registry = PolicyRegistry()
    register_policies(registry)
    policy = registry.build(name, PolicyContext(seed=0, pods=PODS, options=options))
    assert isinstance(policy, PredictedLatencyPolicy)
    return policy


def test_every_variant_builds_under_its_name_with_its_options() -> None:
    for name, options in {**VARIANTS, **FLOOR_VARIANTS}.items():
        policy = _build(name)
        assert isinstance(policy, QueueFloorPolicy) == (name in FLOOR_VARIANTS)
        assert policy.name == name
        for key, value in options.items():
            if key == "floor_tokens_per_s":
                assert isinstance(policy, QueueFloorPolicy) and policy.tokens_per_s == float(value)
                continue
            got = getattr(policy.opts, key)
            assert str(got).lower() == value.lower() or float(got) == float(value), (name, key, got)


def test_variant_options_reach_the_decision_core_and_given_options_win() -> None:
    assert _build("pl-no-explore").core.balancer.exploration == 0.0
    assert _build("pl-no-balance").core.balancer.min_share == 0.0
    assert _build("predicted-latency").core.balancer.exploration == 0.02  # the baseline is untouched
    assert _build("pl-no-explore", exploration="0.1").core.balancer.exploration == 0.1
