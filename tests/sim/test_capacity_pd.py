"""sim.capacity --pd-compare: the joint TTFT + TPOT judge, the split search (on a synthetic cluster whose
answers are known), the whole comparison on a tiny trace (each answer passes, one pod fewer does not), the CLI."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from sim.capacity.__main__ import run as capacity
from sim.capacity.joint import JointSlo, JointVerdict, judge_joint
from sim.capacity.pd_search import PdCapacitySearch, Trial, TrialBudgetSpent
from sim.capacity.pd_space import PdSpace, Pods
from sim.capacity.workload import Window, load_workload
from sim.cluster.simulation import RequestRecord
from sim.engine.errors import ConfigError
from sim.workload.budgets import MaxTokensPolicy
from tests.sim.test_capacity import tiny_trace

SLO = JointSlo(ttft_ms=400.0, tpot_ms=40.0)


def record(ttft: float | None, tpot: float | None, out: int = 10) -> RequestRecord:
    return RequestRecord("r", 0.0, 100, out, ttft_ms=ttft, tpot_ms=tpot)


def test_joint_judge_needs_both_tails_and_counts_unfinished_requests() -> None:
    fast = [record(100.0, 20.0) for _ in range(100)]
    assert judge_joint(fast, SLO).ok
    slow_tpot = fast[:98] + [record(100.0, 90.0)] * 2
    v = judge_joint(slow_tpot, SLO)
    assert v.ttft_ok and not v.tpot_ok and not v.ok
    unfinished = fast[:98] + [record(None, None)] * 2
    v = judge_joint(unfinished, SLO)
    assert not v.ttft_ok and math.isinf(v.p99_ttft_ms) and v.completed == 98 and v.tpot_ok
    one_token = fast[:95] + [record(100.0, 500.0, out=1)] * 5
    assert judge_joint(one_token, SLO).ok, "a one-token answer has no TPOT"
    with pytest.raises(ConfigError):
        JointSlo(0.0, 10.0)


class Synthetic(PdCapacitySearch):
    """TTFT passes iff P >= ``need_p``, TPOT iff D >= ``need_d``; aggregated passes iff n >= ``need_n``."""

    def __init__(self, need_p: int, need_d: int, need_n: int, max_pods: int = 32) -> None:
        super().__init__(PdSpace("llama3-8b-a100", max_pods=max_pods), Window("full", (), 0), SLO, 0,
                         lambda line: None, max_trials=60)
        self.need = need_p, need_d, need_n

    def _replay(self, pods: Pods) -> Trial:
        need_p, need_d, need_n = self.need
        if len(pods) == 1:
            ttft_ok = tpot_ok = pods[0] >= need_n
        else:
            ttft_ok, tpot_ok = pods[0] >= need_p, pods[1] >= need_d
        v = JointVerdict(10, 10, 1.0 if ttft_ok else 1e4, 1.0 if tpot_ok else 1e3, 1.0, 1.0, ttft_ok, tpot_ok)
        return Trial(pods, sum(pods), v)


@pytest.mark.parametrize(("need_p", "need_d", "n", "split"), [
    (3, 2, 5, (3, 2)), (3, 2, 9, (7, 2)), (3, 2, 4, None), (1, 1, 2, (1, 1)), (7, 1, 7, None), (2, 4, 6, (2, 4))])
def test_best_split_is_the_fewest_decode_pods_that_meet_tpot(need_p: int, need_d: int, n: int,
                                                              split: tuple[int, int] | None) -> None:
    search = Synthetic(need_p, need_d, 99)
    found = search.best_split(n)
    assert (found.pods if found else None) == split
    assert len(search.trials) <= 2 + math.ceil(math.log2(n)), "bisection, not a scan"


def test_the_comparison_finds_each_side_fewest_pods() -> None:
    search = Synthetic(need_p=4, need_d=3, need_n=9)
    agg = search.aggregated()
    assert agg is not None and agg.pods == (9,)
    pd = search.disaggregated(9)
    assert pd is not None and pd.pods == (4, 3)
    at_nine = search.best_split(9)
    assert at_nine is not None and at_nine.pods == (6, 3)
    assert Synthetic(4, 3, 9, max_pods=6).disaggregated(6) is None


def test_the_trial_budget_is_enforced() -> None:
    search = Synthetic(need_p=4, need_d=3, need_n=9)
    search.max_trials = 2
    with pytest.raises(TrialBudgetSpent):
        search.disaggregated(9)


@pytest.mark.timeout(300)
def test_pd_compare_on_a_tiny_trace(tmp_path: Path) -> None:
    trace = tiny_trace(tmp_path / "t.csv", n=300, rate=25.0)
    slo = JointSlo(ttft_ms=500.0, tpot_ms=30.0)
    work = load_workload(trace, 1.0, 0, slo.ttft_ms, MaxTokensPolicy.parse("fixed:256"), 0.0, 0.0)
    space = PdSpace("llama3-8b-a100", overrides={"noise_std": 0.0}, max_pods=12)
    search = PdCapacitySearch(space, work.full, slo, 0, lambda line: None)
    agg = search.aggregated()
    assert agg is not None and agg.verdict.ok
    assert not search.measure((agg.pods[0] - 1,)).verdict.ok or agg.pods == (1,)
    pd = search.disaggregated(agg.pods[0])
    assert pd is not None and pd.verdict.ok and pd.extra["disaggregated_share"] > 0
    n = sum(pd.pods)
    assert n == 2 or search.best_split(n - 1) is None, "one pod fewer has no passing split"
    d = pd.pods[1]
    assert d == 1 or not search.measure((n - d + 1, d - 1)).verdict.ok, "one decode pod fewer misses"
    out, png = tmp_path / "pd.json", tmp_path / "pd.png"
    code = capacity(["--pd-compare", "--trace", str(trace), "--preset", "llama3-8b-a100", "--rate-scale", "1",
                     "--slo-ttft-ms", "500", "--slo-tpot-ms", "30", "--max-tokens-policy", "fixed:256",
                     "--long-context", "8192", "--max-pods", "12", "--duration", "8", "--policy", "load-prefix",
                     "--quiet", "--out", str(out), "--plot", str(png)])
    assert code == 0 and png.stat().st_size > 10_000
    doc = json.loads(out.read_text())
    assert doc["winner"] in ("pd", "aggregated", "tie") and doc["settings"]["duration_s"] == 8
    assert doc["space"]["pd_policy"] == "pd-load-prefix" and doc["slo"]["tpot_ms"] == 30
    assert all(t["ok"] == (t["ttft_ok"] and t["tpot_ok"]) for t in doc["trials"])
    assert doc["settings"]["workload"]["requests"] < 300


def test_pd_compare_flag_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="one TP"):
        capacity(["--pd-compare", "--tp", "4,8", "--quiet"])
    with pytest.raises(ConfigError, match="own pools"):
        capacity(["--pd-compare", "--config", "dual-pool", "--quiet"])
