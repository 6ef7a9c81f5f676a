"""One builder of feature rows and candidates: the router and the simulator's replay policies build the same
rows and schedule the same candidates for the same pod state."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

from router_client.candidates import candidates, pod_row
from router_client.config import PoolConfig, RouterConfig
from router_client.endpoints import EndpointState, PodMetrics
from router_client.pipeline import Outcome
from router_client.predictor_client import Prediction
from router_client.prefix_index import text_block_hashes
from router_client.router import Features, RequestInfo, Router
from router_client.scheduling.contracts import Candidate, SchedulingRequest
from sim.cluster.policy import PodSnapshot, PolicyContext, RequestView, ScrapedMetrics
from sim.policies.load_prefix import LoadPrefixPolicy
from sim.policies.predicted_latency import ALL, PredictedLatencyPolicy

NOW = 100.0
PODS = ["http://a:8000", "http://b:8000", "http://c:8000"]
PROMPT = "You are a terse assistant. " * 20


@dataclass(frozen=True)
class PodState:
    """What both a router and the replay know about one pod."""

    waiting: int
    scraped_running: int
    kv: float
    uncached: tuple[int, ...]
    """Uncached prompt tokens of each in-flight request (router side)."""
    first_tokens: int
    """How many of them have produced their first token."""
    prefix: float = 0.0

    @property
    def prefill(self) -> int:
        return sum(self.uncached[self.first_tokens:])


STATES = [
    PodState(3, 4, 0.5, (800, 200), 1, 0.25),
    PodState(0, 0, 0.0, (), 0, 0.0),
    PodState(7, 2, 1.0, (100, 300, 50), 0, 1.0),
]


def pool() -> PoolConfig:
    return PoolConfig(name="short", pods=PODS, pod_type="decode", pod_class="a100", pod_classes={PODS[1]: "h100"},
                      max_context=8192)


def load(state: EndpointState, states: Sequence[PodState]) -> None:
    state.publish({pod: PodMetrics(s.waiting, s.scraped_running, s.kv, 0, NOW)
                   for pod, s in zip(PODS, states, strict=True)})
    for pod, s in zip(PODS, states, strict=True):
        for j, tokens in enumerate(s.uncached):
            state.dispatch(f"{pod}#{j}", pod, tokens)
            if j < s.first_tokens:
                state.first_token(f"{pod}#{j}")


def snapshots(states: Sequence[PodState], prefix: Sequence[float] | None = None) -> list[PodSnapshot]:
    cfg = pool()
    return [PodSnapshot(pod, "short", 8192, ScrapedMetrics(s.waiting, s.scraped_running, s.kv, 0, NOW),
                        len(s.uncached), s.prefill, s.prefix if prefix is None else prefix[i], pod_type=cfg.pod_type,
                        pod_class=cfg.class_of(pod))
            for i, (pod, s) in enumerate(zip(PODS, states, strict=True))]


def view(prompt_tokens: int) -> RequestView:
    return RequestView("r1", NOW, prompt_tokens, None, 50, "s", ())


def test_pod_row_clamps_what_a_scrape_or_a_race_can_push_out_of_range() -> None:
    row = pod_row(prompt_tokens=10, kv_cache=1.3, waiting=0, running=0, prefill_tokens_in_flight=-5,
                  prefix_score=0.0, pod_type="", pod_class="")
    assert row["kv_cache_percentage"] == 1.0 and row["prefill_tokens_in_flight"] == 0
    assert row["num_tokens_generated"] == 1 and row["decode_tokens_in_flight"] == 0


@pytest.mark.parametrize("prediction", [(), (40.0, 9.0), (40.0, 9.0, 55.0, 11.0)], ids=["none", "routing", "admission"])
def test_candidates_take_the_row_and_the_prediction(prediction: tuple[float, ...]) -> None:
    row = pod_row(prompt_tokens=10, kv_cache=0.4, waiting=2, running=3, prefill_tokens_in_flight=70,
                  prefix_score=0.5, pod_type="", pod_class="")
    got = candidates(["p", "q"], [row, row], [prediction, prediction] if prediction else None)
    padded = (*prediction, None, None, None, None)
    assert got[1] == Candidate(pod="q", kv_cache=0.4, waiting=2, running=3, prefill_tokens_in_flight=70,
                               prefix_score=0.5, predicted_ttft_ms=padded[0], predicted_tpot_ms=padded[1], row=1,
                               admit_ttft_ms=padded[2], admit_tpot_ms=padded[3])


def test_router_and_replay_build_the_same_rows() -> None:
    state = EndpointState(PODS, stale_after_s=2.0, clock=lambda: NOW)
    load(state, STATES)
    router_rows = state.feature_rows(pool(), PODS, 1000, [s.prefix for s in STATES])
    sim_rows = [snap.features(view(1000)) for snap in snapshots(STATES)]
    assert router_rows == sim_rows
    assert [r["prefill_tokens_in_flight"] for r in router_rows] == [200, 0, 450]
    assert [r["pod_class"] for r in router_rows] == ["a100", "h100", "a100"]


def _ttft(running: float, waiting: float) -> float:
    return 50.0 + 20.0 * running + waiting


class InstantPredictions(Router):
    """The predictor answered in-process by the same formula as :class:`FormulaModel`."""

    async def _predict(self, pool: str, rows: list[Features],
                       started: float) -> tuple[list[Prediction] | None, str | None]:
        return [Prediction(_ttft(float(r["num_request_running"]), float(r["num_request_waiting"])),
                           10.0 + float(r["num_request_running"])) for r in rows], None


class FormulaModel:
    """A latency model for the replay policy answering by the same formula as :class:`InstantPredictions`."""

    def predict(self, name: str, cols: dict[str, np.ndarray]) -> np.ndarray:
        running, waiting = cols["num_request_running"], cols["num_request_waiting"]
        return _ttft(running, waiting) if name == "ttft" else 10.0 + running  # type: ignore[arg-type, return-value]


def _router_candidates(router_cls: type[Router], monkeypatch: pytest.MonkeyPatch) -> list[Candidate]:
    cfg = RouterConfig.model_validate({
        "pools": [pool().model_dump()], "scheduler": {"seed": 1}, "correction": {"enabled": False}})
    router = router_cls(cfg, clock=lambda: NOW)
    load(router._state, STATES)
    hashes = text_block_hashes(PROMPT, cfg.prefix.block_bytes, cfg.prefix.max_blocks_per_request)
    router._prefix.record(PODS[2], hashes)
    seen: list[Candidate] = []
    decide = router._core.decide

    def spy(pool: str, request: SchedulingRequest, cands: Sequence[Candidate]) -> Outcome:
        seen.extend(cands)
        return decide(pool, request, cands)

    monkeypatch.setattr(router._core, "decide", spy)
    asyncio.run(router.decide(RequestInfo("/v1/completions", 2000, 1000, 50, PROMPT, request_id="r1")))
    return seen


def _replay_candidates(policy: Any, target: Any, method: str, monkeypatch: pytest.MonkeyPatch) -> list[Candidate]:
    """The candidates ``policy`` hands to ``target.method`` (the decision core's ``decide(pool, request,
    candidates)`` or the scheduler's ``schedule(request, candidates, rng)``)."""
    seen: list[Candidate] = []
    original = getattr(target, method)
    at = 2 if method == "decide" else 1

    def spy(*args: Any) -> Any:
        seen.extend(args[at])
        return original(*args)

    monkeypatch.setattr(target, method, spy)
    policy.choose(view(1000), snapshots(STATES, prefix=[0.0, 0.0, 1.0]))
    return seen


def test_router_and_load_prefix_policy_schedule_the_same_candidates(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without predictions (the router's composite fallback; the llm-d profile in the replay)."""
    router = _router_candidates(Router, monkeypatch)
    policy = LoadPrefixPolicy(PolicyContext(seed=1, pods=[(p, "short") for p in PODS]))
    replay = _replay_candidates(policy, policy.scheduler, "schedule", monkeypatch)
    assert router == replay and len(router) == 3
    assert router[2].prefix_score == 1.0 and router[0].predicted_ttft_ms is None


def test_router_and_predicted_latency_policy_schedule_the_same_candidates(monkeypatch: pytest.MonkeyPatch) -> None:
    router = _router_candidates(InstantPredictions, monkeypatch)
    policy = PredictedLatencyPolicy(PolicyContext(seed=1, pods=[(p, "short") for p in PODS],
                                                  options={"correction": "false"}), dual=False)
    policy.models[ALL].model = FormulaModel()  # type: ignore[assignment]
    replay = _replay_candidates(policy, policy.core, "decide", monkeypatch)
    assert router == replay and len(router) == 3
    assert [c.predicted_ttft_ms for c in router] == [93.0, 50.0, 117.0]
