"""Client request budgets: ``max_tokens`` policies, hidden output lengths, the oracle flag."""

from __future__ import annotations

import math
import statistics
from pathlib import Path

import pytest

from sim.cluster import ClusterConfig, PoolSpec
from sim.engine import ConfigError, EngineConfig
from sim.replay import build_items, run_policy
from sim.workload import MaxTokensPolicy, TraceRequest, load_trace


@pytest.fixture(scope="module")
def trace(shared_data: Path) -> list[TraceRequest]:
    return load_trace(shared_data / "azure_llm_2023_conv.csv", rate_scale=4.0, limit=600)


@pytest.mark.parametrize("spec", ["fixed:0", "fixed:abc", "multiple:-1", "multiple:nan", "choice:",
                                  "choice:512=x", "uniform:5", "none:3", "fixed"])
def test_bad_specs_name_the_flag(spec: str) -> None:
    with pytest.raises(ConfigError, match="--max-tokens-policy"):
        MaxTokensPolicy.parse(spec)


def test_default_hides_output_and_caps_at_1024(trace) -> None:
    items = build_items(trace, seed=1)
    assert all(i.view.expected_output_tokens is None for i in items)
    assert {i.view.max_output_tokens for i in items} == {1024}
    assert [i.output_tokens for i in items] == [r.output_tokens for r in trace]  # conv outputs <= 1000


def test_caps_clip_generation_and_never_equal_the_output_by_construction(trace) -> None:
    small = build_items(trace, seed=1, max_tokens=MaxTokensPolicy.parse("fixed:64"))
    assert all(i.output_tokens == min(r.output_tokens, 64) for i, r in zip(small, trace, strict=True))
    assert any(r.output_tokens > 64 for r in trace)
    typical = statistics.median(r.output_tokens for r in trace)
    multiple = build_items(trace, seed=1, max_tokens=MaxTokensPolicy.parse("multiple:4"))
    assert {i.view.max_output_tokens for i in multiple} == {math.ceil(4 * typical)}
    none = build_items(trace, seed=1, max_tokens=MaxTokensPolicy.parse("none"))
    assert all(i.view.max_output_tokens is None for i in none)


def test_choice_is_a_seeded_distribution(trace) -> None:
    policy = MaxTokensPolicy.parse("choice:256=1,1024=2,4096=1")

    def caps(seed: int) -> list[int | None]:
        return [i.view.max_output_tokens for i in build_items(trace, seed=seed, max_tokens=policy)]

    a = caps(3)
    assert a == caps(3) and a != caps(4)
    assert set(a) == {256, 1024, 4096}
    assert 0.4 < a.count(1024) / len(a) < 0.6


def test_oracle_exposes_the_generated_length(trace) -> None:
    items = build_items(trace, seed=1, expose_output_length=True, max_tokens=MaxTokensPolicy.parse("fixed:100"))
    assert all(i.view.expected_output_tokens == i.output_tokens <= 100 for i in items)


def test_replay_respects_caps_and_vllm_context_check(trace) -> None:
    items = build_items(trace, seed=2, max_tokens=MaxTokensPolicy.parse("fixed:512"))
    short = EngineConfig.from_preset("llama3-8b-a100", max_model_len=2048)
    cfg = ClusterConfig(pools=(PoolSpec("short", 2, short), PoolSpec("long", 1, EngineConfig.from_preset())))
    summary, result = run_policy(cfg, items, "least-queue")
    assert summary["completed"] == len(items)
    done = [r for r in result.records if r.ttft_ms is not None]
    assert all(r.output_tokens <= 512 and r.max_tokens == 512 for r in done)
    over = [r for r in done if r.prompt_tokens + 512 > 2048]
    assert over and all(r.pool == "long" for r in over)  # vLLM would 400 them on a 2048-token pod
    assert any(r.pool == "short" for r in done)
