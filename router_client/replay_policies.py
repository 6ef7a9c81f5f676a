"""Registers the router-client replay policies with ``sim.replay``:
``python -m sim.replay --policy-module router_client.replay_policies --policy predicted-latency``.

``round-robin`` and ``least-queue`` are sim built-ins; this module adds ``predicted-latency``
(one pool, the full pipeline with in-process retrained models) and ``dual-pool`` (pool classifier
+ the same pipeline per pool; pools from ``--pools short:6,long:2`` or ``--cluster-config``).
"""

from __future__ import annotations

from router_client.replay.policy import dual_pool, predicted_latency
from sim.cluster.registry import PolicyRegistry

POLICIES = {"predicted-latency": predicted_latency, "dual-pool": dual_pool}


def register_policies(registry: PolicyRegistry) -> None:
    """Called by ``sim.replay`` for ``--policy-module router_client.replay_policies``."""
    for name, factory in POLICIES.items():
        registry.register(name, factory, replace=True)
