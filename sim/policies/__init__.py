"""Replay policies that plug the router's pipeline and the trainer's fit into the virtual-time loop.

Built into the sim registry (``python -m sim.replay --policy predicted-latency,dual-pool,load-prefix``
needs no extra flag). ``load-prefix`` is the llm-d router's default profile (queue 2, KV 2, prefix 3)
on the router's scheduling engine, without a predictor: the baseline predicted latency must beat.
They use ``router_client``'s public decision core and ``trainer``'s fitting code as libraries; the
product packages never import the simulator. Imported lazily by the registry so a plain
``round-robin`` replay does not load XGBoost.
"""

from __future__ import annotations

import importlib

from sim.cluster.policy import Policy, PolicyContext, PolicyFactory

_FACTORIES: dict[str, tuple[str, str]] = {
    "predicted-latency": ("sim.policies.predicted_latency", "predicted_latency"),
    "dual-pool": ("sim.policies.predicted_latency", "dual_pool"),
    "load-prefix": ("sim.policies.load_prefix", "load_prefix"),
    "dual-pool-round-robin": ("sim.policies.pool_round_robin", "DualPoolRoundRobin"),
}


def _lazy(module: str, attr: str) -> PolicyFactory:
    def build(ctx: PolicyContext) -> Policy:
        factory: PolicyFactory = getattr(importlib.import_module(module), attr)
        return factory(ctx)
    return build


PIPELINE_POLICIES: dict[str, PolicyFactory] = {name: _lazy(*where) for name, where in _FACTORIES.items()}
