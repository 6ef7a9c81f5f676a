"""Apply a :class:`PodChange` to an engine (shared by the cluster replay and the pod servers)."""

from __future__ import annotations

from typing import Any

from sim.engine.engine import Engine
from sim.engine.sequence import Sequence
from sim.scenario.change import PodChange


def apply_change(engine: Engine, change: PodChange, now: float) -> list[Sequence]:
    """Apply ``change`` at virtual time ``now`` (the engine has run every step starting before it).

    Order inside one change: restore, speed, KV capacity, prefix flush, fail. Returns the requests
    lost by a ``fail`` (the caller tells their clients).
    """
    cfg = engine.cfg
    change.check(cfg, "change")
    if change.restore:
        engine.restore(now)
    if change.speed_factor is not None:
        engine.step_model.speed_factor = change.speed_factor
    blocks = change.kv_target(cfg)
    if blocks is not None:
        engine.resize_kv(blocks)
    if change.flush_prefix_cache:
        engine.pool.flush()
    if change.fail:
        return engine.fail(now)
    return []


def pod_condition(engine: Engine) -> dict[str, Any]:
    """The scenario-visible state of one pod (``GET /admin/scenario``)."""
    return {
        "speed_factor": engine.step_model.speed_factor,
        "failed": engine.failed,
        "kv_blocks": engine.pool.num_blocks,
        "kv_blocks_configured": engine.cfg.num_gpu_blocks,
        "kv_usage": round(engine.kv_usage, 6),
        "cached_blocks": engine.pool.num_cached,
    }
