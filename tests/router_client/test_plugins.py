"""Table-driven tests of every scheduling plugin, the engine rules and the registry."""

from __future__ import annotations

import random

import pytest

from router_client.config import PluginSpec, SchedulerConfig
from router_client.errors import RouterConfigError
from router_client.scheduling.contracts import Candidate, SchedulingRequest
from router_client.scheduling.engine import Scheduler
from router_client.scheduling.filters.prefix_affinity import Params as AffinityParams
from router_client.scheduling.filters.prefix_affinity import PrefixAffinity
from router_client.scheduling.filters.slo_headroom import Params as SloParams
from router_client.scheduling.filters.slo_headroom import SloHeadroom
from router_client.scheduling.pickers.max_score import MaxScore
from router_client.scheduling.pickers.max_score import Params as MaxParams
from router_client.scheduling.pickers.weighted_random import Params as WrParams
from router_client.scheduling.pickers.weighted_random import WeightedRandom
from router_client.scheduling.registry import default_registry
from router_client.scheduling.scorers.composite import Composite
from router_client.scheduling.scorers.composite import Params as CompositeParams
from router_client.scheduling.scorers.latency_headroom import LatencyHeadroom
from router_client.scheduling.scorers.latency_headroom import Params as HeadroomParams

REQ = SchedulingRequest("r", 1000)


def cand(pod: str, kv: float = 0.0, waiting: int = 0, running: int = 0, prefix: float = 0.0,
         ttft: float | None = None, tpot: float | None = None) -> Candidate:
    return Candidate(pod=pod, kv_cache=kv, waiting=waiting, running=running, prefill_tokens_in_flight=0,
                     prefix_score=prefix, predicted_ttft_ms=ttft, predicted_tpot_ms=tpot)

AFFINITY_CASES = [
    # (name, candidates, expected pods kept)
    ("no prefix anywhere: all", [cand("a"), cand("b")], ["a", "b"]),
    ("below min_score: all", [cand("a", prefix=0.3), cand("b")], ["a", "b"]),
    ("affine pod, cheap: sticky", [cand("a", prefix=0.9, ttft=120, tpot=10), cand("b", ttft=100, tpot=10)], ["a"]),
    ("affine pod, too slow: all", [cand("a", prefix=0.9, ttft=900, tpot=10), cand("b", ttft=100, tpot=10)],
     ["a", "b"]),
    ("keep_ratio keeps near-best", [cand("a", prefix=0.9, ttft=1, tpot=1), cand("b", prefix=0.85, ttft=1, tpot=1),
                                    cand("c", prefix=0.2, ttft=1, tpot=1)], ["a", "b"]),
    ("no predictions, small load gap: sticky", [cand("a", prefix=1.0, waiting=2), cand("b")], ["a"]),
    ("no predictions, large load gap: all", [cand("a", prefix=1.0, waiting=9), cand("b")], ["a", "b"]),
    ("every pod affine: all", [cand("a", prefix=1.0), cand("b", prefix=1.0)], ["a", "b"]),
]


@pytest.mark.parametrize(("name", "cands", "kept"), AFFINITY_CASES, ids=[c[0] for c in AFFINITY_CASES])
def test_prefix_affinity(name: str, cands: list, kept: list[str]) -> None:
    out = PrefixAffinity(AffinityParams()).filter(REQ, cands)
    assert [c.pod for c in out] == kept


SLO_CASES = [
    ("no SLO: all", SchedulingRequest("r", 1), [cand("a", ttft=500, tpot=50), cand("b", ttft=50, tpot=5)],
     ["a", "b"]),
    ("ttft SLO keeps positive tier", SchedulingRequest("r", 1, 100.0), [cand("a", ttft=500, tpot=5),
                                                                         cand("b", ttft=50, tpot=5)], ["b"]),
    ("tpot SLO", SchedulingRequest("r", 1, None, 20.0), [cand("a", ttft=5, tpot=30), cand("b", ttft=50, tpot=10)],
     ["b"]),
    ("both SLOs, nobody meets both: negative tier = all", SchedulingRequest("r", 1, 100.0, 20.0),
     [cand("a", ttft=50, tpot=30), cand("b", ttft=500, tpot=10)], ["a", "b"]),
    ("missing predictions: all", SchedulingRequest("r", 1, 100.0), [cand("a"), cand("b", ttft=50, tpot=5)],
     ["a", "b"]),
]


