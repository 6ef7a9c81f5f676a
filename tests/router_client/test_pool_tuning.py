"""Pool tuning: pressure, threshold steps and bounds, split, config validation, the router hook and metrics."""

from __future__ import annotations

import asyncio
import random

import pytest
from prometheus_client import generate_latest

from router_client.config import RouterConfig, TuningConfig
from router_client.endpoints import PodMetrics
from router_client.errors import RouterConfigError
from router_client.pool_tuning import PoolTuner
from router_client.router import RequestInfo, Router

SHORT_CTX = 4096


def tuner(**cfg: object) -> PoolTuner:
    base = {"enabled": True, "apply": True, "interval_s": 10.0, "min_samples": 50, "min_threshold_tokens": 1024,
            "max_step_tokens": 4096}
    return PoolTuner(TuningConfig.model_validate({**base, **cfg}), "short", "long", {"short": 6, "long": 2},
                     SHORT_CTX, 512, 2048, now=0.0)


def feed(t: PoolTuner, n: int = 1000, seed: int = 0) -> None:
    """Budgets like the conv trace: prompts 100..3500 tokens, expected output 200, max_tokens 512."""
    rng = random.Random(seed)
    for _ in range(n):
        t.observe_budget(rng.randint(100, 3500), 200, 512)


def load(t: PoolTuner, short_queue: float, long_queue: float, samples: int = 5) -> None:
    for _ in range(samples):
        t.observe_load("short", short_queue, 0)
        t.observe_load("long", long_queue, 0)


def test_no_recommendation_before_min_samples_or_interval() -> None:
    t = tuner()
    feed(t, 10)
    assert t.update(5.0) is None          # interval not reached
    assert t.update(10.0) is None         # too few budgets
    feed(t, 100)
    rec = t.update(20.0)
    assert rec is not None and rec.reason.startswith("hold")


@pytest.mark.parametrize(("short_q", "long_q", "moves"), [
    (0.0, 0.0, 0),       # nobody pressured: hold
    (0.0, 6.0, +1),      # long pool pressured: raise (more goes short)
    (6.0, 0.0, -1),      # short pool pressured: lower
    (4.0, 4.4, 0),       # both pressured about equally: hold (hysteresis)
])
def test_threshold_moves_away_from_the_pressured_pool(short_q: float, long_q: float, moves: int) -> None:
    t = tuner()
    feed(t)
    load(t, short_q, long_q)
    rec = t.update(10.0)
    assert rec is not None
    sign = (rec.threshold_tokens > 2048) - (rec.threshold_tokens < 2048)
    assert sign == moves, rec
    assert t.threshold == rec.threshold_tokens
    assert rec.split == {"short": 6 - moves, "long": 2 + moves}     # a pod towards the pressured pool


def test_a_step_moves_about_step_work_share() -> None:
    t = tuner(step_work_share=0.1)
    feed(t)
    load(t, 0.0, 6.0)
    before = t.update(10.0)
    assert before is not None
    shares = t._shares()
    assert shares.at(before.threshold_tokens)[1] - shares.at(2048)[1] == pytest.approx(0.1, abs=0.01)


def test_bounds_and_max_step_hold() -> None:
    t = tuner(max_step_tokens=100, max_threshold_tokens=2100)
    feed(t)
    for k in range(1, 6):
        load(t, 0.0, 10.0)
        t.update(10.0 * k)
    assert t.threshold == 2100                      # capped by max_threshold_tokens, in steps of <= 100
    t = tuner(min_threshold_tokens=1900)
    feed(t)
    for k in range(1, 6):
        load(t, 10.0, 0.0)
        t.update(10.0 * k)
    assert t.threshold == 1900


def test_threshold_never_exceeds_the_short_context() -> None:
    t = tuner(max_threshold_tokens=100_000)
    assert t.max_threshold == SHORT_CTX


def test_recommend_only_does_not_move_the_threshold() -> None:
    t = tuner(apply=False)
    feed(t)
    load(t, 0.0, 6.0)
    rec = t.update(10.0)
    assert rec is not None and rec.threshold_tokens > 2048 and not rec.applied
    assert t.threshold == 2048


