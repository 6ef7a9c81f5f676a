"""The clairvoyant bound: engine forks behave exactly like deep copies, and the policy picks the pod a
brute-force simulation (a deep copy of every pod, run to the end) says gives the earliest first token."""

from __future__ import annotations

import copy
import math
import random
from collections.abc import Sequence

import pytest

from sim.cluster.config import ClusterConfig, single_pool
from sim.cluster.policy import Completion, Decision, PodSnapshot, PolicyContext, RequestView
from sim.cluster.registry import PolicyRegistry
from sim.cluster.simulation import ClusterSimulation, ReplayItem, SimPod
from sim.engine import Engine, EngineConfig
from sim.engine.fork import first_token_at, fork_engine
from sim.engine.sequence import Sequence as EngineSeq
from sim.policies.clairvoyant import ClairvoyantPolicy

SYSTEM_PROMPTS = [tuple(range(base, base + n)) for base, n in ((1_000, 40), (2_000, 70), (3_000, 20))]


def tight_cfg(noise_std: float = 0.03) -> EngineConfig:
    """Small KV cache (prefix evictions and preemptions happen), chunked prefill, step-time noise."""
    return EngineConfig.from_preset("llama3-8b-a100", num_gpu_blocks_override=420, max_model_len=4096,
                                    max_num_seqs=24, max_num_batched_tokens=2048, noise_std=noise_std)