@pytest.mark.parametrize(("name", "req", "cands", "kept"), SLO_CASES, ids=[c[0] for c in SLO_CASES])
def test_slo_headroom(name: str, req: SchedulingRequest, cands: list, kept: list[str]) -> None:
    assert [c.pod for c in SloHeadroom(SloParams()).filter(req, cands)] == kept


HEADROOM_CASES = [
    ("best gets 1, twice as slow ≈ ½", REQ, {}, [cand("a", ttft=100, tpot=10), cand("b", ttft=200, tpot=10)],
     [1.0, 0.8 * 101 / 201 + 0.2]),
    ("ttft_weight 0 uses tpot only", REQ, {"ttft_weight": 0.0},
     [cand("a", ttft=100, tpot=10), cand("b", ttft=200, tpot=21)], [1.0, 11 / 22]),
    ("SLO headroom averaged in", SchedulingRequest("r", 1, 400.0), {"ttft_weight": 1.0},
     [cand("a", ttft=100, tpot=1), cand("b", ttft=400, tpot=1)], [0.5 + 0.5 * 0.75, 0.5 * 101 / 401]),
    ("no predictions: zeros", REQ, {}, [cand("a"), cand("b")], [0.0, 0.0]),
]


@pytest.mark.parametrize(("name", "req", "params", "cands", "want"), HEADROOM_CASES,
                         ids=[c[0] for c in HEADROOM_CASES])
def test_latency_headroom(name: str, req: SchedulingRequest, params: dict, cands: list, want: list[float]) -> None:
    got = LatencyHeadroom(HeadroomParams(**params)).score(req, cands)
    assert got == pytest.approx(want)


COMPOSITE_CASES = [
    ("idle pods tie (no prefix: 3/4)", {}, [cand("a"), cand("b")], [0.75, 0.75]),
    ("queue only", {"kv_weight": 0, "prefix_weight": 0}, [cand("a", waiting=4), cand("b", running=2)], [0.0, 0.5]),
    ("kv only", {"queue_weight": 0, "prefix_weight": 0}, [cand("a", kv=0.75), cand("b", kv=0.25)], [0.25, 0.75]),
    ("prefix only", {"queue_weight": 0, "kv_weight": 0}, [cand("a", prefix=0.5), cand("b")], [0.5, 0.0]),
]


@pytest.mark.parametrize(("name", "params", "cands", "want"), COMPOSITE_CASES, ids=[c[0] for c in COMPOSITE_CASES])
def test_composite(name: str, params: dict, cands: list, want: list[float]) -> None:
    assert Composite(CompositeParams(**params)).score(REQ, cands) == pytest.approx(want)


LLMD_CASES = [
    # llm-d's default-profile scorers: (plugin, candidates, scores)
    ("queue-scorer", [cand("a", waiting=0), cand("b", waiting=4), cand("c", waiting=2)], [1.0, 0.0, 0.5]),
    ("queue-scorer", [cand("a", waiting=3), cand("b", waiting=3)], [1.0, 1.0]),
    ("queue-scorer", [cand("a", waiting=1, running=40), cand("b", waiting=2)], [1.0, 0.0]),
    ("kv-cache-utilization-scorer", [cand("a", kv=0.0), cand("b", kv=0.25), cand("c", kv=1.0)], [1.0, 0.75, 0.0]),
    ("prefix-cache-scorer", [cand("a", prefix=0.0), cand("b", prefix=0.6)], [0.0, 0.6]),
]


@pytest.mark.parametrize(("plugin", "cands", "want"), LLMD_CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(LLMD_CASES)])
def test_llm_d_default_profile_scorers(plugin: str, cands: list, want: list[float]) -> None:
    scorer = default_registry().scorer(PluginSpec(name=plugin))
    assert scorer.score(REQ, cands) == pytest.approx(want)


