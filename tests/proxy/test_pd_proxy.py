"""Prefill/decode disaggregation through the proxy, live: sim pods in both roles over HTTP on 127.0.0.1.

The router picks the decode pod, the decider, the prefill pod; the proxy sends the prefill pod a one-token request
with kv_transfer_params (do_remote_decode), then the decode pod the client's request with the parameters the
prefill answer returned, and streams the decode pod's answer as one response. Training rows reach a capturing
trainer (the wire contract's POST /add_training_data_bulk) with pod_type prefill / decode / "".
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import orjson
import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from router_client.config import RouterConfig
from sim.engine.config import EngineConfig
from sim.engine.kv_transfer import KVLink
from sim.pod.config import PodConfig
from sim.pod.launch import RunningPods, run_pods
from tests.procs import free_port
from tests.proxy.conftest import RunningProxy
from tests.waiting import wait_for

TIME_SCALE = 0.05
LONG_PROMPT = "".join(f"{i:07d} " for i in range(800))  # 6,400 bytes: 1,600 tokens, >= pd_threshold
SHORT_PROMPT = "hello there"


class Trainer:
    """Records the rows the router flushes (a stand-in speaking the trainer's ingest contract)."""

    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []
        self.url = ""

    async def ingest(self, request: Request) -> JSONResponse:
        self.rows += orjson.loads(await request.body())["entries"]
        return JSONResponse({"message": "ok"}, status_code=202)


@pytest.fixture(scope="module")
def trainer() -> Iterator[Trainer]:
    rec = Trainer()
    app = Starlette(routes=[Route("/add_training_data_bulk", rec.ingest, methods=["POST"])])
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, name="trainer", daemon=True)
    thread.start()
    wait_for(lambda: server.started, timeout=15, what="the capturing trainer starts")
    rec.url = f"http://127.0.0.1:{port}"
    try:
        yield rec
    finally:
        server.should_exit = True
        thread.join(10)


@pytest.fixture(scope="module")
def pd_pods() -> Iterator[RunningPods]:
    """pod 0: prefill role; pod 1: decode role (a 1 Gbit/s KV link: transfers take visible time); pod 2: decode role
    standing in for a broken prefill pod (it refuses do_remote_decode with 400)."""
    engine = EngineConfig.from_preset("llama3-8b-a100", max_model_len=4096, seed=3)
    configs = [PodConfig(engine, TIME_SCALE, pod_id="pod-0", role="prefill"),
               PodConfig(engine, TIME_SCALE, pod_id="pod-1", role="decode", kv_link=KVLink(1.0, 2.0)),
               PodConfig(engine, TIME_SCALE, pod_id="pod-2", role="decode")]
    with run_pods(configs) as running:
        yield running


def pd_config(prefill: list[str], decode: list[str], trainer_url: str | None = None, **pd: Any) -> RouterConfig:
    return RouterConfig.parse({"pools": [
        {"name": "main", "pods": decode, "pod_type": "decode", "trainer_url": trainer_url,
         "pd": {"prefill_pool": "main-prefill", **pd}},
        {"name": "main-prefill", "pods": prefill, "pod_type": "prefill", "trainer_url": trainer_url}],
        "reporter": {"flush_interval_s": 0.05}, "scheduler": {"seed": 1}})


def _complete(proxy: RunningProxy, prompt: str, max_tokens: int = 6) -> httpx.Response:
    body = {"model": "m", "prompt": prompt, "max_tokens": max_tokens, "stream": True}
    return httpx.post(proxy.url + "/v1/completions", json=body, timeout=60)


def _tokens(r: httpx.Response) -> int:
    events = [line[6:] for line in r.text.splitlines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]", r.text
    chunks = [json.loads(e) for e in events[:-1]]
    assert not [c for c in chunks if "error" in c], r.text
    return sum(1 for c in chunks if c.get("choices"))


def _metric(text: str, name: str, **labels: str) -> float:
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith(name + "{") and all(f'{k}="{v}"' in line for k, v in labels.items()))


