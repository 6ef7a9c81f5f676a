"""Cluster replay building blocks: policy contract, registry, built-in policies, simulation."""

from sim.cluster.config import ClusterConfig, PodGroupSpec, PodPlan, PoolSpec, single_pool
from sim.cluster.policy import (
    FEATURE_FIELDS,
    TRAINING_FIELDS,
    Completion,
    Decision,
    PodSnapshot,
    Policy,
    PolicyContext,
    PolicyFactory,
    RequestView,
    ScrapedMetrics,
)
from sim.cluster.registry import PolicyRegistry, available_policies, default_registry, register_policy
from sim.cluster.simulation import ClusterSimulation, ReplayItem, ReplayResult

__all__ = [
    "FEATURE_FIELDS",
    "TRAINING_FIELDS",
    "ClusterConfig",
    "ClusterSimulation",
    "Completion",
    "Decision",
    "PodSnapshot",
    "Policy",
    "PolicyContext",
    "PolicyFactory",
    "PodGroupSpec",
    "PodPlan",
    "PolicyRegistry",
    "PoolSpec",
    "ReplayItem",
    "ReplayResult",
    "RequestView",
    "ScrapedMetrics",
    "available_policies",
    "default_registry",
    "register_policy",
    "single_pool",
]
