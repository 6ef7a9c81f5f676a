"""sim.capacity: the SLO judge, the galloping search, the whole search on a tiny trace (answer meets the
SLO and one pod fewer does not), bad configurations, the worst-case rule, the targets, the CLI."""

from __future__ import annotations

import json
import math
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from sim.capacity.compare import targets
from sim.capacity.gallop import smallest_ok
from sim.capacity.guard import MissGuard
from sim.capacity.rows import Settings, search_row
from sim.capacity.slo import Slo, judge
from sim.capacity.space import Threshold, preset_space
from sim.capacity.trial import TrialRunner
from sim.capacity.workload import load_workload
from sim.cluster.config import ClusterConfig
from sim.cluster.simulation import RequestRecord
from sim.engine.errors import ConfigError
from sim.replay.runner import run_policy
from sim.workload.budgets import MaxTokensPolicy

REPO = Path(__file__).resolve().parents[2]
PRESET = "llama3-8b-a100"
SLO = Slo(ttft_ms=400.0, attainment=0.95)


def tiny_trace(path: Path, n: int = 500, rate: float = 30.0, long_share: float = 0.0, seed: int = 3) -> Path:
    """Poisson arrivals; prompts 200..1500 tokens (``long_share`` of them 2,200..3,500), outputs 20..200."""
    rng = random.Random(seed)
    t, lines = 0.0, ["arrived_at,num_prefill_tokens,num_decode_tokens"]
    for _ in range(n):
        t += rng.expovariate(rate)
        prompt = rng.randint(2200, 3500) if rng.random() < long_share else rng.randint(200, 1500)
        lines.append(f"{t:.4f},{prompt},{rng.randint(20, 200)}")
    path.write_text("\n".join(lines) + "\n")
    return path


def settings(trace: Path) -> Settings:
    return Settings(trace, rate_scale=1.0, slo=SLO, max_tokens_policy="fixed:256", coarse_fraction=0.0)


# -- the judge and the galloping search ---------------------------------------------------------
JUDGE_CASES = [
    # (name, ttfts (nan = not completed), slo ms, attainment target, ok)
    ("all fast", [100.0] * 100, 400.0, 0.99, True),
    ("one slow in a hundred: the p99 interpolates to 108 ms", [100.0] * 99 + [900.0], 400.0, 0.99, True),
    ("two slow in a hundred", [100.0] * 98 + [900.0] * 2, 400.0, 0.99, False),
    ("three slow in two hundred", [100.0] * 197 + [900.0] * 3, 400.0, 0.99, False),
    ("a slow tail within a loose target still fails the p99", [100.0] * 95 + [900.0] * 5, 400.0, 0.9, False),
    ("an unfinished request is a miss", [100.0] * 95 + [math.nan] * 5, 400.0, 0.96, False),
    ("... within a looser target", [100.0] * 97 + [math.nan] * 3, 400.0, 0.96, True),
]


@pytest.mark.parametrize(("name", "ttfts", "slo", "target", "ok"), JUDGE_CASES, ids=[c[0] for c in JUDGE_CASES])
def test_judge(name: str, ttfts: list[float], slo: float, target: float, ok: bool) -> None:
    v = judge(np.array(ttfts), Slo(slo, target))
    assert v.ok is ok
    assert v.attainment == pytest.approx(sum(1 for x in ttfts if x <= slo) / len(ttfts))


@pytest.mark.parametrize("answer", [1, 2, 7, 13, 40])
@pytest.mark.parametrize("guess", [1, 6, 12, 50])
def test_smallest_ok_finds_the_threshold(answer: int, guess: int) -> None:
    gen = smallest_ok(guess, 64)
    tested = []
    n = next(gen)
    while True:
        tested.append(n)
        try:
            n = gen.send(n >= answer)
        except StopIteration as stop:
            assert stop.value == answer
            break
    assert len(tested) <= 2 * math.ceil(math.log2(64)) + 2
    assert len(set(tested)) == len(tested)


def test_smallest_ok_none_when_the_cap_fails() -> None:
    gen = smallest_ok(3, 8)
    n = next(gen)
    with pytest.raises(StopIteration) as stop:
        while True:
            n = gen.send(False)
    assert stop.value.value is None and n == 8


# -- the search on a tiny trace -------------------------------------------------------------------
def _replay_ok(trace: Path, space_counts: tuple[tuple[int, int], ...], config: str,
               threshold: Threshold = Threshold(None)) -> bool:
    space = preset_space(config, "round-robin", PRESET, 8192, (2048,), (None,), (), {}, 16)
    st = settings(trace)
    work = load_workload(trace, 1.0, 0, SLO.ttft_ms, MaxTokensPolicy.parse("fixed:256"), 0.0, 0.0)
    return TrialRunner(space, st.slo, 0, lambda _: None).run(work.full, threshold, space_counts, "check").verdict.ok