def test_preemptions_and_late_predictions_count_as_pressure() -> None:
    t = tuner()
    feed(t)
    t.observe_load("long", 0.0, 100)
    t.observe_load("long", 0.0, 110)          # 10 preemptions over 100 completions = 100 per 1k
    for _ in range(100):
        t.observe_completion("long")
    for i in range(20):
        t.observe_headroom("short", 900.0 if i < 4 else 100.0, 500.0)   # 20 % late
    rec = t.update(10.0)
    assert rec is not None
    assert rec.pressure["long"] == pytest.approx(100 / 5.0)
    assert rec.pressure["short"] == pytest.approx(0.2 / 0.05)


def test_split_keeps_min_pods() -> None:
    t = PoolTuner(TuningConfig(enabled=True, interval_s=1.0, min_samples=10, min_pods=2), "short", "long",
                  {"short": 2, "long": 3}, SHORT_CTX, 512, 2048)
    feed(t, 100)
    load(t, 10.0, 0.0)
    rec = t.update(1.0)
    assert rec is not None and rec.split == {"short": 3, "long": 2}
    load(t, 0.0, 10.0)
    rec = t.update(2.0)
    assert rec is not None and rec.split == {"short": 2, "long": 3}


POOLS = [{"name": "short", "pods": ["http://s0", "http://s1"], "max_context": 4096},
         {"name": "long", "pods": ["http://l0"], "max_context": 32768}]


@pytest.mark.parametrize(("data", "needle"), [
    ({"pools": POOLS[:1], "tuning": {"enabled": True}}, "tuning needs a short and a long pool"),
    ({"pools": POOLS, "tuning": {"enabled": True, "long_pool": "nope"}}, "tuning needs a short and a long pool"),
    ({"pools": POOLS, "tuning": {"enabled": True, "min_threshold_tokens": 3000, "max_threshold_tokens": 2000}},
     "max_threshold_tokens"),
    ({"pools": POOLS, "tuning": {"enabled": True, "step_work_share": 0}}, "step_work_share"),
    ({"pools": POOLS, "tuning": {"enabled": True, "bogus": 1}}, "bogus"),
])
def test_bad_tuning_config_names_the_key(data: dict, needle: str) -> None:
    with pytest.raises(RouterConfigError, match=needle):
        RouterConfig.parse(data)


def test_router_applies_the_threshold_and_exports_it() -> None:
    now = [0.0]
    cfg = RouterConfig.parse({"pools": POOLS, "tuning": {"enabled": True, "apply": True, "interval_s": 5,
                                                         "min_samples": 20, "max_step_tokens": 4096}})
    router = Router(cfg, clock=lambda: now[0])
    assert router.tuning_status() is not None
    rng = random.Random(1)

    async def drive() -> None:
        for i in range(200):
            now[0] = i * 0.1
            router._state.publish({"http://l0": PodMetrics(waiting=8, scraped_at=now[0]),
                                   "http://s0": PodMetrics(scraped_at=now[0]),
                                   "http://s1": PodMetrics(scraped_at=now[0])})
            await router.decide(RequestInfo("/v1/completions", 0, prompt_tokens=rng.randint(100, 3000),
                                            max_tokens=256))

    asyncio.run(drive())
    status = router.tuning_status()
    assert status is not None and status["updates"] >= 2
    assert status["threshold_tokens"] > 2048                       # the long pool was pressured
    assert router._classifier.total_threshold == status["threshold_tokens"]
    text = generate_latest(router.metrics_registry).decode()
    assert f'router_tuning_threshold_tokens{{kind="in_force"}} {float(status["threshold_tokens"])}' in text
    assert 'router_tuning_recommended_pods{pool="long"} 2.0' in text
    assert "router_tuning_updates_total" in text


def test_router_without_tuning_has_no_tuning_metrics() -> None:
    router = Router(RouterConfig.parse({"pools": POOLS}))
    assert router.tuning_status() is None
    assert "router_tuning" not in generate_latest(router.metrics_registry).decode()
