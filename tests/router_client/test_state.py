"""Prefix index, /metrics parsing, endpoint state, balance, admission and training rows."""

from __future__ import annotations

import random

import pytest

from router_client.admission import shed_reason
from router_client.balance import Balancer, ShareTracker
from router_client.config import PoolConfig
from router_client.endpoints import EndpointState, PodMetrics
from router_client.prefix_index import PrefixIndex, text_block_hashes
from router_client.reporter import training_row
from router_client.scheduling.contracts import Candidate, SchedulingRequest
from router_client.scraper import parse_vllm_metrics, to_pod_metrics


def cand(pod: str, ttft: float | None = None, tpot: float | None = None) -> Candidate:
    return Candidate(pod=pod, kv_cache=0.0, waiting=0, running=0, prefill_tokens_in_flight=0, prefix_score=0.0,
                     predicted_ttft_ms=ttft, predicted_tpot_ms=tpot)


SYSTEM = "You are a helpful assistant. " * 10  # 290 chars → 4 full 64-char blocks

PREFIX_CASES = [
    # (name, text routed to pod a, request text, expected score on a)
    ("identical prompt", SYSTEM + "hello " * 20, SYSTEM + "hello " * 20, 1.0),
    ("shared system prompt", SYSTEM + "x" * 256, SYSTEM + "y" * 256, 4 / 8),
    ("nothing shared", "a" * 256, "b" * 256, 0.0),
    ("shorter than a block", "abc", "abc", 0.0),
]


@pytest.mark.parametrize(("name", "seen", "text", "want"), PREFIX_CASES, ids=[c[0] for c in PREFIX_CASES])
def test_prefix_scores(name: str, seen: str, text: str, want: float) -> None:
    idx = PrefixIndex(["a", "b"], capacity=1000)
    idx.record("a", text_block_hashes(seen, 64, 100))
    hashes = text_block_hashes(text, 64, 100)
    assert idx.scores(["a", "b"], hashes) == pytest.approx([want, 0.0])


def test_prefix_hashes_are_chained_and_capped() -> None:
    a = text_block_hashes("x" * 64 + "y" * 64, 64, 100)
    b = text_block_hashes("z" * 64 + "y" * 64, 64, 100)
    assert a[1] != b[1]  # same block text, different prefix
    assert len(text_block_hashes("x" * 6400, 64, 10)) == 10


def test_prefix_index_lru_bound() -> None:
    idx = PrefixIndex(["a"], capacity=4)
    old = text_block_hashes("o" * 256, 64, 10)
    new = text_block_hashes("n" * 256, 64, 10)
    idx.record("a", old)
    idx.record("a", new)
    assert idx.score("a", old) == 0.0 and idx.score("a", new) == 1.0


METRICS_TEXT = """# HELP vllm:num_requests_waiting x
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{model_name="a"} 2.0
vllm:num_requests_waiting{model_name="b"} 1.0
vllm:num_requests_running{model_name="a"} 5.0
vllm:gpu_cache_usage_perc{model_name="a"} 0.25
vllm:num_preemptions_total{model_name="a"} 7.0 1700000000000
vllm:num_requests_waiting_bogus 99
process_cpu_seconds_total 3.0
"""

PARSE_CASES = [
    ("summed over label sets, old kv name, timestamp", METRICS_TEXT, PodMetrics(3, 5, 0.25, 7, 1.0)),
    ("new kv name preferred", "vllm:kv_cache_usage_perc 0.5\nvllm:gpu_cache_usage_perc 0.1\n",
     PodMetrics(0, 0, 0.5, 0, 1.0)),
    ("kv clamped to 1", "vllm:kv_cache_usage_perc 1.7\n", PodMetrics(0, 0, 1.0, 0, 1.0)),
    ("empty text", "", PodMetrics(0, 0, 0.0, 0, 1.0)),
    ("garbage value skipped", "vllm:num_requests_running{a=\"b\"} nan-ish\n", PodMetrics(0, 0, 0.0, 0, 1.0)),
]


@pytest.mark.parametrize(("name", "text", "want"), PARSE_CASES, ids=[c[0] for c in PARSE_CASES])
def test_parse_vllm_metrics(name: str, text: str, want: PodMetrics) -> None:
    assert to_pod_metrics(parse_vllm_metrics(text), 1.0) == want


