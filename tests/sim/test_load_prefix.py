"""``load-prefix``: llm-d's default profile (queue 2, KV 2, prefix 3, max score) as a replay policy."""

from __future__ import annotations

import pytest

from sim.cluster.config import ClusterConfig, single_pool
from sim.cluster.policy import PodSnapshot, PolicyContext, RequestView, ScrapedMetrics
from sim.cluster.registry import PolicyRegistry
from sim.cluster.simulation import ClusterSimulation, ReplayItem
from sim.engine.config import EngineConfig
from sim.engine.errors import ConfigError
from tests.sim.test_pipeline_policies import items

REQUEST = RequestView("r", 0.0, 800, 50, None, "k", tuple(range(50)))


def snap(pod: str, waiting: int, kv: float, prefix: float, in_flight: int = 0) -> PodSnapshot:
    return PodSnapshot(pod, "p", 8192, ScrapedMetrics(waiting, in_flight, kv, 0, 0.0), in_flight, 0, prefix)


def build(**options: str):  # type: ignore[no-untyped-def]
    return PolicyRegistry().build("load-prefix", PolicyContext(1, [("a", "p"), ("b", "p"), ("c", "p")], options))


CASES = [
    # a: 2·1 + 2·0.5 + 0 = 3.0;  b: 0 + 2·0.8 + 3·1 = 4.6;  c: 2·0.5 + 2·0.1 + 3·0.5 = 2.7
    ("prefix outweighs a long queue", [snap("a", 0, 0.5, 0.0), snap("b", 4, 0.2, 1.0), snap("c", 2, 0.9, 0.5)],
     {}, "b"),
    # same pods, prefix weight 0: a = 3.0, b = 1.6, c = 1.2
    ("weights are options", [snap("a", 0, 0.5, 0.0), snap("b", 4, 0.2, 1.0), snap("c", 2, 0.9, 0.5)],
     {"prefix_weight": "0"}, "a"),
    # no prefix anywhere, equal queues (all 1.0): the freest KV wins
    ("kv breaks a queue tie", [snap("a", 1, 0.7, 0.0), snap("b", 1, 0.3, 0.0), snap("c", 1, 0.5, 0.0)], {}, "b"),
    # router-side in-flight is not the queue scorer's signal (llm-d reads the scraped waiting queue)
    ("in-flight ignored", [snap("a", 0, 0.5, 0.0, in_flight=30), snap("b", 3, 0.5, 0.0)], {}, "a"),
]


@pytest.mark.parametrize(("name", "pods", "options", "winner"), CASES, ids=[c[0] for c in CASES])
def test_scores_like_the_llm_d_default_profile(name: str, pods: list[PodSnapshot], options: dict[str, str],
                                               winner: str) -> None:
    decision = build(**options).choose(REQUEST, pods)
    assert decision.pod_id == winner and decision.predicted_ttft_ms is None


def test_ties_are_broken_at_random() -> None:
    policy = build()
    pods = [snap("a", 0, 0.2, 0.0), snap("b", 0, 0.2, 0.0)]
    assert {policy.choose(REQUEST, pods).pod_id for _ in range(40)} == {"a", "b"}


def test_listed_by_the_registry_and_strict_about_options() -> None:
    assert "load-prefix" in PolicyRegistry().names()
    with pytest.raises(ConfigError, match="queue_wieght"):
        build(queue_wieght="1")


def run(cfg: ClusterConfig, work: list[ReplayItem]) -> ClusterSimulation:
    sim = ClusterSimulation(cfg, PolicyRegistry().build("load-prefix", PolicyContext(1, cfg.pod_ids())), seed=1)
    sim.run(work)
    return sim


@pytest.mark.timeout(120)
def test_replay_spreads_load_and_keeps_sessions_sticky() -> None:
    cfg = single_pool(4, EngineConfig.from_preset("llama3-8b-a100"))
    sim = run(cfg, items(800, rate=6.0, sticky=False))
    served = [r.pod_id for r in sim.records if r.pod_id]
    assert len(served) == 800 and len(set(served)) == 4
    sticky = run(cfg, items(300, rate=2.0, sticky=True))
    pods = [r.pod_id for r in sticky.records if r.pod_id]
    top = max(set(pods), key=pods.count)
    assert pods.count(top) / len(pods) > 0.5, "one shared prefix: the prefix scorer keeps it on its pod"
