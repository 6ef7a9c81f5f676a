"""The proxy over real HTTP in front of in-thread sim pods (no predictors: the library falls back)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from demo.procs import LOOPBACK, ProcessSet, free_port
from demo.prom import metric_value as _metric
from router_client.config import RouterConfig
from tests.waiting import wait_for

Serve = Callable[[RouterConfig], Any]
Pods = Any
RunningProxy = Any


def _events(lines: list[str]) -> list[bytes]:
    return [line[6:].encode() for line in lines if line.startswith("data: ")]


def _stream(client: httpx.Client, url: str, body: dict[str, object]) -> tuple[httpx.Response, list[bytes]]:
    with client.stream("POST", url, json=body) as resp:
        lines = list(resp.iter_lines())
    return resp, _events(lines)


@pytest.mark.parametrize("route", ["/v1/completions", "/v1/chat/completions"])
def test_stream_arrives_intact_and_usage_matches(proxy: RunningProxy, pods: Pods, route: str) -> None:
    body: dict[str, object] = {"model": "m", "stream": True, "output_tokens": 17, "max_tokens": 64,
                               "stream_options": {"include_usage": True}}
    body.update({"prompt": "hello " * 50} if route == "/v1/completions"
                else {"messages": [{"role": "user", "content": "hello " * 50}]})
    with httpx.Client(timeout=30) as client:
        resp, events = _stream(client, proxy.url + route, body)
    assert resp.status_code == 200
    assert resp.headers["content-type"].startswith("text/event-stream")
    assert resp.headers["x-routed-pool"] == "short" and resp.headers["x-routed-pod"] in pods.short
    assert events[-1] == b"[DONE]"
    chunks = [orjson.loads(e) for e in events[:-1]]
    usage = chunks[-1]["usage"]
    content = [c for c in chunks if c["choices"]]
    assert len(content) == usage["completion_tokens"] == 17


def test_injected_usage_chunk_is_stripped(proxy: RunningProxy) -> None:
    body = {"model": "m", "prompt": "x" * 400, "stream": True, "output_tokens": 9}
    with httpx.Client(timeout=30) as client:
        resp, events = _stream(client, proxy.url + "/v1/completions", body)
        chunks = [orjson.loads(e) for e in events[:-1]]
        assert events[-1] == b"[DONE]" and len(chunks) == 9
        assert all(c["choices"] and "usage" not in c for c in chunks)

        def finished() -> str:  # the proxy records the stream after the client has read [DONE]: wait for it
            text = client.get(proxy.url + "/metrics").text
            return text if _metric(text, "inference_objective_output_tokens_sum", pool="short") >= 9 else ""

        metrics = wait_for(finished, what="output tokens of the finished stream in /metrics")
    # uvicorn's httptools protocol: the stream was written from the pod connection's callback
    assert _metric(metrics, "latency_router_proxy_relay_streams_total", path="direct") >= 1
    assert _metric(metrics, "latency_router_proxy_relay_streams_total", path="asgi") == 0


def test_non_streaming_and_long_pool(proxy: RunningProxy, pods: Pods) -> None:
    with httpx.Client(timeout=30) as client:
        short = client.post(proxy.url + "/v1/completions", json={"model": "m", "prompt": "hi", "max_tokens": 5})
        long = client.post(proxy.url + "/v1/completions",
                           json={"model": "m", "prompt": [7] * 6000, "max_tokens": 8})
    assert short.status_code == 200 and short.json()["usage"]["completion_tokens"] == 5
    assert short.headers["x-routed-pod"] in pods.short
    assert long.status_code == 200 and long.json()["usage"]["prompt_tokens"] == 6000
    assert long.headers["x-routed-pool"] == "long" and long.headers["x-routed-pod"] in pods.long


def test_upstream_error_status_is_passed_through(proxy: RunningProxy, pods: Pods) -> None:
    with httpx.Client(timeout=30) as client:
        resp = client.post(proxy.url + "/v1/completions", json={"model": "m", "prompt": 123, "stream": True})
        metrics = client.get(proxy.url + "/metrics").text
    assert resp.status_code == 400
    assert "prompt" in resp.json()["error"]["message"]
    assert resp.headers["x-routed-pod"] in pods.short
    assert _metric(metrics, "inference_objective_request_error_total", error_code="400") == 1


def test_invalid_body_is_400_not_500(proxy: RunningProxy) -> None:
    with httpx.Client(timeout=30) as client:
        resp = client.post(proxy.url + "/v1/chat/completions", content=b"{nope")
        wrong_method = client.get(proxy.url + "/v1/completions")
    assert resp.status_code == 400 and resp.json()["error"]["type"] == "invalid_request_error"
    assert wrong_method.status_code == 405 and wrong_method.headers["allow"] == "POST"


def test_unreachable_pod_is_502(pods: Pods, serve_proxy: Serve) -> None:
    dead = f"http://{LOOPBACK}:{free_port()}"
    proxy = serve_proxy(RouterConfig.parse({"pools": [{"name": "short", "pods": [dead]}]}))
    with httpx.Client(timeout=30) as client:
        resp = client.post(proxy.url + "/v1/completions", json={"model": "m", "prompt": "x", "stream": True})
        metrics = client.get(proxy.url + "/metrics").text
    assert resp.status_code == 502
    err = resp.json()["error"]
    assert err["type"] == "upstream_unavailable" and dead in err["message"]
    assert _metric(metrics, "inference_objective_request_error_total", error_code="connect") == 1
    assert proxy.state.router.in_flight(dead) == 0


def test_client_disconnect_releases_in_flight(proxy: RunningProxy) -> None:
    body = {"model": "m", "prompt": "x" * 100, "stream": True, "output_tokens": 3000, "max_tokens": 3000}
    with httpx.Client(timeout=30) as client, client.stream("POST", proxy.url + "/v1/completions", json=body) as r:
        pod = r.headers["x-routed-pod"]
        next(r.iter_lines())
    router = proxy.state.router
    wait_for(lambda: router.in_flight(pod) == 0, what="in-flight released after the client disconnected")


def test_models_health_and_metrics(proxy: RunningProxy) -> None:
    with httpx.Client(timeout=30) as client:
        models = client.get(proxy.url + "/v1/models").json()
        assert client.get(proxy.url + "/healthz").json()["status"] == "ok"
        assert client.get(proxy.url + "/readyz").status_code == 200
        client.post(proxy.url + "/v1/completions", json={"model": "m", "prompt": "x", "max_tokens": 2})
        metrics = client.get(proxy.url + "/metrics").text
    assert [m["id"] for m in models["data"]] == ["meta-llama/Meta-Llama-3-8B-Instruct"]
    assert _metric(metrics, "latency_router_proxy_decisions_total", pool="short", fallback="true") >= 1
    assert _metric(metrics, "latency_router_proxy_fallbacks_total", pool="short") >= 1
    assert _metric(metrics, "router_prediction_fallbacks_total", pool="short", reason="no_predictor") >= 1


def test_pod_killed_mid_stream_ends_with_error_event(serve_proxy: Serve, tmp_path: Path) -> None:
    port = free_port()
    url = f"http://{LOOPBACK}:{port}"
    with ProcessSet(tmp_path) as procs:
        procs.start("pod", [sys.executable, "-m", "sim.pod", "--port", str(port), "--time-scale", "1"],
                    health_urls=[url + "/health"])
        procs.wait_healthy(30)
        proxy = serve_proxy(RouterConfig.parse({"pools": [{"name": "short", "pods": [url]}]}))
        body = {"model": "m", "prompt": "x", "stream": True, "output_tokens": 3000}
        with httpx.Client(timeout=30) as client:
            with client.stream("POST", proxy.url + "/v1/completions", json=body) as resp:
                lines = resp.iter_lines()
                first = next(lines)
                procs.kill("pod")
                rest = list(lines)
            metrics = client.get(proxy.url + "/metrics").text
    events = _events([first, *rest])
    assert events[-1] == b"[DONE]"
    error = orjson.loads(events[-2])["error"]
    assert error["type"] == "upstream_error" and "mid-stream" in error["message"]
    assert _metric(metrics, "latency_router_proxy_stream_errors_total", pod=url) == 1
    assert _metric(metrics, "inference_objective_request_error_total", error_code="midstream") == 1
    assert proxy.state.router.in_flight(url) == 0
