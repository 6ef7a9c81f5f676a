"""The router's state as one JSON-ready document (the proxy's ``GET /status``; a status page reads it).

Per pool: fallbacks and sheds by reason, the pool-wide drift series, discovery (name, last outcome; null for a
static pool), the live models its predictors serve (``model``: bundle version, per model candidate and physical
base, read in the background by ``router_client.model_watch``; null without predictors), and per pod (serving,
joining and leaving ones, with their ``state``) its configured class, recent traffic share, routed count,
in-flight requests, scraped load and age, and per target the correction factor next to the drift series
(predicted vs measured means, coverage of the acted-on and of the raw prediction, pinball, alarm). Built on
demand from snapshots; nothing here is on the hot path.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from router_client.config import PoolConfig, RouterConfig
from router_client.correction import TARGETS, PodCorrection
from router_client.drift import POOL_WIDE, DriftMonitor, DriftState
from router_client.endpoints import NEVER_SCRAPED, EndpointState
from router_client.membership import Membership
from shared.timefmt import rfc3339


@dataclass(frozen=True)
class StatusSources:
    """What the status is read from (the router hands its parts over; nothing is copied)."""

    config: RouterConfig
    correction: PodCorrection
    drift: DriftMonitor
    endpoints: EndpointState
    share: Callable[[str, str], float]
    routed: Mapping[str, int]
    fallbacks: Mapping[tuple[str, str], float]
    sheds: Mapping[tuple[str, str], float]
    members: Membership
    discovery: Callable[[str], dict[str, Any] | None]
    model: Callable[[str], dict[str, Any] | None]


def _drift(state: DriftState | None, now: float) -> dict[str, Any]:
    if state is None:
        return {"pairs": 0}
    outside = None if state.outside_since is None else round(now - state.outside_since, 3)
    return {"pairs": state.pairs, "weight": round(state.weight, 3), "predicted_mean_ms": state.predicted_ms,
            "measured_mean_ms": state.actual_ms, "coverage": state.coverage, "model_coverage": state.model_coverage,
            "pinball_ms": state.pinball_ms, "model_pinball_ms": state.model_pinball_ms, "mape": state.mape,
            "alarm": state.alarm, "out_of_band_for_s": outside}


def _by_reason(counts: Mapping[tuple[str, str], float], pool: str) -> dict[str, int]:
    return {reason: int(n) for (p, reason), n in sorted(counts.items()) if p == pool}


def _pod(src: StatusSources, pool: PoolConfig, pod: str, now: float) -> dict[str, Any]:
    scraped = src.endpoints.snapshot.get(pod, NEVER_SCRAPED)
    targets = {}
    for target in TARGETS:
        factor = src.correction.state(pod, target, now)
        targets[target] = {"correction": factor.factor, "correction_samples": factor.samples,
                           **_drift(src.drift.state(pool.name, pod, target), now)}
    return {"url": pod, "state": src.members.state(pod), "pod_class": pool.class_of(pod),
            "share": round(src.share(pool.name, pod), 4), "routed": src.routed.get(pod, 0),
            "in_flight": src.endpoints.running(pod), "waiting": scraped.waiting, "kv_cache": scraped.kv_cache,
            "metrics_age_s": round(min(src.endpoints.staleness(pod), 1e9), 3), **targets}


def build_status(src: StatusSources, now: float) -> dict[str, Any]:
    cfg = src.config
    pools = []
    for pool in cfg.pools:
        pools.append({
            "name": pool.name, "pod_type": pool.pod_type,
            "fallbacks": _by_reason(src.fallbacks, pool.name), "shed": _by_reason(src.sheds, pool.name),
            **{target: _drift(src.drift.state(pool.name, POOL_WIDE, target), now) for target in TARGETS},
            "discovery": src.discovery(pool.name), "model": src.model(pool.name),
            "pods": [_pod(src, pool, pod, now) for pod in src.members.pool(pool.name).members()],
        })
    return {"generated_at": rfc3339(), "prediction_quantile": cfg.prediction_quantile,
            "correction": cfg.correction.model_dump(), "drift": cfg.drift.model_dump(), "pools": pools}
