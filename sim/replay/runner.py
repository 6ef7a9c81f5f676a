"""Run one policy over a list of replay items and summarise (library entry point of the CLI)."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from sim.cluster.config import ClusterConfig
from sim.cluster.disagg import make_simulation
from sim.cluster.policy import PolicyContext
from sim.cluster.registry import PolicyRegistry, default_registry
from sim.cluster.simulation import Controller, ProgressFn, ReplayItem, ReplayResult, StopFn
from sim.replay.summary import summarize
from sim.scenario import Scenario


def run_policy(
    cfg: ClusterConfig,
    items: Sequence[ReplayItem],
    policy: str,
    seed: int = 0,
    registry: PolicyRegistry | None = None,
    options: Mapping[str, str] | None = None,
    progress: ProgressFn | None = None,
    slo_ttft_ms: float | None = None,
    scenario: Scenario | None = None,
    controller: Controller | None = None,
    stop: StopFn | None = None,
) -> tuple[dict[str, Any], ReplayResult]:
    """Build the policy, replay ``items`` on a fresh cluster, return ``(summary, result)``."""
    reg = registry or default_registry()
    classes = {p.pod_id: p.pod_class for p in cfg.pods()}
    roles = {p.pod_id: p.role for p in cfg.pods()}
    ctx = PolicyContext(seed=seed, pods=cfg.pod_ids(), options=dict(options or {}), pod_classes=classes,
                        pod_roles=roles)
    pol = reg.build(policy, ctx)
    t0, c0 = time.perf_counter(), time.process_time()
    sim = make_simulation(cfg, pol, seed=seed, scenario=scenario, controller=controller)
    result = sim.run(items, progress, stop)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    summary = summarize(result, policy, wall, slo_ttft_ms)
    summary["cpu_s"] = round(cpu, 3)
    status = getattr(pol, "status", None)
    if callable(status):
        summary["policy_status"] = status()
    return summary, result