def test_endpoint_state_in_flight_and_rows() -> None:
    now = [10.0]
    pool = PoolConfig(name="p", pods=["a", "b"], pod_type="decode", pod_class="a100", pod_classes={"b": "h100"})
    state = EndpointState(pool.pods, stale_after_s=2.0, clock=lambda: now[0])
    state.publish({"a": PodMetrics(3, 4, 0.5, 0, 9.5)})
    state.dispatch("r1", "a", 800)
    state.dispatch("r2", "a", 200)
    rows = state.feature_rows(pool, pool.pods, 1000, [0.2, 0.0])
    assert rows[0] == {"kv_cache_percentage": 0.5, "input_token_length": 1000, "num_request_waiting": 3,
                       "num_request_running": 2, "num_tokens_generated": 1, "prefix_cache_score": 0.2,
                       "pod_type": "decode", "prefill_tokens_in_flight": 1000, "decode_tokens_in_flight": 0,
                       "encoder_input_size": 0, "encoder_matched_size": 0, "pod_class": "a100"}
    assert rows[1]["num_request_running"] == 0 and rows[1]["kv_cache_percentage"] == 0.0
    assert rows[1]["pod_class"] == "h100", "a per-pod class overrides the pool's"
    state.first_token("r1")
    state.first_token("r1")  # idempotent
    assert state.prefill_in_flight("a") == 200 and state.running("a") == 2
    state.complete("r2")  # completes without a first token: its prefill is released too
    state.complete("r2")
    assert state.prefill_in_flight("a") == 0 and state.running("a") == 1
    assert not state.is_stale("a") and state.is_stale("b")
    now[0] = 20.0
    assert state.is_stale("a")


def test_when_every_pod_is_stale_only_those_lagging_the_freshest_count_as_down() -> None:
    now = [100.0]
    state = EndpointState(("dead", "slow", "slower", "never"), 2.0, lambda: now[0])
    state.publish({"dead": PodMetrics(scraped_at=80.0), "slow": PodMetrics(scraped_at=95.0),
                   "slower": PodMetrics(scraped_at=93.5)})
    assert set(state.stale(state.pods)) == {"dead", "slow", "slower", "never"}
    assert state.lagging(state.pods) == {"dead", "never"}
    assert state.lagging(("never",)) == set(), "a pod never scraped lags nothing but a scraped one"
    assert state.lagging(()) == set()


ADMISSION_CASES = [
    ("not sheddable", SchedulingRequest("r", 1, 10.0, None, False), [cand("a", 100, 1)], None),
    ("no SLO", SchedulingRequest("r", 1, None, None, True), [cand("a", 100, 1)], None),
    ("one pod meets", SchedulingRequest("r", 1, 150.0, None, True), [cand("a", 100, 1), cand("b", 900, 1)], None),
    ("no predictions: admit", SchedulingRequest("r", 1, 10.0, None, True), [cand("a")], None),
    ("ttft impossible", SchedulingRequest("r", 1, 10.0, None, True), [cand("a", 100, 1)], "slo_ttft"),
    ("tpot impossible", SchedulingRequest("r", 1, None, 0.5, True), [cand("a", 100, 1)], "slo_tpot"),
    ("met on different pods only", SchedulingRequest("r", 1, 150.0, 5.0, True),
     [cand("a", 100, 10), cand("b", 900, 1)], "slo_ttft_tpot"),
]


@pytest.mark.parametrize(("name", "req", "cands", "code"), ADMISSION_CASES, ids=[c[0] for c in ADMISSION_CASES])
def test_admission(name: str, req: SchedulingRequest, cands: list[Candidate], code: str | None) -> None:
    reason = shed_reason(req, cands)
    assert (reason.split(" ")[0] if reason else None) == code
    if reason:
        assert "best_predicted_ttft_ms=" in reason


def test_share_tracker_decay() -> None:
    t = ShareTracker(["a", "b"], window=10)
    for _ in range(100):
        t.record("a")
    for _ in range(30):
        t.record("b")
    assert t.share("b") > 0.9  # the last 30 decisions dominate a window of ~10


def test_balancer_lifts_starved_pod() -> None:
    bal = Balancer({"p": ["a", "b", "c", "d"]}, exploration=0.0, min_share=0.5, window=100)
    cands = [cand(p) for p in "abcd"]
    rng = random.Random(0)
    counts = dict.fromkeys("abcd", 0)
    for _ in range(2000):
        forced = bal.override("p", cands, rng)
        pod = cands[forced[0]].pod if forced else "a"  # a sticky scheduler always wants "a"
        bal.record("p", pod)
        counts[pod] += 1
    for pod in "bcd":
        assert counts[pod] / 2000 >= 0.5 * 0.25 * 0.95


def test_training_row() -> None:
    feats = {"num_tokens_generated": 1, "input_token_length": 900, "decode_tokens_in_flight": 0, "x": 1}
    row = training_row(feats, 120.0, 11.5, prompt_tokens=1000)
    assert row == {"num_tokens_generated": 0, "input_token_length": 1000, "decode_tokens_in_flight": 0, "x": 1,
                   "actual_ttft_ms": 120.0, "actual_tpot_ms": 11.5}
    assert training_row(feats, 120.0, 0.0)["input_token_length"] == 900
