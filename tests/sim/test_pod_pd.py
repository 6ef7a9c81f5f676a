"""Sim pods playing prefill and decode roles over real HTTP: vLLM's kv_transfer_params, a timed KV pull."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from sim.engine import EngineConfig
from sim.engine.kv_transfer import KVLink
from sim.pod import PodConfig, RunningPods, run_pods

TIME_SCALE = 0.05
LINK = KVLink(gbps=2.0, latency_ms=5.0)
PROMPT_TOKENS = 2000


@pytest.fixture(scope="module")
def pods() -> Iterator[RunningPods]:
    engine = EngineConfig.from_preset("llama3-8b-a100", max_model_len=4096, seed=1)
    configs = [PodConfig(engine, TIME_SCALE, pod_id="pod-0", role="prefill"),
               PodConfig(engine, TIME_SCALE, pod_id="pod-1", role="decode", kv_link=LINK)]
    with run_pods(configs) as running:
        yield running


def _metric(text: str, name: str) -> float:
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name + "{"))


def _prefill(pods: RunningPods, prompt: str) -> dict[str, Any]:
    body = {"model": "m", "prompt": prompt, "max_tokens": 1, "stream": False,
            "kv_transfer_params": {"do_remote_decode": True, "do_remote_prefill": False, "remote_engine_id": None,
                                   "remote_block_ids": None, "remote_host": None, "remote_port": None}}
    r = httpx.post(pods.urls[0] + "/v1/completions", json=body, timeout=30)
    assert r.status_code == 200, r.text
    out: dict[str, Any] = r.json()
    return out


def test_health_shows_the_role(pods: RunningPods) -> None:
    assert [httpx.get(u + "/health").json()["role"] for u in pods.urls] == ["prefill", "decode"]


def test_prefill_answer_carries_the_decode_pods_parameters(pods: RunningPods) -> None:
    out = _prefill(pods, "p" * 4 * 64)  # 64 tokens
    params = out["kv_transfer_params"]
    port = int(pods.urls[0].rsplit(":", 1)[1])
    assert out["usage"]["completion_tokens"] == 1
    assert params["do_remote_prefill"] is True and params["do_remote_decode"] is False
    assert params["remote_engine_id"] == "pod-0" and params["remote_host"] == "127.0.0.1"
    assert params["remote_port"] == port and params["remote_block_ids"] == [0, 1, 2, 3]
    assert params["tp_size"] == 1 and params["remote_num_tokens"] == 64


def test_decode_pod_waits_for_the_transfer_then_decodes(pods: RunningPods) -> None:
    before = httpx.get(pods.urls[1] + "/metrics").text
    prompt = "".join(f"{i:07d} " for i in range(PROMPT_TOKENS // 2))  # 8,000 bytes: 2,000 tokens, unique blocks
    params = _prefill(pods, prompt)["kv_transfer_params"]
    body = {"model": "m", "prompt": prompt, "max_tokens": 8, "stream": True, "kv_transfer_params": params,
            "stream_options": {"include_usage": True}}
    r = httpx.post(pods.urls[1] + "/v1/completions", json=body, timeout=30)
    chunks = [json.loads(line[6:]) for line in r.text.splitlines() if line.startswith("data: {")]
    assert chunks[-1]["usage"]["completion_tokens"] == 8
    after = httpx.get(pods.urls[1] + "/metrics").text
    def delta(name: str) -> float:
        return _metric(after, name) - _metric(before, name)

    transfers, seconds = delta("vllm:nixl_xfer_time_seconds_count"), delta("vllm:nixl_xfer_time_seconds_sum")
    moved = delta("vllm:nixl_bytes_transferred_total")
    nbytes = PROMPT_TOKENS * EngineConfig.from_preset("llama3-8b-a100").model.kv_bytes_per_token
    assert transfers == 1 and moved == nbytes
    assert seconds == pytest.approx(LINK.seconds(nbytes), rel=1e-6)  # an idle link: bytes / bandwidth + latency
    assert delta("vllm:time_to_first_token_seconds_sum") >= seconds  # first token after the KV arrived (virtual s)


@pytest.mark.parametrize(("pod", "params", "message"), [
    (0, {"do_remote_prefill": True, "remote_engine_id": "x", "remote_block_ids": [0], "remote_host": "h",
         "remote_port": 1}, "role is prefill"),
    (1, {"do_remote_decode": True}, "role is decode"),
    (1, {"do_remote_prefill": True}, "lacks"),
    (1, "yes", "must be an object"),
])
def test_misdirected_or_malformed_transfers_are_refused(pods: RunningPods, pod: int, params: object,
                                                        message: str) -> None:
    body = {"model": "m", "prompt": "hi", "max_tokens": 2, "kv_transfer_params": params}
    r = httpx.post(pods.urls[pod] + "/v1/completions", json=body, timeout=10)
    assert r.status_code == 400 and message in r.json()["error"]["message"]


def test_both_roles_serve_ordinary_requests(pods: RunningPods) -> None:
    for url in pods.urls:
        r = httpx.post(url + "/v1/completions", json={"model": "m", "prompt": "hi", "max_tokens": 3}, timeout=10)
        assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 3
