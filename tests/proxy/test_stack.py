"""The whole stack over loopback: sim pods (two pools), a trainer + predictor per pool (subprocesses)
and the router proxy (``python -m router_client``). Tests run in file order on one stack; the last
one stops a predictor."""

from __future__ import annotations

import time
from typing import Any

import httpx
import orjson

from demo.prom import metric_value

Stack = Any


def _probe(client: httpx.Client, stack: Stack) -> float:
    resp = client.post(stack.router_url + "/v1/completions",
                       json={"model": "m", "prompt": [3] * 1500, "max_tokens": 4})
    assert resp.status_code == 200 and resp.headers["x-routing-fallback"] == "false"
    return float(resp.headers["x-predicted-ttft-ms"])


def _version(client: httpx.Client, stack: Stack, pool: str) -> int:
    return int(client.get(stack.predictor_urls[pool] + "/status").json()["bundle"]["version"])


def _load(client: httpx.Client, stack: Stack, n: int, stream: bool = True) -> list[httpx.Response]:
    out = []
    for i in range(n):
        body = {"model": "m", "prompt": [i % 50] * (64 + 37 * i), "output_tokens": 3 + i % 9, "stream": stream}
        resp = client.post(stack.router_url + "/v1/completions", json=body)
        assert resp.status_code == 200, resp.text
        out.append(resp)
    return out


def _wait(predicate: Any, timeout_s: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.2)
    return False


def test_retrain_changes_the_model_used_by_decisions(stack: Stack) -> None:
    with httpx.Client(timeout=30) as client:
        before_version = _version(client, stack, "short")
        before = _probe(client, stack)
        _load(client, stack, 40)
        assert _wait(lambda: _version(client, stack, "short") > before_version), "no new bundle reached the predictor"
        after = [_probe(client, stack) for _ in range(3)]
    assert all(p != before for p in after), (before, after)
    log = stack.logs("trainer-short").read_text()
    assert "TTFT model trained on" in log


def test_streams_reach_the_trainer_as_samples(stack: Stack) -> None:
    with httpx.Client(timeout=30) as client:
        def counts() -> tuple[int, int]:
            status = client.get(stack.trainer_urls["short"] + "/data/status").json()
            return (status["training_data"]["ttft_samples"] + status["test_data"]["ttft_samples"],
                    status["training_data"]["tpot_samples"] + status["test_data"]["tpot_samples"])
        ttft0, tpot0 = counts()
        responses = _load(client, stack, 12)
        assert all(r.text.rstrip().endswith("data: [DONE]") for r in responses)
        assert _wait(lambda: counts()[0] >= ttft0 + 12 and counts()[1] >= tpot0 + 12, 10), counts()


def test_metrics_show_decisions_predictions_and_actuals(stack: Stack) -> None:
    with httpx.Client(timeout=30) as client:
        _load(client, stack, 3)
        client.post(stack.router_url + "/v1/completions", json={"model": "m", "prompt": [1] * 7000, "max_tokens": 4})
        text = client.get(stack.router_url + "/metrics").text
    for pool in ("short", "long"):
        assert metric_value(text, "latency_router_proxy_decisions_total", pool=pool, fallback="false") >= 1
        assert metric_value(text, "inference_objective_request_predicted_ttft_seconds_count", pool=pool) >= 1
        assert metric_value(text, "inference_objective_request_ttft_seconds_count", pool=pool) >= 1
        assert metric_value(text, "router_decisions_total", pool=pool, outcome="routed") >= 1
    assert "latency_router_proxy_fallbacks_total" in text


def test_impossible_slo_on_sheddable_request_is_429(stack: Stack) -> None:
    body = {"model": "m", "prompt": [5] * 800, "max_tokens": 4}
    slo = {"x-llm-d-slo-ttft-ms": "0.01", "x-llm-d-slo-tpot-ms": "0.01"}
    with httpx.Client(timeout=30) as client:
        shed = client.post(stack.router_url + "/v1/completions", json=body,
                           headers={**slo, "x-llm-d-priority": "sheddable", "x-request-id": "shed-me"})
        negative = client.post(stack.router_url + "/v1/chat/completions",
                               json={"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2},
                               headers={**slo, "x-llm-d-priority": "-1"})
        kept = client.post(stack.router_url + "/v1/completions", json=body, headers=slo)
        text = client.get(stack.router_url + "/metrics").text
    assert shed.status_code == 429 and negative.status_code == 429
    error = orjson.loads(shed.content)["error"]
    assert error["type"] == "slo_shed" and "slo" in error["message"]
    assert int(shed.headers["retry-after"]) >= 1 and shed.headers["x-request-id"] == "shed-me"
    assert kept.status_code == 200, "a request that is not sheddable is served even if its SLO is impossible"
    assert metric_value(text, "latency_router_proxy_shed_total", pool="short") >= 2


def test_predictor_down_requests_still_routed_with_fallback(stack: Stack) -> None:
    stack.procs.stop("predictor-short")
    with httpx.Client(timeout=30) as client:
        responses = _load(client, stack, 5, stream=False)
        text = client.get(stack.router_url + "/metrics").text
    assert all(r.headers["x-routing-fallback"] == "true" for r in responses)
    assert metric_value(text, "latency_router_proxy_fallbacks_total", pool="short") >= 5
    assert metric_value(text, "router_prediction_fallbacks_total", pool="short") >= 5
