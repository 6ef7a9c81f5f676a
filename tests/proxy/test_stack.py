"""The whole stack over loopback: sim pods (two pools), a trainer + predictor per pool (subprocesses)
and the router proxy (``python -m router_client``): the suite's shared ``stack`` (tests/conftest.py). The last
test stops a predictor and starts it again."""

from __future__ import annotations

from typing import Any

import httpx
import orjson

from demo.prom import metric_value
from tests.waiting import wait_for

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


def test_retrain_changes_the_model_used_by_decisions(stack: Stack) -> None:
    """More traffic → a retrained TTFT model reaches the predictor → the router predicts the same request anew (a
    new bundle may carry only a new TPOT model: the live TTFT model is kept when the challenger does not win)."""
    with httpx.Client(timeout=30) as client:
        before_version = _version(client, stack, "short")
        before = _probe(client, stack)

        def predicted_anew() -> bool:
            _load(client, stack, 20)
            return _version(client, stack, "short") > before_version and _probe(client, stack) != before

        wait_for(predicted_anew, timeout=120, interval=0.2, what="a retrained TTFT model changes the prediction")
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
        wait_for(lambda: counts()[0] >= ttft0 + 12 and counts()[1] >= tpot0 + 12, timeout=10, interval=0.2,
                 what="12 more TTFT and TPOT samples at the trainer")


def _metrics(client: httpx.Client, stack: Stack) -> str:
    return client.get(stack.router_url + "/metrics").text


def _delta(before: str, after: str, name: str, **labels: str) -> float:
    """What this test added to a counter of the shared stack (other tests' traffic is in ``before``)."""
    return metric_value(after, name, **labels) - metric_value(before, name, **labels)


def test_metrics_show_decisions_predictions_and_actuals(stack: Stack) -> None:
    with httpx.Client(timeout=30) as client:
        before = _metrics(client, stack)
        _load(client, stack, 3)
        long = client.post(stack.router_url + "/v1/completions", json={"model": "m", "prompt": [1] * 7000,
                                                                       "max_tokens": 4})
        assert long.status_code == 200 and long.headers["x-routed-pool"] == "long", long.headers
        text = _metrics(client, stack)
    for pool in ("short", "long"):
        assert _delta(before, text, "latency_router_proxy_decisions_total", pool=pool, fallback="false") >= 1
        assert _delta(before, text, "inference_objective_request_predicted_ttft_seconds_count", pool=pool) >= 1
        assert _delta(before, text, "inference_objective_request_ttft_seconds_count", pool=pool) >= 1
        assert _delta(before, text, "router_decisions_total", pool=pool, outcome="routed") >= 1
    assert "latency_router_proxy_fallbacks_total" in text


def test_impossible_slo_on_sheddable_request_is_429(stack: Stack) -> None:
    body = {"model": "m", "prompt": [5] * 800, "max_tokens": 4}
    slo = {"x-llm-d-slo-ttft-ms": "0.01", "x-llm-d-slo-tpot-ms": "0.01"}
    with httpx.Client(timeout=30) as client:
        before = _metrics(client, stack)
        shed = client.post(stack.router_url + "/v1/completions", json=body,
                           headers={**slo, "x-llm-d-priority": "sheddable", "x-request-id": "shed-me"})
        negative = client.post(stack.router_url + "/v1/chat/completions",
                               json={"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2},
                               headers={**slo, "x-llm-d-priority": "-1"})
        kept = client.post(stack.router_url + "/v1/completions", json=body, headers=slo)
        text = _metrics(client, stack)
    assert shed.status_code == 429 and negative.status_code == 429
    error = orjson.loads(shed.content)["error"]
    assert error["type"] == "slo_shed" and "slo" in error["message"]
    assert int(shed.headers["retry-after"]) >= 1 and shed.headers["x-request-id"] == "shed-me"
    assert kept.status_code == 200, "a request that is not sheddable is served even if its SLO is impossible"
    assert _delta(before, text, "latency_router_proxy_shed_total", pool="short") == 2


def test_predictor_down_requests_still_routed_with_fallback(stack: Stack) -> None:
    with httpx.Client(timeout=30) as client:
        before = _metrics(client, stack)
        stack.procs.stop("predictor-short")
        try:
            responses = _load(client, stack, 5, stream=False)
            text = _metrics(client, stack)
        finally:
            stack.procs.restart("predictor-short", timeout_s=60)
        assert all(r.headers["x-routing-fallback"] == "true" for r in responses)
        assert _delta(before, text, "latency_router_proxy_fallbacks_total", pool="short") == 5
        assert _delta(before, text, "router_prediction_fallbacks_total", pool="short") >= 5
        wait_for(lambda: _probe_routed(client, stack), timeout=30, interval=0.2,
                 what="the restarted predictor answers the router again")


def _probe_routed(client: httpx.Client, stack: Stack) -> bool:
    resp = client.post(stack.router_url + "/v1/completions", json={"model": "m", "prompt": [3] * 1500,
                                                                   "max_tokens": 4})
    assert resp.status_code == 200
    return resp.headers["x-routing-fallback"] == "false"
