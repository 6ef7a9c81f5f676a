"""Scenario files (parser and errors), the engine's scenario operations, and replays with scenarios."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest

from sim.cluster import single_pool
from sim.cluster.simulation import ReplayItem
from sim.engine import ConfigError, Engine, EngineConfig, PodFailed, Sequence
from sim.engine.kvcache import BlockPool
from sim.replay import build_items, run_policy
from sim.scenario import PodChange, apply_change, load_scenario, parse_scenario
from sim.workload import load_trace

PODS = ["pod-0", "pod-1", "pod-2"]
QUIET = EngineConfig.from_preset("llama3-8b-a100", noise_std=0.0)

GOOD = """
[[events]]
at_fraction = 0.5
pod = "pod-0"
speed_factor = 2.0

[[events]]
at_s = 12.5
pod = "pod-1"
fail = true

[[events]]
at_s = 20
pod = "pod-1"
restore = true
flush_prefix_cache = true
kv_fraction = 0.5
"""


def test_good_file_parses_and_resolves(tmp_path: Path) -> None:
    path = tmp_path / "s.toml"
    path.write_text(GOOD)
    sc = load_scenario(path, PODS)
    assert [e.pod for e in sc.events] == ["pod-0", "pod-1", "pod-1"]
    assert sc.events[0].change == PodChange(speed_factor=2.0)
    assert sc.events[2].change.as_dict() == {"restore": True, "flush_prefix_cache": True, "kv_fraction": 0.5}
    timed = sc.resolve(10.0, 110.0)
    assert [(e.at_s, e.index) for e in timed] == [(22.5, 1), (30.0, 2), (60.0, 0)]
    assert timed[2].describe() == {"at_s": 60.0, "speed_factor": 2.0}
    with pytest.raises(ConfigError, match="event 0: 'at_fraction' needs a known span"):
        sc.resolve(0.0, None)


BAD_EVENTS = [
    ({"at_s": 1, "pod": "pod-0", "speed": 2}, "event 0: unknown key 'speed'"),
    ({"at_s": 1, "at_fraction": 0.5, "pod": "pod-0", "fail": True}, "exactly one of 'at_fraction' or 'at_s'"),
    ({"pod": "pod-0", "fail": True}, "exactly one of 'at_fraction' or 'at_s'"),
    ({"at_fraction": 1.5, "pod": "pod-0", "fail": True}, "'at_fraction' must be in"),
    ({"at_s": -1, "pod": "pod-0", "fail": True}, "'at_s' must be >= 0"),
    ({"at_s": "soon", "pod": "pod-0", "fail": True}, "'at_s' must be a finite number"),
    ({"at_s": 1, "pod": "pod-9", "fail": True}, "'pod' = 'pod-9' does not exist"),
    ({"at_s": 1, "fail": True}, "'pod' must be a pod id"),
    ({"at_s": 1, "pod": "pod-0", "speed_factor": 0}, "'speed_factor' must be > 0"),
    ({"at_s": 1, "pod": "pod-0", "speed_factor": "fast"}, "'speed_factor' must be a finite number"),
    ({"at_s": 1, "pod": "pod-0", "speed_factor": math.inf}, "'speed_factor' must be a finite number"),
    ({"at_s": 1, "pod": "pod-0", "fail": False}, "'fail' must be true"),
    ({"at_s": 1, "pod": "pod-0", "flush_prefix_cache": 1}, "'flush_prefix_cache' must be true"),
    ({"at_s": 1, "pod": "pod-0", "kv_fraction": 1.5}, "'kv_fraction' must be in"),
    ({"at_s": 1, "pod": "pod-0", "kv_blocks": 0}, "'kv_blocks' must be an integer >= 1"),
    ({"at_s": 1, "pod": "pod-0", "kv_blocks": 10.5}, "'kv_blocks' must be an integer >= 1"),
    ({"at_s": 1, "pod": "pod-0", "fail": True, "restore": True}, "'fail' and 'restore' cannot be combined"),
    ({"at_s": 1, "pod": "pod-0", "kv_blocks": 900, "kv_fraction": 0.5}, "'kv_blocks' and 'kv_fraction'"),
    ({"at_s": 1, "pod": "pod-0"}, "event 0: no change given"),
]


@pytest.mark.parametrize(("event", "message"), BAD_EVENTS)
def test_bad_event_names_the_key(event: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_scenario({"events": [event]}, PODS, "f.toml")


def test_bad_file_level_errors(tmp_path: Path) -> None:
    ok = {"at_s": 1, "pod": "pod-0", "fail": True}
    with pytest.raises(ConfigError, match="event 1: unknown key 'pood'"):
        parse_scenario({"events": [ok, {"at_s": 2, "pood": "pod-0", "fail": True}]}, PODS)
    with pytest.raises(ConfigError, match="unknown key 'event'"):
        parse_scenario({"event": [ok]}, PODS)
    with pytest.raises(ConfigError, match="'events' must be a non-empty list"):
        parse_scenario({"events": []}, PODS)
    path = tmp_path / "broken.toml"
    path.write_text("[[events]\nat_s = 1")
    with pytest.raises(ConfigError, match="cannot parse scenario"):
        load_scenario(path, PODS)
    with pytest.raises(ConfigError, match="cannot read scenario"):
        load_scenario(tmp_path / "missing.toml", PODS)


def test_kv_change_is_checked_against_the_pod() -> None:
    sc = parse_scenario({"events": [{"at_s": 1, "pod": "pod-0", "kv_blocks": 100}]}, PODS)
    with pytest.raises(ConfigError, match=r"event 0: 'kv_blocks' leaves 100 KV blocks.*8192 tokens = 512"):
        sc.check_pods(dict.fromkeys(PODS, QUIET))
    sc = parse_scenario({"events": [{"at_s": 1, "pod": "pod-0", "kv_blocks": 10**7}]}, PODS)
    with pytest.raises(ConfigError, match="more than the"):
        sc.check_pods(dict.fromkeys(PODS, QUIET))


# -- engine operations --------------------------------------------------------------------------

def _busy_and_ttft(speed: float, fast_forward: bool) -> tuple[float, float]:
    engine = Engine(QUIET)
    engine.step_model.speed_factor = speed
    seqs = [Sequence(f"s{i}", 700 + 50 * i, 120 + 7 * i) for i in range(6)]
    for s in seqs:
        engine.add(s, 0.0)
    engine.advance_until(math.inf, fast_forward)
    assert all(s.finished for s in seqs)
    return engine.stats.busy_s, seqs[0].ttft or 0.0


@pytest.mark.parametrize("fast_forward", [True, False])
def test_speed_factor_doubles_step_times(fast_forward: bool) -> None:
    busy1, ttft1 = _busy_and_ttft(1.0, fast_forward)
    busy2, ttft2 = _busy_and_ttft(2.0, fast_forward)
    assert busy2 == pytest.approx(2 * busy1, rel=1e-9)
    assert ttft2 == pytest.approx(2 * ttft1, rel=1e-9)


def _busy_engine(cfg: EngineConfig, n: int = 12) -> tuple[Engine, list[Sequence]]:
    engine = Engine(cfg)
    seqs = [Sequence(f"r{i}", 400, 200, tuple(hash((i % 3, b)) for b in range(25))) for i in range(n)]
    for s in seqs:
        engine.add(s, 0.0)
    for _ in range(30):
        engine.step()
    return engine, seqs


def test_kv_shrink_preempts_then_everything_finishes() -> None:
    cfg = dataclasses.replace(QUIET, num_gpu_blocks_override=1200, max_model_len=1024)
    engine, seqs = _busy_engine(cfg)
    used = engine.pool.num_used
    assert used > 64
    apply_change(engine, PodChange(kv_blocks=64), engine.clock)
    assert engine.stats.preemptions > 0 and engine.pool.num_blocks == 64
    assert engine.pool.num_used <= 64
    engine.pool.check()
    while engine.step() is not None:
        engine.pool.check()
    assert all(s.finished and s.num_output == 200 for s in seqs)
    apply_change(engine, PodChange(kv_fraction=1.0), engine.clock)
    assert engine.pool.num_blocks == 1200 and engine.pool.num_free == 1200


def test_flush_forgets_prefixes_but_running_requests_finish() -> None:
    engine, seqs = _busy_engine(QUIET)
    assert engine.pool.num_cached > 0
    hashes = seqs[0].block_hashes
    assert engine.pool.match_prefix(hashes)[0] > 0
    apply_change(engine, PodChange(flush_prefix_cache=True), engine.clock)
    assert engine.pool.match_prefix(hashes) == (0, 0) and engine.pool.num_cached == 0
    engine.pool.check()
    late = Sequence("late", 400, 5, hashes)
    engine.add(late, engine.clock)
    while engine.step() is not None:
        engine.pool.check()
    assert all(s.finished for s in [*seqs, late]) and late.prefix_hit_fraction == 0.0
    assert engine.pool.num_free == engine.pool.num_blocks


def test_fail_loses_requests_and_restore_starts_empty() -> None:
    engine, seqs = _busy_engine(QUIET)
    lost = apply_change(engine, PodChange(fail=True), engine.clock)
    assert {s.request_id for s in lost} == {s.request_id for s in seqs if s.num_output < 200}
    assert not engine.has_work() and engine.pool.num_used == 0 and engine.pool.num_cached == 0
    with pytest.raises(PodFailed):
        engine.add(Sequence("x", 10, 2), engine.clock)
    apply_change(engine, PodChange(restore=True), engine.clock + 1.0)
    again = Sequence("y", 10, 2)
    engine.add(again, engine.clock)
    engine.advance_until(math.inf)
    assert again.finished and again.num_output == 2


def test_blockpool_resize_evicts_free_cached_blocks_first() -> None:
    pool = BlockPool(10)
    assert pool.allocate(4)
    for h in (1, 2, 3, 4):
        pool.register(h)
    pool.release([1, 2, 3, 4], 0)
    assert pool.num_cached == 4 and pool.free_plain == 6
    assert pool.resize(5) == 0
    assert pool.num_blocks == 5 and pool.num_cached == 4 and pool.num_free == 5  # plain blocks go first
    assert pool.resize(3) == 0
    assert pool.num_cached == 3 and pool.num_free == 3 and pool.evictions == 1
    pool.check()


# -- replay ---------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def items(shared_data: Path) -> list[ReplayItem]:
    return build_items(load_trace(shared_data / "azure_llm_2023_conv.csv", rate_scale=4.0, limit=1200), seed=1)


def test_replay_slowdown_raises_only_the_slowed_pods_ttft_after_the_switch(items) -> None:
    cfg = single_pool(3, QUIET)
    sc = parse_scenario({"events": [{"at_fraction": 0.5, "pod": "pod-0", "speed_factor": 2.0}]}, PODS)
    base, base_res = run_policy(cfg, items, "round-robin")
    slow, slow_res = run_policy(cfg, items, "round-robin", scenario=sc)
    switch = items[0].view.arrival_s + 0.5 * (items[-1].view.arrival_s - items[0].view.arrival_s)
    assert slow["per_pod"]["pod-0"]["events"] == [{"at_s": round(switch, 6), "speed_factor": 2.0}]
    assert slow["per_pod"]["pod-1"]["events"] == [] and "events" not in base["per_pod"]["pod-0"]
    pairs = list(zip(base_res.records, slow_res.records, strict=True))
    assert all(a.pod_id == b.pod_id for a, b in pairs)  # round-robin: same placement
    after = [(a.ttft_ms, b.ttft_ms) for a, b in pairs if a.pod_id == "pod-0" and a.arrival_s > switch]
    ratio = sum(b for _, b in after) / sum(a for a, _ in after)
    assert ratio > 1.8
    early = [(a.ttft_ms, b.ttft_ms) for a, b in pairs if a.arrival_s + (a.e2e_ms or 0) / 1e3 < switch]
    assert early and all(a == pytest.approx(b, rel=1e-9) for a, b in early)
    others = [(a.ttft_ms, b.ttft_ms) for a, b in pairs if a.pod_id != "pod-0"]
    assert all(a == pytest.approx(b, rel=1e-9) for a, b in others)  # decode runs split at the event time


def test_replay_failed_pod_gets_no_requests_and_aborts_in_flight(items) -> None:
    cfg = single_pool(3, QUIET)
    sc = parse_scenario({"events": [{"at_fraction": 0.3, "pod": "pod-1", "fail": True},
                                    {"at_fraction": 0.6, "pod": "pod-1", "restore": True}]}, PODS)
    summary, res = run_policy(cfg, items, "least-queue", scenario=sc)
    span = items[-1].view.arrival_s - items[0].view.arrival_s
    down = (items[0].view.arrival_s + 0.3 * span, items[0].view.arrival_s + 0.6 * span)
    on_pod1 = [r for r in res.records if r.pod_id == "pod-1"]
    assert not [r for r in on_pod1 if down[0] <= r.arrival_s < down[1]]
    assert [r for r in on_pod1 if r.arrival_s >= down[1]], "restored pod takes traffic again"
    aborted = [r for r in res.records if r.aborted]
    assert aborted and all(r.pod_id == "pod-1" and r.ttft_ms is None for r in aborted)
    assert summary["aborted"] == len(aborted) and summary["completed"] == len(items) - len(aborted)
    assert summary["shed"] == 0


def test_replay_with_every_pod_down_sheds(items) -> None:
    events = [{"at_s": 0, "pod": p, "fail": True} for p in PODS]
    summary, _ = run_policy(single_pool(3, QUIET), items[:50], "round-robin",
                            scenario=parse_scenario({"events": events}, PODS))
    assert summary["shed_reasons"] == {"no_live_pod": 50}
