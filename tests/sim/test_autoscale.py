"""The KEDA-like autoscaler in the replay: scales up on queued requests after the start-up delay, scales
down after the stabilization window, drains instead of dropping, and pays only for pods that are on."""

from __future__ import annotations

import random

import pytest

from sim.cluster.autoscale import DRAINING, OFF, SERVING, STARTING, AutoscaleConfig, Autoscaler
from sim.cluster.config import single_pool
from sim.cluster.policy import RequestView
from sim.cluster.simulation import ReplayItem
from sim.engine.config import EngineConfig
from sim.engine.errors import ConfigError
from sim.replay.runner import run_policy

CFG = AutoscaleConfig(poll_interval_s=2.0, target_waiting_per_pod=2.0, startup_s=5.0,
                      scale_down_stabilization_s=10.0, min_pods=1)


def bursty(seed: int = 0) -> list[ReplayItem]:
    """60 s at 3 req/s, 20 s at 40 req/s, 60 s at 3 req/s; 1,000..2,000-token prompts."""
    rng = random.Random(seed)
    out, t, i = [], 0.0, 0
    for rate, until in ((3.0, 60.0), (40.0, 80.0), (3.0, 140.0)):
        while t < until:
            t += rng.expovariate(rate)
            prompt, output = rng.randint(1000, 2000), rng.randint(50, 150)
            view = RequestView(f"r{i}", t, prompt, None, 256, f"k{i}", tuple(rng.getrandbits(62)
                                                                              for _ in range(prompt // 16)))
            out.append(ReplayItem(view, output))
            i += 1
    return out


def _serving_intervals(events: list[dict], pods: list[str], start: float, initial: int) -> dict[str, list]:
    """Per pod, the [from, to) intervals it was routable."""
    spans: dict[str, list] = {p: [] for p in pods}
    since = {p: (start if i < initial else None) for i, p in enumerate(pods)}
    for ev in events:
        pod, at, state = ev["pod"], ev["at_s"], ev["state"]
        if state == SERVING:
            since[pod] = at
        elif state in (DRAINING, OFF) and since[pod] is not None:
            spans[pod].append((since[pod], at))
            since[pod] = None
    for pod, s in since.items():
        if s is not None:
            spans[pod].append((s, float("inf")))
    return spans


@pytest.mark.timeout(120)
def test_scales_up_on_a_burst_and_back_down_without_losing_requests() -> None:
    items = bursty()
    cfg = single_pool(8, EngineConfig.from_preset("llama3-8b-a100", max_model_len=4096))
    scaler = Autoscaler(CFG, {"pod": 1})
    _, result = run_policy(cfg, items, "round-robin", controller=scaler)
    info = result.extra["controller"]["pod"]
    assert info["scale_ups"] >= 1 and info["scale_downs"] >= 1, info
    assert 1 < info["peak_pods"] <= 8
    assert all(r.ttft_ms is not None and r.aborted is None for r in result.records)   # drained, not dropped
    states = [e["state"] for e in info["events"]]
    assert STARTING in states and SERVING in states and DRAINING in states and OFF in states
    spans = _serving_intervals(info["events"], [f"pod-{i}" for i in range(8)], items[0].view.arrival_s, 1)
    for r in result.records:
        assert any(a <= r.arrival_s <= b for a, b in spans[r.pod_id or ""]), (r.request_id, r.pod_id)
    starts = {e["pod"]: e["at_s"] for e in info["events"] if e["state"] == STARTING}
    ready = {e["pod"]: e["at_s"] for e in info["events"] if e["state"] == SERVING}
    assert all(ready[p] - starts[p] >= CFG.startup_s for p in ready)
    span_h = (result.span_s) / 3600
    assert span_h * 1 < info["gpu_hours"] < span_h * info["peak_pods"]


def test_bad_autoscale_settings_name_the_key() -> None:
    with pytest.raises(ConfigError, match="target_waiting_per_pod"):
        AutoscaleConfig(target_waiting_per_pod=0)
    with pytest.raises(ConfigError, match="min_pods"):
        AutoscaleConfig(min_pods=0)
    cfg = single_pool(2, EngineConfig.from_preset("llama3-8b-a100"))
    with pytest.raises(ConfigError, match="outside"):
        run_policy(cfg, bursty()[:10], "round-robin", controller=Autoscaler(CFG, {"pod": 3}))
    with pytest.raises(ConfigError, match="no pool 'short'"):
        run_policy(cfg, bursty()[:10], "round-robin", controller=Autoscaler(CFG, {"short": 1}))
