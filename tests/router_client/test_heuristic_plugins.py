"""The round-robin picker and the in-flight scorer, and the heuristic profiles built from them."""

from __future__ import annotations

import random

import pytest

from router_client.config import PluginSpec, SchedulerConfig
from router_client.scheduling.contracts import Candidate, SchedulingRequest
from router_client.scheduling.engine import Scheduler
from router_client.scheduling.registry import default_registry

REQ = SchedulingRequest("r", 100)


def cand(pod: str, waiting: int = 0, running: int = 0, kv: float = 0.0) -> Candidate:
    return Candidate(pod=pod, kv_cache=kv, waiting=waiting, running=running, prefill_tokens_in_flight=0,
                     prefix_score=0.0)


def test_round_robin_cycles_in_candidate_order_ignoring_scores() -> None:
    picker = default_registry().picker(PluginSpec(name="round-robin"))
    cands = [cand("a"), cand("b"), cand("c")]
    picks = [picker.pick(cands, [0.0, 1.0, 0.5], random.Random(0)) for _ in range(7)]
    assert picks == [0, 1, 2, 0, 1, 2, 0]


def test_round_robin_survives_a_shorter_candidate_list() -> None:
    picker = default_registry().picker(PluginSpec(name="round-robin"))
    assert [picker.pick([cand("a"), cand("b")], [1.0, 1.0], random.Random(0)) for _ in range(3)] == [0, 1, 0]
    assert picker.pick([cand("a")], [1.0], random.Random(0)) == 0


IN_FLIGHT_CASES = [
    ("min-max normalised", [cand("a", running=0), cand("b", running=2), cand("c", running=4)], [1.0, 0.5, 0.0]),
    ("all equal: 1", [cand("a", running=3), cand("b", running=3)], [1.0, 1.0]),
    ("waiting ignored", [cand("a", waiting=9, running=1), cand("b", running=2)], [1.0, 0.0]),
]


@pytest.mark.parametrize(("name", "cands", "want"), IN_FLIGHT_CASES, ids=[c[0] for c in IN_FLIGHT_CASES])
def test_in_flight_scorer(name: str, cands: list[Candidate], want: list[float]) -> None:
    scorer = default_registry().scorer(PluginSpec(name="in-flight-scorer"))
    assert scorer.score(REQ, cands) == pytest.approx(want)


def _least_queue() -> Scheduler:
    scorers = [PluginSpec(name="queue-scorer"), PluginSpec(name="in-flight-scorer", weight=0.001)]
    return Scheduler.from_config(SchedulerConfig(filters=[], scorers=scorers, fallback_scorers=scorers,
                                                 picker=PluginSpec(name="max")))


def test_in_flight_breaks_queue_ties_but_never_beats_a_shorter_queue() -> None:
    sched = _least_queue()
    rng = random.Random(0)
    assert sched.schedule(REQ, [cand("a", running=3), cand("b", running=1)], rng).index == 1
    assert sched.schedule(REQ, [cand("a", waiting=0, running=9), cand("b", waiting=1)], rng).index == 0