@pytest.mark.timeout(120)
def test_single_pool_search_is_minimal(tmp_path: Path) -> None:
    trace = tiny_trace(tmp_path / "t.csv", n=600, rate=30.0)
    space = preset_space("single-aggressive", "round-robin", PRESET, 8192, (2048,), (None,), (), {}, 16)
    row = search_row(space, settings(trace), quiet=True)
    n = row["pools"][0]["pods"]
    assert row["slo_met"] and row["gpus"] == n >= 2
    assert row["p99_ttft_ms"] <= SLO.ttft_ms and row["attainment"] >= SLO.attainment
    assert row["gpu_hours"] == pytest.approx(n * row["span_s"] / 3600, abs=2e-4)
    assert _replay_ok(trace, ((1, n),), "single-aggressive")
    assert not _replay_ok(trace, ((1, n - 1),), "single-aggressive")


@pytest.mark.timeout(180)
def test_dual_pool_search_is_minimal_and_worst_case_never_preempts(tmp_path: Path) -> None:
    trace = tiny_trace(tmp_path / "t.csv", n=900, rate=45.0, long_share=0.15)
    space = preset_space("dual-pool", "round-robin", PRESET, 8192, (2048,), (None,), (), {}, 16)
    row = search_row(space, settings(trace), quiet=True)
    short, long = row["pools"]
    assert (short["name"], short["max_model_len"], long["max_model_len"]) == ("short", 2048, 8192)
    assert short["provisioning"] == long["provisioning"] == "worst-case"
    assert long["max_num_seqs"] == 28181 // (8192 // 16)        # KV blocks // blocks per max_model_len sequence
    assert row["threshold"] == {"short_max_model_len": 2048, "total_threshold_tokens": None}
    assert row["preemptions_per_1k"] == 0 and all(t["ok"] in (True, False) for t in row["search"]["log"])
    s, lg = short["pods"], long["pods"]
    th = Threshold(2048, None)
    assert row["slo_met"] and _replay_ok(trace, ((1, s), (1, lg)), "dual-pool", th)
    if s > 1:
        assert not _replay_ok(trace, ((1, s - 1), (1, lg)), "dual-pool", th)
    if lg > 1:
        assert not _replay_ok(trace, ((1, s), (1, lg - 1)), "dual-pool", th)


# -- bad configurations ----------------------------------------------------------------------------
def _cli(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "sim.capacity", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=120)


BAD = [
    (["--attainment", "1.5"], "--attainment"),
    (["--slo-ttft-ms", "0"], "--slo-ttft-ms"),
    (["--tp", "4,x"], "--tp"),
    (["--short-contexts", "0"], "--short-contexts"),
    (["--max-pods", "0"], "--max-pods"),
    (["--autoscale", "--autoscale-opt", "cooldown=3"], "cooldown"),
    (["--autoscale", "--autoscale-opt", "startup_s=-1"], "startup_s"),
    (["--policy", "dual-pool", "--config", "single-aggressive"], "needs two pools"),
    (["--config", "single-aggressive", "--preset", "llama3-70b-a100-tp4", "--tp", "3"], "tensor_parallel_size"),
    (["--max-tokens-policy", "fixed:0"], "max-tokens-policy"),
]


@pytest.mark.parametrize(("args", "needle"), BAD, ids=[b[1] for b in BAD])
def test_bad_arguments_fail_naming_the_key(tmp_path: Path, args: list[str], needle: str) -> None:
    trace = tiny_trace(tmp_path / "t.csv", n=50)
    res = _cli("--trace", str(trace), "--quiet", *args)
    assert res.returncode == 2, res.stderr
    assert needle in res.stderr and "Traceback" not in res.stderr, res.stderr


CLUSTER_BAD = [
    ('[[pools]]\nname = "a"\ncount = 1\nmax_modl_len = 4096\n', "max_modl_len"),
    ('[[pools]]\nname = "a"\ncount = 1\nprovisioning = "lazy"\n', "provisioning"),
    ('[[pools]]\nname = "a"\ncount = 1\n[[pools]]\nname = "b"\ncount = 1\n[[pools]]\nname = "c"\ncount = 1\n',
     "pools"),
    ('scrape_interval_s = 0.1\n[[pools]]\nname = "a"\ncount = 1\n', "scrape_interval_s"),
]


@pytest.mark.parametrize(("text", "needle"), CLUSTER_BAD, ids=[c[1] for c in CLUSTER_BAD])
def test_bad_cluster_files_fail_naming_the_key(tmp_path: Path, text: str, needle: str) -> None:
    trace = tiny_trace(tmp_path / "t.csv", n=50)
    (tmp_path / "c.toml").write_text(text)
    res = _cli("--trace", str(trace), "--quiet", "--cluster-config", str(tmp_path / "c.toml"),
               "--policy", "round-robin")
    assert res.returncode == 2 and needle in res.stderr and "Traceback" not in res.stderr, res.stderr


