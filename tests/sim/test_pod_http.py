"""Pod server over real HTTP on 127.0.0.1 (ephemeral ports, background uvicorn servers)."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Iterator

import httpx
import pytest

from sim.engine import EngineConfig
from sim.pod import PodConfig, RunningPods, run_pods

TIME_SCALE = 0.02
NARROW_TIME_SCALE = 0.25  # slow enough that a full batch with a queue lasts seconds, even on a loaded machine


@pytest.fixture(scope="module")
def pods() -> Iterator[RunningPods]:
    fast = EngineConfig.from_preset("llama3-8b-a100", max_model_len=2048, seed=1)
    narrow = EngineConfig.from_preset("llama3-8b-a100", max_model_len=2048, max_num_seqs=4, seed=2)
    with run_pods([PodConfig(fast, TIME_SCALE), PodConfig(narrow, NARROW_TIME_SCALE, pool="narrow")]) as running:
        yield running


def _events(text: str) -> list[str]:
    return [line[len("data: "):] for line in text.splitlines() if line.startswith("data: ")]


def _metric(text: str, name: str, **labels: str) -> float:
    total = 0.0
    for line in text.splitlines():
        if not line.startswith(name + "{") and not line.startswith(name + " "):
            continue
        if all(f'{k}="{v}"' in line for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


def test_stream_chunks_match_usage(pods: RunningPods) -> None:
    body = {"model": "x", "prompt": "hello " * 50, "max_tokens": 17, "stream": True,
            "stream_options": {"include_usage": True}}
    r = httpx.post(pods.urls[0] + "/v1/completions", json=body, timeout=10)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    events = _events(r.text)
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    usage = chunks[-1]["usage"]
    token_chunks = [c for c in chunks if c["choices"]]
    assert len(token_chunks) == usage["completion_tokens"] == 17
    assert usage["prompt_tokens"] == 75  # 300 bytes / 4
    assert all(c["choices"][0]["finish_reason"] is None for c in token_chunks[:-1])
    assert token_chunks[-1]["choices"][0]["finish_reason"] == "length"


def test_chat_stream_and_output_tokens_extension(pods: RunningPods) -> None:
    body = {"messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}],
            "max_tokens": 50, "output_tokens": 9, "stream": True, "stream_options": {"include_usage": True}}
    r = httpx.post(pods.urls[0] + "/v1/chat/completions", json=body, timeout=10)
    chunks = [json.loads(e) for e in _events(r.text)[:-1]]
    tokens = [c for c in chunks if c["choices"]]
    assert len(tokens) == chunks[-1]["usage"]["completion_tokens"] == 9
    assert tokens[0]["choices"][0]["delta"]["role"] == "assistant"
    assert tokens[-1]["choices"][0]["finish_reason"] == "stop"
    assert tokens[0]["object"] == "chat.completion.chunk"


def test_no_usage_chunk_unless_asked(pods: RunningPods) -> None:
    r = httpx.post(pods.urls[0] + "/v1/completions", json={"prompt": "a", "max_tokens": 3, "stream": True},
                   timeout=10)
    events = _events(r.text)
    assert len(events) == 4 and events[-1] == "[DONE]"
    assert all("usage" not in json.loads(e) for e in events[:-1])


def test_non_streaming_with_token_ids_and_declared_count(pods: RunningPods) -> None:
    body = {"prompt": list(range(40)), "max_tokens": 5}
    r = httpx.post(pods.urls[0] + "/v1/completions", json=body, timeout=10)
    assert r.status_code == 200
    doc = r.json()
    assert doc["usage"] == {"prompt_tokens": 40, "completion_tokens": 5, "total_tokens": 45}
    assert doc["choices"][0]["finish_reason"] == "length" and len(doc["choices"][0]["text"].split()) == 5
    r = httpx.post(pods.urls[0] + "/v1/completions",
                   json={"prompt": "short", "prompt_token_count": 1000, "output_tokens": 2}, timeout=10)
    assert r.json()["usage"]["prompt_tokens"] == 1000


def test_too_long_prompt_is_400(pods: RunningPods) -> None:
    r = httpx.post(pods.urls[0] + "/v1/completions", json={"prompt": "x" * 9000, "max_tokens": 4}, timeout=10)
    assert r.status_code == 400
    err = r.json()["error"]
    assert err["code"] == 400 and err["type"] == "BadRequestError"
    assert re.search(r"maximum context length is 2048 tokens.*2250 in the prompt", err["message"])
    r = httpx.post(pods.urls[0] + "/v1/completions", json={"prompt": "x", "max_tokens": 4096}, timeout=10)
    assert r.status_code == 400


def test_malformed_requests_are_400(pods: RunningPods) -> None:
    for body in (b"{not json", b'{"prompt": 5}', b'{"prompt": "a", "max_tokens": 1.5}', b'{"messages": []}'):
        path = "/v1/chat/completions" if b"messages" in body else "/v1/completions"
        r = httpx.post(pods.urls[0] + path, content=body, timeout=10)
        assert r.status_code == 400, body
        assert set(r.json()["error"]) >= {"message", "type", "code"}


def test_models_and_health(pods: RunningPods) -> None:
    models = httpx.get(pods.urls[1] + "/v1/models", timeout=5).json()
    assert models["data"][0]["id"] == "meta-llama/Meta-Llama-3-8B-Instruct"
    assert models["data"][0]["max_model_len"] == 2048
    health = httpx.get(pods.urls[1] + "/health", timeout=5)
    assert health.status_code == 200 and health.json()["pool"] == "narrow"


async def _load(url: str, n: int) -> tuple[list[httpx.Response], str]:
    """Fire ``n`` streams and poll /metrics until the pod shows a full batch and a queue."""
    async with httpx.AsyncClient(timeout=30) as client:
        body = {"prompt": "load " * 100, "output_tokens": 300, "stream": True}
        tasks = [asyncio.create_task(client.post(url + "/v1/completions", json=body)) for _ in range(n)]
        during = ""
        while not all(t.done() for t in tasks):
            during = (await client.get(url + "/metrics")).text
            waiting = _metric(during, "vllm:num_requests_waiting")
            if waiting >= 1 and _metric(during, "vllm:num_requests_running") == 4:
                break
            await asyncio.sleep(0.005)
        return list(await asyncio.gather(*tasks)), during


def test_metrics_reflect_load(pods: RunningPods) -> None:
    url = pods.urls[1]
    before = httpx.get(url + "/metrics", timeout=5).text
    responses, during = asyncio.run(_load(url, 12))
    assert all(r.status_code == 200 for r in responses)
    assert _metric(during, "vllm:num_requests_running") == 4  # max_num_seqs
    assert _metric(during, "vllm:num_requests_waiting") >= 1
    assert 0 < _metric(during, "vllm:kv_cache_usage_perc") <= 1
    assert _metric(during, "vllm:gpu_cache_usage_perc") == _metric(during, "vllm:kv_cache_usage_perc")
    after = httpx.get(url + "/metrics", timeout=5).text
    done = _metric(after, "vllm:request_success_total") - _metric(before, "vllm:request_success_total")
    assert done == 12
    ttft_n = _metric(after, "vllm:time_to_first_token_seconds_count") - _metric(
        before, "vllm:time_to_first_token_seconds_count")
    assert ttft_n == 12
    assert _metric(after, "vllm:time_per_output_token_seconds_count") >= 12 * 299
    assert _metric(after, "vllm:num_requests_running") == 0
    assert 'model_name="meta-llama/Meta-Llama-3-8B-Instruct"' in after
    names = ("vllm:num_preemptions_total", "vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total")
    for name in names:
        assert name in after


def test_repeated_prompt_hits_prefix_cache(pods: RunningPods) -> None:
    url = pods.urls[0]
    system = "You are a helpful assistant. " * 40
    before = _metric(httpx.get(url + "/metrics", timeout=5).text, "vllm:prefix_cache_hits_total")
    for question in ("what is 2+2?", "name a colour"):
        body = {"messages": [{"role": "system", "content": system}, {"role": "user", "content": question}],
                "max_tokens": 2}
        assert httpx.post(url + "/v1/chat/completions", json=body, timeout=10).status_code == 200
    after = _metric(httpx.get(url + "/metrics", timeout=5).text, "vllm:prefix_cache_hits_total")
    assert after - before >= 256


def test_streaming_is_paced_by_engine_steps(pods: RunningPods) -> None:
    """120 decode steps of >= 10 simulated ms each take >= 1.2 s * time_scale of wall time."""
    import time

    t0 = time.perf_counter()
    with httpx.stream("POST", pods.urls[0] + "/v1/completions",
                      json={"prompt": "p", "output_tokens": 120, "stream": True}, timeout=10) as r:
        lines = [line for line in r.iter_lines() if line.startswith("data: ")]
    elapsed = time.perf_counter() - t0
    assert len(lines) == 121
    assert elapsed >= 120 * 0.010 * TIME_SCALE