def test_two_phase_request_then_the_decider_keeps_the_cached_prompt_whole(
        pd_pods: RunningPods, trainer: Trainer, serve_proxy: Callable[[RouterConfig], RunningProxy]) -> None:
    prefill, decode = pd_pods.urls[0], pd_pods.urls[1]
    proxy = serve_proxy(pd_config([prefill], [decode], trainer.url))
    first = _complete(proxy, LONG_PROMPT)
    assert first.status_code == 200 and _tokens(first) == 6
    assert first.headers["x-pd-choice"] == "disaggregated"
    assert first.headers["x-prefill-pod"] == prefill and first.headers["x-routed-pod"] == decode
    pod_metrics = httpx.get(decode + "/metrics").text
    assert _metric(pod_metrics, "vllm:nixl_xfer_time_seconds_count") == 1  # the decode pod pulled the KV

    again = _complete(proxy, LONG_PROMPT)  # the decode pod now holds the prompt: the decider keeps it there
    assert again.status_code == 200 and _tokens(again) == 6
    assert again.headers["x-pd-choice"] == "decode_holds_prefix" and "x-prefill-pod" not in again.headers
    short = _complete(proxy, SHORT_PROMPT)
    assert short.headers["x-pd-choice"] == "short_prompt" and _tokens(short) == 6
    assert _metric(httpx.get(decode + "/metrics").text, "vllm:nixl_xfer_time_seconds_count") == 1

    types = wait_for(lambda: sorted(r.get("pod_type", "") for r in trainer.rows) if len(trainer.rows) >= 4 else None,
                     timeout=30, what="4 training rows flushed")
    assert types == ["", "", "decode", "prefill"]
    prefill_row = next(r for r in trainer.rows if r.get("pod_type") == "prefill")
    assert prefill_row["actual_ttft_ms"] > 0 and prefill_row["actual_tpot_ms"] == 0  # the one-token prefill leg

    text = httpx.get(proxy.url + "/metrics").text
    assert _metric(text, "router_pd_decisions_total", pool="main", choice="disaggregated") == 1
    assert _metric(text, "router_pd_decisions_total", pool="main", choice="decode_holds_prefix") == 1
    assert _metric(text, "router_pd_pairs_total", prefill_pod=prefill, decode_pod=decode) == 1
    assert _metric(text, "router_pd_prefill_seconds_count", pool="main") == 1
    assert _metric(text, "router_pd_kv_handover_seconds_count", pool="main") == 1
    # the KV hand-over (1,600 tokens x 128 KiB at 1 Gbit/s = 1.68 virtual s) is inside the router-measured TTFT
    assert _metric(text, "router_pd_kv_handover_seconds_sum", pool="main") >= 1.6 * TIME_SCALE

    pd = httpx.get(proxy.url + "/ui/data").json()["pd"]["main"]
    assert pd["choices"] == {"disaggregated": 1, "decode_holds_prefix": 1, "short_prompt": 1}
    assert pd["pairs"] == [{"prefill": prefill, "decode": decode, "requests": 1}]
    assert pd["kv_handover_ms"]["n"] == 1 and pd["prefill_ms"]["n"] == 1
    assert "Prefill/decode" in httpx.get(proxy.url + "/ui").text


@pytest.mark.parametrize(("broken", "reason"), [("dead", "connect"), ("decode-role", "status")])
def test_a_failing_prefill_pod_falls_back_to_the_decode_pod_serving_it_whole(
        pd_pods: RunningPods, serve_proxy: Callable[[RouterConfig], RunningProxy], broken: str, reason: str) -> None:
    prefill = f"http://127.0.0.1:{free_port()}" if broken == "dead" else pd_pods.urls[2]
    proxy = serve_proxy(pd_config([prefill], [pd_pods.urls[1]], decider="always"))
    r = _complete(proxy, SHORT_PROMPT + broken)
    assert r.status_code == 200 and _tokens(r) == 6
    assert r.headers["x-pd-choice"] == "prefill_failed" and "x-prefill-pod" not in r.headers
    text = httpx.get(proxy.url + "/metrics").text
    assert _metric(text, "router_pd_prefill_failures_total", pool="main", reason=reason, action="aggregate") == 1
    assert proxy.state.router.in_flight(prefill) == 0 and proxy.state.router.in_flight(pd_pods.urls[1]) == 0


def test_a_failing_prefill_pod_is_a_clear_502_when_configured(
        pd_pods: RunningPods, serve_proxy: Callable[[RouterConfig], RunningProxy]) -> None:
    decode = pd_pods.urls[1]
    proxy = serve_proxy(pd_config([pd_pods.urls[2]], [decode], decider="always", on_prefill_failure="error"))
    r = _complete(proxy, SHORT_PROMPT + "502")
    assert r.status_code == 502 and r.json()["error"]["type"] == "prefill_failed"
    assert r.headers["x-prefill-pod"] == pd_pods.urls[2]
    text = httpx.get(proxy.url + "/metrics").text
    assert _metric(text, "router_pd_prefill_failures_total", reason="status", action="error") == 1
    assert _metric(text, "inference_objective_request_error_total", error_code="prefill_failed") == 1
    assert proxy.state.router.in_flight(decode) == 0


def test_non_streamed_disaggregated_request(pd_pods: RunningPods,
                                            serve_proxy: Callable[[RouterConfig], RunningProxy]) -> None:
    proxy = serve_proxy(pd_config([pd_pods.urls[0]], [pd_pods.urls[1]], decider="always"))
    body = {"model": "m", "prompt": SHORT_PROMPT + "whole", "max_tokens": 4}
    r = httpx.post(proxy.url + "/v1/completions", json=body, timeout=60)
    assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 4
    assert r.headers["x-pd-choice"] == "disaggregated"


def test_config_names_the_roles() -> None:
    with pytest.raises(Exception, match="pod_type 'decode'"):
        RouterConfig.parse({"pools": [{"name": "a", "pods": ["http://x:1"], "pd": {"prefill_pool": "b"}},
                                      {"name": "b", "pods": ["http://y:1"], "pod_type": "prefill"}]})
    with pytest.raises(Exception, match="must name another pool"):
        RouterConfig.parse({"pools": [{"name": "a", "pods": ["http://x:1"], "pod_type": "decode",
                                       "pd": {"prefill_pool": "zzz"}}]})