def test_cli_writes_the_row(tmp_path: Path) -> None:
    trace = tiny_trace(tmp_path / "t.csv", n=300, rate=8.0)
    out = tmp_path / "row.json"
    res = _cli("--trace", str(trace), "--preset", PRESET, "--long-context", "8192", "--policy", "round-robin",
               "--slo-ttft-ms", "400", "--attainment", "0.95", "--max-tokens-policy", "fixed:256",
               "--rate-scale", "1", "--autoscale", "--autoscale-opt", "poll_interval_s=5", "--out", str(out))
    assert res.returncode == 0, res.stderr
    row = json.loads(out.read_text())
    for key in ("config", "policy", "gpus", "gpu_hours", "p99_ttft_ms", "attainment", "preemptions_per_1k",
                "pools", "elastic", "settings"):
        assert key in row, key
    assert row["config"] == "single-aggressive" and row["policy"] == "round-robin"
    assert row["elastic"]["gpu_hours"] > 0 and "pod" in row["elastic"]["pools"]
    assert "[single-aggressive/round-robin]" in res.stderr                    # progress on stderr


def test_a_tp_the_kv_cache_cannot_hold_is_skipped_or_refused() -> None:
    space = preset_space("single-worst-case", "round-robin", "llama3-70b-a100-tp4", 32768, (4096,), (None,),
                         (2,), {}, 8)
    with pytest.raises(ConfigError, match="max_model_len"):
        space.engine_of(0, Threshold(None), 2)


# -- targets ---------------------------------------------------------------------------------------
def _rows(**over: dict) -> list[dict]:
    base = {"gpu_hours": 10.0, "preemptions_per_1k": 0.0, "p99_ttft_ms": 1000.0}
    rows = []
    for config in ("single-worst-case", "single-aggressive", "dual-pool"):
        for policy in ("round-robin", "predicted-latency"):
            rows.append({"config": config, "policy": policy, **base, **over.get(f"{config}/{policy}", {})})
    return rows


def test_targets_are_evaluated_on_the_rows() -> None:
    rows = _rows(**{"single-worst-case/round-robin": {"gpu_hours": 20.0},
                    "single-aggressive/round-robin": {"gpu_hours": 16.0, "preemptions_per_1k": 10.0},
                    "single-aggressive/predicted-latency": {"gpu_hours": 11.0},
                    "dual-pool/predicted-latency": {"gpu_hours": 11.0, "preemptions_per_1k": 1.0,
                                                    "p99_ttft_ms": 900.0}})
    got = {t["target"]: t["met"] for t in targets(rows)}
    assert all(got.values()), got


def test_preemption_ratio_is_undefined_without_preemptions() -> None:
    ratio = next(t for t in targets(_rows()) if "preemptions per 1k /" in t["target"])
    assert ratio["met"] is None and "preempted nothing" in ratio["note"]


# -- early stop ------------------------------------------------------------------------------------
def _rec(i: int, arrival: float, first: float | None, pool: str | None = "pod") -> RequestRecord:
    return RequestRecord(f"r{i}", arrival, 100, 10, pool=pool, first_token_s=first)


def test_guard_counts_only_certain_misses_of_judged_requests() -> None:
    guard = MissGuard(Slo(1000.0, 0.9), judged_from=2, judged=20)       # 2 misses allowed
    recs = [_rec(0, 0.0, None), _rec(1, 0.0, None)]                       # warm-up: not judged
    recs += [_rec(2, 1.0, 1.5), _rec(3, 1.0, None), _rec(4, 1.1, None), _rec(5, 1.2, 3.0)]
    assert not guard(1.9, recs)                     # nobody is certainly late yet
    assert not guard(2.15, recs)                    # r3, r4 are: 2 misses = the budget
    assert guard(2.3, recs) and guard.failed == {"pod"}   # r5's first token came 1.8 s late
    shed = MissGuard(Slo(1000.0, 0.9), 0, 10)
    assert shed(5.0, [_rec(0, 0.0, None, pool=None), _rec(1, 0.0, None, pool=None)])
    assert shed.failed == {""}


@pytest.mark.timeout(120)
def test_a_stopped_trial_agrees_with_the_whole_replay(tmp_path: Path) -> None:
    trace = tiny_trace(tmp_path / "t.csv", n=600, rate=30.0)
    space = preset_space("single-aggressive", "round-robin", PRESET, 8192, (2048,), (None,), (), {}, 16)
    work = load_workload(trace, 1.0, 0, SLO.ttft_ms, MaxTokensPolicy.parse("fixed:256"), 0.0, 0.0)
    runner = TrialRunner(space, SLO, 0, lambda _: None)
    stopped = runner.run(work.full, Threshold(None), ((1, 1),), "x")
    assert stopped.extra.get("stopped") and not stopped.verdict.ok
    point = runner.point(work.full, Threshold(None), "pod", 1, 1)
    assert point is not None and point.failed
    cfg = ClusterConfig(pools=space.pool_specs(Threshold(None), ((1, 1),)))
    _, whole = run_policy(cfg, work.full.items, "round-robin", slo_ttft_ms=SLO.ttft_ms)
    ttft = np.array([np.nan if r.ttft_ms is None else r.ttft_ms for r in whole.records])
    assert not judge(ttft, SLO).ok
    assert len(whole.records) == len(work.full.items) > sum(1 for _ in stopped.points)
