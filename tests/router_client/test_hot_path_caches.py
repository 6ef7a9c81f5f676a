"""What the decision keeps between decisions gives what it would compute afresh: the scraped part of each feature
row (per snapshot), the stale-pod check (per snapshot and pods tuple), the candidates' constructor and the prefix
scores' inlined loop, the sorted output history."""

from __future__ import annotations

import dataclasses
import math
import random

import pytest

from router_client.candidates import _candidate, pod_row
from router_client.config import PoolConfig
from router_client.endpoints import EndpointState, PodMetrics
from router_client.prefix_index import PrefixIndex, text_block_hashes
from router_client.scheduling.contracts import Candidate

PODS = ("http://a:1", "http://b:1", "http://c:1")


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def _pool(name: str = "short", pod_type: str = "", pods: tuple[str, ...] = PODS) -> PoolConfig:
    return PoolConfig(name=name, pods=list(pods), pod_type=pod_type, pod_class="a100",
                      pod_classes={pods[1]: "h100"}, max_context=8192)


def _fresh_rows(state: EndpointState, pool: PoolConfig, pods: tuple[str, ...], prompt: int,
                prefix: list[float]) -> list[dict[str, float | int | str]]:
    snap = state.snapshot
    return [pod_row(prompt_tokens=prompt, kv_cache=snap.get(p, PodMetrics()).kv_cache,
                    waiting=snap.get(p, PodMetrics()).waiting, running=state.running(p),
                    prefill_tokens_in_flight=state.prefill_in_flight(p), prefix_score=s, pod_type=pool.pod_type,
                    pod_class=pool.class_of(p)) for p, s in zip(pods, prefix, strict=True)]


def test_feature_rows_follow_every_scrape_dispatch_and_membership_change() -> None:
    clock = Clock()
    state = EndpointState(PODS, 5.0, clock)
    short, long = _pool(), _pool("long", "decode")
    prefix = [0.0, 0.5, 1.0]

    def check(pods: tuple[str, ...] = PODS) -> None:
        for pool in (short, long):
            scores = prefix[:len(pods)]
            assert state.feature_rows(pool, pods, 700, scores) == _fresh_rows(state, pool, pods, 700, scores)

    check()
    state.publish({PODS[0]: PodMetrics(waiting=3, kv_cache=0.4, scraped_at=99.0)})
    check()
    state.dispatch(1, PODS[0], 300)
    check()
    state.publish({PODS[0]: PodMetrics(waiting=0, kv_cache=1.7, scraped_at=100.0),
                   PODS[2]: PodMetrics(waiting=9, kv_cache=0.1, scraped_at=100.0)})
    check()
    state.add("http://d:1")
    state.publish({"http://d:1": PodMetrics(waiting=1, scraped_at=100.0)})
    check((*PODS, "http://d:1")[1:])
    state.drop(PODS[1])
    check((PODS[0], PODS[2]))
    row = state.feature_rows(short, PODS, 10, prefix)[0]
    row["num_request_waiting"] = 1000
    assert state.feature_rows(short, PODS, 10, prefix)[0]["num_request_waiting"] == 0, "each row is a copy"


def test_stale_follows_the_clock_and_each_scrape() -> None:
    clock = Clock()
    state = EndpointState(PODS, 5.0, clock)

    def fresh(pods: tuple[str, ...]) -> set[str]:
        return {p for p in pods if state.is_stale(p)}

    rng = random.Random(3)
    for _ in range(300):
        if rng.random() < 0.3:
            state.publish({rng.choice(PODS): PodMetrics(scraped_at=clock.t - rng.uniform(0.0, 8.0))})
        clock.t += rng.uniform(0.0, 2.0)
        pods = PODS if rng.random() < 0.7 else PODS[:2]
        assert set(state.stale(pods)) == fresh(pods)
    assert set(state.stale(())) == set()


def test_candidate_constructor_equals_the_keyword_one_and_stays_frozen() -> None:
    values = ("http://a:1", 0.25, 3, 4, 700, 0.5, 120.0, None, 2, 300.0, None)
    built = _candidate(*values)
    assert built == Candidate(**dict(zip([f.name for f in dataclasses.fields(Candidate)], values, strict=True)))
    with pytest.raises(dataclasses.FrozenInstanceError):
        built.pod = "http://b:1"  # type: ignore[misc]


def test_prefix_scores_equal_each_pods_score() -> None:
    idx = PrefixIndex(PODS, capacity=6)
    rng = random.Random(1)
    texts = [("sys " * 40) + f"user {i} " * rng.randint(1, 30) for i in range(20)]
    for text in texts:
        idx.record(rng.choice(PODS), text_block_hashes(text, 16, 50))
        hashes = text_block_hashes(rng.choice(texts), 16, 50)
        pods = [*PODS, "http://unknown:1"]
        assert idx.scores(pods, hashes) == [idx.score(p, hashes) for p in pods]
    assert idx.scores(PODS, ()) == [0.0, 0.0, 0.0]


def test_output_history_percentile_equals_sorting_the_recent_lengths() -> None:
    from collections import deque

    from router_client.classifier import OutputHistory

    history = OutputHistory(size=7, max_keys=4)
    recent: dict[str, deque[int]] = {}
    rng = random.Random(2)
    for _ in range(500):
        key, tokens = rng.choice("abcd"), rng.randint(1, 40)
        history.observe(key, tokens)
        recent.setdefault(key, deque(maxlen=7)).append(tokens)
        for k in "abcd":
            got = history.percentile(k, 90.0, 3)
            if got is not None:
                ordered = sorted(recent[k])
                assert got == ordered[max(0, math.ceil(0.9 * len(ordered)) - 1)]
