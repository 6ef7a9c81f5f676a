"""Predicted-latency variants for the routing matrix (issue 23, item 3): the replay's ``predicted-latency`` with
one or more of its ``--policy-opt`` options changed, each under its own name, so one matrix run compares them.

``python -m bench.bench_routing_matrix --policy-module bench.routing_variants --policies
least-queue,predicted-latency,pl-no-explore,...`` — the names and their options are :data:`VARIANTS`. A variant's
options are defaults: options given to the policy (``ctx.options``) win.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from types import MappingProxyType

from bench import queue_floor
from bench.queue_floor import QueueFloorPolicy
from sim.cluster.policy import PolicyContext
from sim.cluster.registry import PolicyRegistry
from sim.policies.predicted_latency import PredictedLatencyPolicy

VARIANTS: Mapping[str, Mapping[str, str]] = MappingProxyType({
    "pl-no-explore": {"exploration": "0"},
    "pl-no-balance": {"exploration": "0", "min_share": "0"},
    "pl-max": {"picker": "max"},
    "pl-power8": {"power": "8"},
    "pl-alpha95": {"alpha": "0.95"},
    "pl-ttft-only": {"ttft_weight": "1.0"},
    "pl-no-affinity": {"prefix_affinity": "false"},
})
"""Variant name → the options it sets (see :class:`sim.policies.options.ReplayOptions`)."""

FLOOR_VARIANTS: Mapping[str, Mapping[str, str]] = MappingProxyType({
    "plqf-15k": {"floor_tokens_per_s": "15000"},
    "plqf-no-explore": {"floor_tokens_per_s": "15000", "exploration": "0"},
})
"""The same on :mod:`bench.queue_floor`'s policy (its TTFT answer never below the queued prefill)."""


def variant(name: str, options: Mapping[str, str]) -> Callable[[PolicyContext], PredictedLatencyPolicy]:
    def build(ctx: PolicyContext) -> PredictedLatencyPolicy:
        policy = PredictedLatencyPolicy(replace(ctx, options={**options, **ctx.options}), dual=False)
        policy.name = name
        return policy
    return build


def floor_variant(name: str, options: Mapping[str, str]) -> Callable[[PolicyContext], QueueFloorPolicy]:
    def build(ctx: PolicyContext) -> QueueFloorPolicy:
        policy = QueueFloorPolicy(replace(ctx, options={**options, **ctx.options}))
        policy.name = name
        return policy
    return build


def register_policies(registry: PolicyRegistry) -> None:
    """Every variant, and :mod:`bench.queue_floor`'s policy itself."""
    queue_floor.register_policies(registry)
    for name, options in VARIANTS.items():
        registry.register(name, variant(name, options), replace=True)
    for name, options in FLOOR_VARIANTS.items():
        registry.register(name, floor_variant(name, options), replace=True)