def workload(n: int, rate: float, seed: int = 0) -> list[ReplayItem]:
    """Half the prompts start with one of three shared system prompts; lengths 40-3,000 tokens."""
    rng = random.Random(seed)
    out, t = [], 0.0
    for i in range(n):
        t += rng.expovariate(rate)
        prompt = rng.choice((40, 300, 900, 1500, 3000))
        own = tuple(rng.getrandbits(62) for _ in range(prompt // 16))
        shared = rng.choice(SYSTEM_PROMPTS) if rng.random() < 0.5 else ()
        hashes = (shared + own)[: prompt // 16]
        output = rng.randint(5, 300)
        view = RequestView(f"r{i}", t, prompt, None, 512, f"s{i}", hashes)
        out.append(ReplayItem(view, output))
    return out


def deep_copy(engine: Engine) -> Engine:
    """The reference: a deep copy of the whole engine (sequence payloads left out, they point at the replay)."""
    memo: dict[int, object] = {id(s.payload): None for s in [*engine.waiting, *engine.running]}
    return copy.deepcopy(engine, memo)


def new_seq(view: RequestView) -> EngineSeq:
    return EngineSeq(view.request_id, view.prompt_tokens, 64, view.block_hashes)


def outcome(engine: Engine) -> list[tuple[str, float | None, float | None, int]]:
    """Everything the rest of the run decides: every sequence's first token, finish and preemptions."""
    seqs = [*engine.running, *engine.waiting]
    engine.advance_until(math.inf)
    return sorted((s.request_id, s.first_token_time, s.finish_time, s.preemptions) for s in seqs)


class ForkChecker:
    """Routes at random; at every 7th arrival checks, on every pod, a fork against a deep copy."""

    name = "fork-checker"

    def __init__(self, check: bool = True) -> None:
        self.check = check
        self.rng = random.Random(3)
        self.pods: dict[str, SimPod] = {}
        self.checked = 0
        self.evicting = 0
        self.n = 0

    def bind_pods(self, pods: Sequence[SimPod]) -> None:
        self.pods = {p.pod_id: p for p in pods}

    def choose(self, request: RequestView, pods: Sequence[PodSnapshot]) -> Decision:
        self.n += 1
        if self.check and self.n % 7 == 0:
            for pod in self.pods.values():
                self._check(pod.engine, request)
        return Decision.route(pods[self.rng.randrange(len(pods))].pod_id)

    def _check(self, engine: Engine, request: RequestView) -> None:
        fork, ref = fork_engine(engine), deep_copy(engine)
        seq_f, seq_r = new_seq(request), new_seq(request)
        assert first_token_at(fork, seq_f, request.arrival_s) == first_token_at(ref, seq_r, request.arrival_s)
        assert fork.pool.num_free == ref.pool.num_free
        assert fork.pool.num_cached == ref.pool.num_cached
        for hashes in [request.block_hashes, *SYSTEM_PROMPTS]:
            assert fork.pool.match_prefix(hashes) == ref.pool.match_prefix(hashes)
        evictions = fork.pool.evictions
        assert outcome(fork) == outcome(ref)
        assert fork.pool.num_free == ref.pool.num_free and fork.pool.evictions == ref.pool.evictions
        self.evicting += fork.pool.evictions > evictions
        self.checked += 1

    def on_complete(self, completion: Completion) -> None:
        return None


@pytest.mark.timeout(120)
def test_a_fork_runs_exactly_like_a_deep_copy_and_leaves_the_engine_untouched() -> None:
    cfg = single_pool(3, tight_cfg())
    checker = ForkChecker()
    sim = ClusterSimulation(cfg, checker, seed=2)
    baseline = ClusterSimulation(cfg, ForkChecker(check=False), seed=2)
    work = workload(400, rate=6.0)
    result, reference = sim.run(work), baseline.run(work)
    assert checker.checked > 100 and checker.evicting > 0
    assert sum(p.preemptions for p in result.pods) > 0
    assert [(r.pod_id, r.ttft_ms, r.e2e_ms) for r in result.records] == \
        [(r.pod_id, r.ttft_ms, r.e2e_ms) for r in reference.records]


class BruteForceCheck(ClairvoyantPolicy):
    """The clairvoyant, checked at every decision against deep copies of every candidate run to the end."""

    def __init__(self, ctx: PolicyContext) -> None:
        super().__init__(ctx)
        self.mismatches: list[str] = []
        self.contested = 0

    def choose(self, request: RequestView, pods: Sequence[PodSnapshot]) -> Decision:
        decision = super().choose(request, pods)
        times: dict[str, float] = {}
        for snap in pods:
            ref = deep_copy(self._pods[snap.pod_id].engine)
            seq = new_seq(request)
            ref.add(seq, request.arrival_s)
            ref.advance_until(math.inf)
            assert seq.first_token_time is not None
            times[snap.pod_id] = seq.first_token_time
        best = min(times.values())
        winners = [p.pod_id for p in pods if times[p.pod_id] == best]
        self.contested += len(set(times.values())) > 1
        if decision.pod_id != winners[0]:
            self.mismatches.append(f"{request.request_id}: chose {decision.pod_id}, brute force {times}")
        assert decision.predicted_ttft_ms == pytest.approx((best - request.arrival_s) * 1e3)
        return decision


@pytest.mark.timeout(120)
@pytest.mark.parametrize("noise_std", [0.03, 0.0])
def test_it_picks_the_pod_brute_force_simulation_says_is_best(noise_std: float) -> None:
    cfg: ClusterConfig = single_pool(3, tight_cfg(noise_std))
    policy = BruteForceCheck(PolicyContext(seed=0, pods=cfg.pod_ids()))
    ClusterSimulation(cfg, policy, seed=1).run(workload(250, rate=7.0, seed=5))
    assert not policy.mismatches, "\n".join(policy.mismatches[:5])
    assert policy.contested > 100
    status = policy.status()
    assert status["decisions"] == 250 and status["forks"] == 750


def test_ties_go_to_the_fewest_in_flight_then_the_first_candidate() -> None:
    cfg = single_pool(3, tight_cfg(noise_std=0.0))
    policy = ClairvoyantPolicy(PolicyContext(seed=0, pods=cfg.pod_ids()))
    sim = ClusterSimulation(cfg, policy, seed=0)
    view = RequestView("r0", 0.0, 100, None, 16, "k", ())
    assert policy.choose(view, sim._snapshots(view)).pod_id == "pod-0"  # three idle pods, identical engines
    busy = RequestView("r1", 0.0, 3000, None, 16, "b", ())
    sim._dispatch(ReplayItem(busy, 16), 0.0)
    assert sim.records[-1].pod_id == "pod-0"
    assert policy.choose(view, sim._snapshots(view)).pod_id == "pod-1"


def test_registered_and_reports_its_cost() -> None:
    cfg = single_pool(2, tight_cfg())
    policy = PolicyRegistry().build("clairvoyant", PolicyContext(seed=0, pods=cfg.pod_ids()))
    result = ClusterSimulation(cfg, policy, seed=0).run(workload(60, rate=3.0))
    assert all(r.ttft_ms is not None and r.predicted_ttft_ms is not None for r in result.records)
    status = policy.status()  # type: ignore[attr-defined]
    assert status["decisions"] == 60 and status["ms_per_decision"] > 0
    with pytest.raises(ValueError, match="unknown policy options"):
        ClairvoyantPolicy(PolicyContext(seed=0, pods=cfg.pod_ids(), options={"depth": "2"}))