MAX_CASES = [
    ("clear max", [0.1, 0.9, 0.5], {1}),
    ("ties random among tops", [0.9, 0.2, 0.9], {0, 2}),
    ("all zero: any", [0.0, 0.0], {0, 1}),
]


@pytest.mark.parametrize(("name", "scores", "allowed"), MAX_CASES, ids=[c[0] for c in MAX_CASES])
def test_max_picker(name: str, scores: list[float], allowed: set[int]) -> None:
    rng = random.Random(1)
    picks = {MaxScore(MaxParams()).pick([cand(str(i)) for i in range(len(scores))], scores, rng) for _ in range(50)}
    assert picks == allowed


WR_CASES = [
    ("zero score never picked", 1.0, [0.0, 1.0], {1: 1.0}),
    ("proportional at power 1", 1.0, [1.0, 3.0], {0: 0.25, 1: 0.75}),
    ("power sharpens", 2.0, [1.0, 3.0], {0: 0.1, 1: 0.9}),
    ("all zero: uniform", 4.0, [0.0, 0.0], {0: 0.5, 1: 0.5}),
]


@pytest.mark.parametrize(("name", "power", "scores", "shares"), WR_CASES, ids=[c[0] for c in WR_CASES])
def test_weighted_random(name: str, power: float, scores: list[float], shares: dict[int, float]) -> None:
    rng = random.Random(7)
    picker = WeightedRandom(WrParams(power=power))
    cands = [cand(str(i)) for i in range(len(scores))]
    n = 4000
    counts = [0] * len(scores)
    for _ in range(n):
        counts[picker.pick(cands, scores, rng)] += 1
    for i, share in shares.items():
        assert counts[i] / n == pytest.approx(share, abs=0.03)
    assert sum(counts[i] for i in shares) == n


class _Wild:
    name = "wild"

    def __init__(self, values: list[float]) -> None:
        self.values = values

    def score(self, request: SchedulingRequest, candidates: list) -> list[float]:
        return self.values


def test_engine_clamps_and_weights() -> None:
    reg = default_registry()
    wild = _Wild([5.0, float("nan")])
    sched = Scheduler([], [(wild, 2.0)], [], reg.picker(PluginSpec(name="max")))
    res = sched.schedule(REQ, [cand("a", ttft=1, tpot=1), cand("b", ttft=1, tpot=1)], random.Random(0))
    assert res.scores == (2.0, 0.0)
    assert res.index == 0 and res.reason == "predicted"


def test_engine_uses_fallback_scorers_without_predictions() -> None:
    sched = Scheduler.from_config(SchedulerConfig(picker=PluginSpec(name="max")))
    res = sched.schedule(REQ, [cand("a", waiting=5), cand("b")], random.Random(0))
    assert res.reason == "composite" and res.index == 1


def test_engine_no_endpoint_when_filter_empties() -> None:
    class Empty:
        name = "empty"

        def filter(self, request: SchedulingRequest, candidates: list) -> list:
            return []

    sched = Scheduler([Empty()], [], [], default_registry().picker(PluginSpec(name="max")))
    res = sched.schedule(REQ, [cand("a")], random.Random(0))
    assert res.index is None and res.reason == "no_endpoint:empty"


REGISTRY_ERRORS = [
    ({"filters": [{"name": "nope"}]}, "unknown filter plugin 'nope'"),
    ({"scorers": [{"name": "max"}]}, "unknown scorer plugin 'max'"),
    ({"picker": {"name": "weighted-random", "params": {"powr": 2}}}, "invalid params"),
    ({"fallback_scorers": [{"name": "composite", "params": {"kv_weight": -1}}]}, "invalid params"),
]


@pytest.mark.parametrize(("cfg", "message"), REGISTRY_ERRORS)
def test_registry_rejects_unknown_plugins_and_params(cfg: dict, message: str) -> None:
    with pytest.raises(RouterConfigError, match=message):
        Scheduler.from_config(SchedulerConfig.model_validate(cfg))
