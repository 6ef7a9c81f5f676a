"""Cluster replay on slices of the real conv trace: contract, reproducibility, pools, outputs."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path

import pytest

from sim.cluster import (
    FEATURE_FIELDS,
    TRAINING_FIELDS,
    ClusterConfig,
    Completion,
    Decision,
    PodSnapshot,
    PolicyContext,
    PolicyRegistry,
    PoolSpec,
    RequestView,
    single_pool,
)
from sim.cluster.simulation import ReplayItem
from sim.engine import EngineConfig
from sim.replay import build_items, run_policy
from sim.workload import load_trace

ENGINE = EngineConfig.from_preset("llama3-8b-a100")


@pytest.fixture(scope="module")
def items(shared_data: Path) -> list[ReplayItem]:
    return build_items(load_trace(shared_data / "azure_llm_2023_conv.csv", rate_scale=4.0, limit=800), seed=3)


def _strip(summary: dict) -> dict:
    return {k: v for k, v in summary.items() if k not in ("wall_s", "cpu_s")}


def test_summary_is_reproducible_under_seed(items) -> None:
    cfg = single_pool(4, ENGINE)
    a, _ = run_policy(cfg, items, "least-queue", seed=7)
    b, _ = run_policy(cfg, items, "least-queue", seed=7)
    c, _ = run_policy(cfg, items, "least-queue", seed=8)
    assert _strip(a) == _strip(b)
    assert _strip(a) != _strip(c)
    for key in ("requests", "ttft_ms", "tpot_ms", "preemptions_per_1k", "per_pod_share", "wall_s",
                "gpu_busy_s", "per_pod", "shed"):
        assert key in a
    assert set(a["ttft_ms"]) >= {"p50", "p90", "p99"} and set(a["tpot_ms"]) >= {"p50", "p90", "p99"}
    assert a["requests"] == 800 and a["completed"] == 800
    assert sum(a["per_pod_share"].values()) == pytest.approx(1.0, abs=1e-3)
    assert all(0 <= p["kv_usage_mean"] <= p["kv_usage_max"] <= 1 for p in a["per_pod"].values())


def test_fast_forward_does_not_change_results_without_noise(items) -> None:
    quiet = dataclasses.replace(ENGINE, noise_std=0.0)
    fast, _ = run_policy(single_pool(3, quiet), items[:300], "round-robin")
    stepwise = dataclasses.replace(single_pool(3, quiet), fast_forward=False)
    slow, _ = run_policy(stepwise, items[:300], "round-robin")
    assert fast["ttft_ms"] == slow["ttft_ms"]
    assert fast["tpot_ms"]["p50"] == pytest.approx(slow["tpot_ms"]["p50"], rel=1e-6)


class Recorder:
    """A policy that checks what it is shown and predicts / sheds a little."""

    name = "recorder"

    def __init__(self, ctx: PolicyContext) -> None:
        self.ctx = ctx
        self.seen: list[tuple[RequestView, list[PodSnapshot]]] = []
        self.completions: list[Completion] = []

    def choose(self, request: RequestView, pods: Sequence[PodSnapshot]) -> Decision:
        self.seen.append((request, list(pods)))
        if request.prompt_tokens > 4000:
            return Decision.shed("slo")
        pod = min(pods, key=lambda p: (p.in_flight, p.pod_id))
        return Decision.route(pod.pod_id, predicted_ttft_ms=200.0, predicted_tpot_ms=18.0)

    def on_complete(self, completion: Completion) -> None:
        self.completions.append(completion)


def test_policy_sees_router_view_and_gets_training_samples(items) -> None:
    registry = PolicyRegistry()
    holder: list[Recorder] = []
    registry.register("recorder", lambda ctx: holder.append(Recorder(ctx)) or holder[-1])
    cfg = ClusterConfig(pools=(PoolSpec("pod", 3, ENGINE),), scrape_interval_s=0.5)
    summary, result = run_policy(cfg, items, "recorder", registry=registry, slo_ttft_ms=500)
    rec = holder[0]
    assert [p for p, _ in rec.ctx.pods] == ["pod-0", "pod-1", "pod-2"]
    for view, pods in rec.seen:
        assert all(isinstance(p, PodSnapshot) for p in pods)
        for p in pods:
            assert 0.0 <= view.arrival_s - p.metrics.scraped_at_s < 0.5 + 1e-9
            assert 0.0 <= p.prefix_cache_score <= 1.0 and p.in_flight >= 0 and p.prefill_tokens_in_flight >= 0
            feats = p.features(view)
            assert tuple(feats) == FEATURE_FIELDS
            assert feats["num_tokens_generated"] == 1 and feats["decode_tokens_in_flight"] == 0
    shed = sum(1 for v, _ in rec.seen if v.prompt_tokens > 4000)
    assert summary["shed"] == shed > 0
    assert len(rec.completions) == summary["completed"] == 800 - shed
    assert all(set(s) == set(TRAINING_FIELDS) for s in result.samples)
    assert all(s["num_tokens_generated"] == 0 and s["actual_ttft_ms"] > 0 for s in result.samples)
    assert any(s["prefill_tokens_in_flight"] > 0 for s in result.samples)
    assert any(s["prefix_cache_score"] > 0 for s in result.samples)
    one_token = [c for c in rec.completions if c.output_tokens == 1]
    assert all(c.sample["actual_tpot_ms"] == 0 for c in one_token)
    err = summary["prediction_error"]
    assert err["ttft"]["n"] == summary["completed"] and 0 <= err["ttft"]["coverage"] <= 1
    assert "mape" in err["tpot"]
    assert 0 < summary["slo_attainment"]["share"] <= 1


def test_multi_pool_routes_long_prompts_to_long_pool(items) -> None:
    short = EngineConfig.from_preset("llama3-8b-a100", max_model_len=2048)
    cfg = ClusterConfig(pools=(PoolSpec("short", 2, short), PoolSpec("long", 1, ENGINE)))
    _, result = run_policy(cfg, items, "round-robin")
    long_prompts = [r for r in result.records if r.prompt_tokens >= 2048]
    assert long_prompts and all(r.pool == "long" for r in long_prompts)
    assert {r.pool for r in result.records} == {"short", "long"}


def test_prefix_affinity_beats_round_robin_on_hits(items) -> None:
    cfg = single_pool(4, ENGINE)
    rr, _ = run_policy(cfg, items, "round-robin")
    pa, _ = run_policy(cfg, items, "prefix-affinity")
    assert pa["prefix_hit_fraction_mean"] > rr["prefix_hit_fraction_mean"]


def test_small_kv_cluster_preempts(items) -> None:
    tiny = EngineConfig.from_preset("llama3-8b-a100", num_gpu_blocks_override=600)
    summary, _ = run_policy(single_pool(2, tiny), items[:300], "round-robin")
    assert summary["preemptions_per_1k"] > 0
    assert summary["completed"] == 300


def test_registry_rejects_unknown_and_duplicate_names() -> None:
    from sim.engine import ConfigError

    registry = PolicyRegistry()
    assert {"round-robin", "least-queue", "least-kv", "prefix-affinity", "random"} <= set(registry.names())
    with pytest.raises(ConfigError, match="unknown policy"):
        registry.build("nope", PolicyContext(0, []))
    with pytest.raises(ConfigError, match="already registered"):
        registry.register("round-robin", lambda ctx: registry.build("random", ctx))
    with pytest.raises(ConfigError, match="unknown policy options"):
        registry.build("round-robin", PolicyContext(0, [], {"bogus": "1"}))
