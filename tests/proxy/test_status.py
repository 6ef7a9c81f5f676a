"""``GET /status``: the router's state as JSON (per pool and pod: share, predictions vs actuals, correction,
drift, sheds, fallbacks), served by the proxy in front of real sim pods (no predictor: fallback)."""

from __future__ import annotations

import httpx

from tests.proxy.conftest import RunningProxy


def test_status_reports_pools_pods_and_fallbacks(proxy: RunningProxy) -> None:
    with httpx.Client(timeout=30) as client:
        for i in range(6):
            body = {"model": "m", "prompt": [7] * (100 + i), "max_tokens": 3, "stream": True}
            assert client.post(proxy.url + "/v1/completions", json=body).status_code == 200
        status = client.get(proxy.url + "/status")
    assert status.status_code == 200 and status.headers["content-type"].startswith("application/json")
    doc = status.json()
    assert [p["name"] for p in doc["pools"]] == ["short", "long"]
    short = doc["pools"][0]
    assert short["fallbacks"] == {"no_predictor": 6} and short["shed"] == {}
    assert sum(p["routed"] for p in short["pods"]) == 6
    assert abs(sum(p["share"] for p in short["pods"]) - 1.0) < 1e-3
    for pod in short["pods"]:
        assert set(pod) >= {"url", "pod_class", "share", "routed", "in_flight", "waiting", "kv_cache",
                            "metrics_age_s", "ttft", "tpot"}
        assert pod["ttft"]["correction"] == 1.0 and pod["ttft"]["pairs"] == 0, "no predictions, nothing compared"
    assert doc["prediction_quantile"] == 0.9 and doc["drift"]["coverage_low"] == 0.8
