"""The product against real vLLM engines: scrape, relay, measure, prefix estimates, learning.

Every request goes through the router proxy of the shared ``engine_stack`` (two real engines). Requests
whose numbers are compared are sent one after another, so the engines' own counters cover exactly them.
"""

from __future__ import annotations

import threading
import time

import httpx
import orjson
import pytest

from demo.engine import reset_prefix_caches
from demo.stack import Stack
from router_client.scraper import parse_vllm_metrics, to_pod_metrics
from tests.engine.engine_client import MAX_MODEL_LEN, POOL, engine_metrics, router_records, stream, tokens
from tests.waiting import wait_for

pytestmark = pytest.mark.engine

TTFT = ("vllm:time_to_first_token_seconds_sum", "vllm:time_to_first_token_seconds_count")
PREFIX = ("vllm:prefix_cache_hits_total", "vllm:prefix_cache_queries_total")


def _pods(stack: Stack) -> list[str]:
    return stack.pod_urls[POOL]


def test_scraper_reads_a_live_engine(engine_stack: Stack) -> None:
    url = _pods(engine_stack)[0]
    with httpx.Client(timeout=120) as client:
        values = parse_vllm_metrics(client.get(url + "/metrics").text)
        assert {"waiting", "running", "kv", "preemptions"} <= set(values)
        long = threading.Thread(target=stream, args=(httpx.Client(timeout=120), url, tokens(64, 1), 300, "scrape"))
        long.start()
        try:
            busy = wait_for(lambda: parse_vllm_metrics(client.get(url + "/metrics").text).get("running", 0) >= 1,
                            timeout=60, interval=0.05, what="the engine reports a running request")
            assert busy
            pod = to_pod_metrics(parse_vllm_metrics(client.get(url + "/metrics").text), time.monotonic())
            assert 0.0 <= pod.kv_cache <= 1.0 and pod.running >= 0
        finally:
            long.join(120)


def test_proxy_relays_a_real_stream_with_usage_and_finish_reason(engine_stack: Stack) -> None:
    prompt = tokens(200, 2)
    with httpx.Client(timeout=120) as client:
        got = stream(client, engine_stack.router_url, prompt, 12, "relay-usage", include_usage=True)
        plain = stream(client, engine_stack.router_url, prompt, 12, "relay-plain")
    assert got.status == 200 and got.headers["x-routed-pod"] in _pods(engine_stack)
    assert got.events[-1] == b"[DONE]"
    usage = got.chunks()[-1]["usage"]
    assert usage["prompt_tokens"] == 200 and usage["completion_tokens"] == 12
    assert any(c["choices"] and c["choices"][0].get("finish_reason") == "length" for c in got.chunks())
    assert got.text_chunks() >= 1
    assert plain.events[-1] == b"[DONE]"
    assert not any(c.get("usage") for c in plain.chunks()), "the usage chunk the proxy asked for is stripped"


def test_too_long_prompt_is_the_engines_400_with_its_body(engine_stack: Stack) -> None:
    with httpx.Client(timeout=120) as client:
        got = stream(client, engine_stack.router_url, tokens(MAX_MODEL_LEN + 10, 3), 8, "too-long")
    assert got.status == 400
    error = orjson.loads(got.body)
    text = orjson.dumps(error).decode()
    assert str(MAX_MODEL_LEN) in text, text


def test_router_measured_ttft_matches_the_engines_own(engine_stack: Stack) -> None:
    pods = _pods(engine_stack)
    ids = {f"ttft-{i}" for i in range(12)}
    with httpx.Client(timeout=120) as client:
        before = engine_metrics(client, pods, TTFT)
        for i in range(12):
            got = stream(client, engine_stack.router_url, tokens(400 + 80 * i, 100 + i), 4, f"ttft-{i}")
            assert got.status == 200
        after = engine_metrics(client, pods, TTFT)
        records = wait_for(lambda: len(found := router_records(client, engine_stack.router_url, ids)) == 12
                           and found, timeout=30, what="the router's records of the 12 requests")
    count = sum(after[p][TTFT[1]] - before[p][TTFT[1]] for p in pods)
    engine_mean_ms = 1000.0 * sum(after[p][TTFT[0]] - before[p][TTFT[0]] for p in pods) / count
    router_mean_ms = sum(r["ttft_ms"] for r in records) / len(records)
    assert count == 12
    assert abs(router_mean_ms - engine_mean_ms) <= max(0.10 * engine_mean_ms, 5.0), (router_mean_ms, engine_mean_ms)


def test_router_prefix_estimate_tracks_the_engines_prefix_cache_hits(engine_stack: Stack) -> None:
    """Four 1,024-token system prompts (eight engine blocks each), each sent four times with a new 256-token
    question: the router's estimate (score x prompt tokens, per pod) against the tokens the engines report
    as prefix-cache hits, over exactly these requests."""
    pods = _pods(engine_stack)
    systems = [tokens(1024, 1000 + k) for k in range(4)]
    ids = {f"prefix-{k}-{j}" for k in range(4) for j in range(4)}
    reset_prefix_caches(pods)
    with httpx.Client(timeout=120) as client:
        before = engine_metrics(client, pods, PREFIX)
        for j in range(4):
            for k in range(4):
                got = stream(client, engine_stack.router_url, systems[k] + tokens(256, 2000 + 4 * j + k), 2,
                             f"prefix-{k}-{j}")
                assert got.status == 200
        after = engine_metrics(client, pods, PREFIX)
        records = wait_for(lambda: len(found := router_records(client, engine_stack.router_url, ids)) == 16
                           and found, timeout=30, what="the router's records of the 16 requests")
    hits = {p: after[p][PREFIX[0]] - before[p][PREFIX[0]] for p in pods}
    estimated = {p: sum((r["prefix_cache_score"] or 0.0) * r["prompt_tokens"] for r in records if r["pod"] == p)
                 for p in pods}
    assert sum(hits.values()) >= 0.5 * 12 * 1024, hits  # most repeats found their system prompt cached
    for pod in pods:
        assert abs(estimated[pod] - hits[pod]) <= 0.15 * max(hits[pod], 1024.0), (estimated, hits)


def test_trainer_learns_from_real_traffic(engine_stack: Stack) -> None:
    trainer, predictor = engine_stack.trainer_urls[POOL], engine_stack.predictor_urls[POOL]
    with httpx.Client(timeout=120) as client:
        threads = [threading.Thread(target=stream, args=(httpx.Client(timeout=120), engine_stack.router_url,
                                                         tokens(32 + 40 * i, 3000 + i), 6, f"learn-{i}"))
                   for i in range(24)]
        for t in threads:
            t.start()
            time.sleep(0.05)
        for t in threads:
            t.join(180)
        rows = wait_for(lambda: (n := client.get(trainer + "/data/status").json()["durable"]["rows"]) >= 40 and n,
                        timeout=60, what="the router's samples stored by the trainer")
        bundle = wait_for(lambda: (b := client.get(predictor + "/status").json().get("bundle")) and not b["prior"]
                          and b, timeout=120, what="a trained (not prior) bundle served by the predictor")
        records = client.get(engine_stack.router_url + "/ui/requests", params={"limit": 5000}).json()["requests"]
    assert rows >= 40 and bundle["version"] >= 1
    served = [r for r in records if r["request_id"].startswith("learn-") and r["ttft_ms"] is not None]
    assert len(served) == 24
    unpredicted = [(r["request_id"], r["fallback"]) for r in served if r["predicted_ttft_ms"] is None]
    assert not unpredicted, unpredicted
