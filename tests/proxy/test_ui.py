"""The proxy's status page routes in front of real sim pods (no predictor: every decision falls back):
``/ui`` is the page, ``/ui/data`` carries ``/status`` unchanged, ``/ui/requests`` pages through the request log."""

from __future__ import annotations

import httpx

from tests.proxy.conftest import RunningProxy
from tests.waiting import wait_for


def _stream(client: httpx.Client, url: str, i: int) -> None:
    body = {"model": "m", "prompt": [5] * (100 + i), "max_tokens": 3, "stream": True}
    resp = client.post(url + "/v1/completions", json=body, headers={"x-request-id": f"ui-{i}"})
    assert resp.status_code == 200


def test_ui_routes(proxy: RunningProxy) -> None:
    with httpx.Client(timeout=30) as client:
        for i in range(5):
            _stream(client, proxy.url, i)
        page = client.get(proxy.url + "/ui")
        data = client.get(proxy.url + "/ui/data").json()
        status = client.get(proxy.url + "/status").json()
        first = client.get(proxy.url + "/ui/requests", params={"limit": 2}).json()
        rest = client.get(proxy.url + "/ui/requests", params={"after": first["requests"][-1]["seq"]}).json()
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "pool short" in page.text and '<meta http-equiv="refresh" content="5">' in page.text
    assert 'data-key="status.pools.0.fallbacks.total" data-value="5"' in page.text
    for doc in (data["status"], status):  # the only fields that move between two reads
        doc.pop("generated_at")
        for pool in doc["pools"]:
            for pod in pool["pods"]:
                pod.pop("metrics_age_s")
    assert data["status"] == status and data["classifier"]["total_threshold_tokens"] == 2048
    assert data["totals"]["short"]["requests"] == 5 and data["totals"]["short"]["ttft"]["pairs"] == 0  # no predictions
    assert [r["request_id"] for r in first["requests"] + rest["requests"]] == [f"ui-{i}" for i in range(5)]
    assert first["last_seq"] == 5 and len(first["requests"]) == 2
    rec = rest["requests"][-1]
    assert rec["pool"] == "short" and rec["fallback"] and rec["predicted_ttft_ms"] is None and rec["ttft_ms"] > 0
    assert rec["received_at"] <= rec["dispatched_at"] <= rec["first_token_at"] <= rec["ended_at"]


def test_ui_samples_the_status_over_time(proxy: RunningProxy) -> None:
    with httpx.Client(timeout=30) as client:
        _stream(client, proxy.url, 0)
        doc = wait_for(lambda: (d := client.get(proxy.url + "/ui/data").json())["history"] and d, timeout=30)
    sample = doc["history"][-1]
    assert set(sample["pools"]) == {"short", "long"} and doc["history_every_s"] == 2.0
    assert set(sample["pools"]["short"]["pods"]) == set(doc["status"]["pools"][0]["pods"][i]["url"] for i in range(2))


def test_ui_query_errors_are_400_in_the_openai_envelope(proxy: RunningProxy) -> None:
    with httpx.Client(timeout=30) as client:
        for path, params in (("/ui", {"refresh": "soon"}), ("/ui/requests", {"limit": 0}),
                             ("/ui/data", {"recent": 99999})):
            resp = client.get(proxy.url + path, params=params)
            assert resp.status_code == 400, (path, resp.text)
            assert resp.json()["error"]["type"] == "invalid_request_error" and resp.json()["error"]["param"]
