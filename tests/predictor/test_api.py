"""Every endpoint in-process (Starlette TestClient with lifespan) against a real tiny bundle."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from starlette.testclient import TestClient

from predictor.app import create_app
from shared.timefmt import parse_rfc3339
from tests.predictor.conftest import Built, build_bundle, dir_settings, random_rows

PREDICTION_KEYS = ["ttft_ms", "tpot_ms", "predicted_at", "model_type", "objective_type", "quantile",
                   "last_model_load"]


@pytest.fixture
def client(shared_built: Built) -> Iterator[TestClient]:
    with TestClient(create_app(dir_settings(shared_built.path.parent))) as c:
        yield c


@pytest.fixture
def empty_client(tmp_path: Path) -> Iterator[TestClient]:
    (tmp_path / "none").mkdir()
    with TestClient(create_app(dir_settings(tmp_path / "none"))) as c:
        yield c


def _row(**kw: Any) -> dict[str, Any]:
    row = {"kv_cache_percentage": 0.42, "input_token_length": 812, "num_request_waiting": 0,
           "num_request_running": 3, "num_tokens_generated": 1, "prefix_cache_score": 0.25}
    row.update(kw)
    return row


def _offset_ts(text: str) -> None:
    assert parse_rfc3339(text).utcoffset() is not None
    assert text.endswith(("Z", "+00:00"))


def test_strict_schema_and_headers(client: TestClient) -> None:
    rows = [_row(pod_type="decode", prefill_tokens_in_flight=1536), _row(timestamp="2026-01-01T00:00:00Z")]
    r = client.post("/predict/bulk/strict", json={"requests": rows})
    assert r.status_code == 200
    assert r.headers["x-model-version"] == "1" and r.headers["x-model-prior"] == "false"
    body = r.json()
    assert list(body) == ["predictions", "total_requests", "successful_predictions", "failed_predictions",
                          "processing_time_ms"]
    assert (body["total_requests"], body["successful_predictions"], body["failed_predictions"]) == (2, 2, 0)
    assert isinstance(body["processing_time_ms"], float)
    assert len(body["predictions"]) == 2
    for p in body["predictions"]:
        assert list(p) == PREDICTION_KEYS
        assert p["ttft_ms"] > 0 and p["tpot_ms"] > 0
        assert (p["model_type"], p["objective_type"], p["quantile"]) == ("xgboost", "quantile", 0.9)
        _offset_ts(p["predicted_at"])
        _offset_ts(p["last_model_load"])
    assert body["predictions"][0]["predicted_at"] == body["predictions"][1]["predicted_at"]


def test_bulk_non_strict_schema(client: TestClient) -> None:
    r = client.post("/predict/bulk", json={"requests": [_row(), _row(pod_type="prefill")]})
    body = r.json()
    assert r.status_code == 200 and body["errors"] == [] and body["failed_predictions"] == 0
    assert [list(p) for p in body["predictions"]] == [PREDICTION_KEYS] * 2
    assert r.headers["x-model-version"] == "1"


def test_single_predict_schema(client: TestClient) -> None:
    r = client.post("/predict", json=_row(pod_type="decode"))
    assert r.status_code == 200 and list(r.json()) == PREDICTION_KEYS
    assert r.headers["x-model-version"] == "1"


@pytest.mark.parametrize("pod_type", ["encode", "both", "prefill-decode", "some-new-role", "", None])
def test_any_pod_type_accepted(client: TestClient, pod_type: str | None) -> None:
    assert client.post("/predict", json=_row(pod_type=pod_type)).status_code == 200
    assert client.post("/predict/bulk/strict", json={"requests": [_row(pod_type=pod_type)]}).status_code == 200


def test_unknown_pod_type_uses_documented_code(client: TestClient) -> None:
    """Unknown roles share code 3, so any two unknown strings predict the same."""
    a = client.post("/predict", json=_row(pod_type="role-a")).json()
    b = client.post("/predict", json=_row(pod_type="role-b")).json()
    assert (a["ttft_ms"], a["tpot_ms"]) == (b["ttft_ms"], b["tpot_ms"])


@pytest.mark.parametrize("path", ["/predict", "/predict/bulk", "/predict/bulk/strict"])
def test_old_client_without_pod_class(client: TestClient, path: str) -> None:
    """A client that never heard of pod_class (every llm-d EPP) gets the unknown-class answer (code 0)."""
    def ask(row: dict[str, Any]) -> tuple[float, float]:
        r = client.post(path, json=row if path == "/predict" else {"requests": [row, row]})
        assert r.status_code == 200, r.text
        body = r.json()
        one = body if path == "/predict" else body["predictions"][0]
        return one["ttft_ms"], one["tpot_ms"]
    old = ask(_row())
    assert old == ask(_row(pod_class="")) == ask(_row(pod_class=None))
    assert ask(_row(pod_class="a100")) != old, "the bundle's models learned the a100 class"


def test_pod_class_reaches_both_models(client: TestClient, shared_built: Built) -> None:
    rows = [_row(pod_class="a100"), _row(pod_class="h100"), _row()]
    got = client.post("/predict/bulk/strict", json={"requests": rows}).json()["predictions"]
    want = shared_built.expected(rows)
    for name in ("ttft", "tpot"):
        assert [p[f"{name}_ms"] for p in got] == pytest.approx(list(want[name]), rel=1e-5)
        assert want[name][0] > want[name][2] + 10, f"{name}: the slow class is predicted slower"


def _detail(r: Any) -> list[dict[str, Any]]:
    assert r.status_code == 422, r.text
    detail = r.json()["detail"]
    assert isinstance(detail, list) and detail
    for e in detail:
        assert {"type", "loc", "msg", "input"} <= set(e) and e["loc"][0] == "body"
    return detail


def test_missing_field_422(client: TestClient) -> None:
    row = _row()
    del row["input_token_length"]
    d = _detail(client.post("/predict", json=row))
    assert d[0]["type"] == "missing" and d[0]["loc"] == ["body", "input_token_length"]
    d = _detail(client.post("/predict/bulk/strict", json={"requests": [_row(), row]}))
    assert d[0]["loc"] == ["body", "requests", 1, "input_token_length"]


@pytest.mark.parametrize("path", ["/predict/bulk", "/predict/bulk/strict"])
def test_negative_tokens_in_flight_422(client: TestClient, path: str) -> None:
    d = _detail(client.post(path, json={"requests": [_row(prefill_tokens_in_flight=-1)]}))
    assert d == [{"type": "greater_than_equal", "loc": ["body", "requests", 0, "prefill_tokens_in_flight"],
                  "msg": "Input should be greater than or equal to 0", "input": -1, "ctx": {"ge": 0}}]
    d = _detail(client.post("/predict", json=_row(decode_tokens_in_flight=-5)))
    assert d[0]["loc"] == ["body", "decode_tokens_in_flight"]


@pytest.mark.parametrize("path", ["/predict/bulk", "/predict/bulk/strict"])
def test_row_count_limits(client: TestClient, path: str) -> None:
    assert _detail(client.post(path, json={"requests": []}))[0]["type"] == "too_short"
    d = _detail(client.post(path, content=orjson.dumps({"requests": [_row()] * 10_001})))
    assert d[0]["type"] == "too_long" and d[0]["loc"] == ["body", "requests"]
    r = client.post(path, content=orjson.dumps({"requests": [_row()] * 10_000}))
    assert r.status_code == 200 and len(r.json()["predictions"]) == 10_000
    assert _detail(client.post(path, json={}))[0]["type"] == "missing"


@pytest.mark.parametrize("literal", [b"NaN", b"Infinity", b"-Infinity", b"1e999", b"1" + b"0" * 400])
@pytest.mark.parametrize("path", ["/predict", "/predict/bulk", "/predict/bulk/strict"])
def test_non_finite_numbers_422(client: TestClient, literal: bytes, path: str) -> None:
    row = orjson.dumps(_row()).replace(b'"kv_cache_percentage":0.42', b'"kv_cache_percentage":' + literal)
    body = row if path == "/predict" else b'{"requests":[' + row + b"]}"
    d = _detail(client.post(path, content=body))
    assert d[0]["loc"][-1] == "kv_cache_percentage"
    assert d[0]["type"] in ("finite_number", "less_than_equal", "greater_than_equal")


@pytest.mark.parametrize("path", ["/predict", "/predict/bulk", "/predict/bulk/strict"])
def test_malformed_and_empty_body_422(client: TestClient, path: str) -> None:
    assert _detail(client.post(path, content=b'{"requests": [1,'))[0]["type"] == "json_invalid"
    d = _detail(client.post(path, content=b""))
    assert d[0]["type"] == "missing" and d[0]["loc"] == ["body"]


def test_lax_numbers_and_unknown_keys(client: TestClient) -> None:
    ok = _row(input_token_length=200.0, num_request_running="3", extra_key={"x": 1})
    assert client.post("/predict", json=ok).status_code == 200
    assert _detail(client.post("/predict", json=_row(input_token_length=200.5)))[0]["type"] == "int_from_float"
    assert _detail(client.post("/predict", json=_row(pod_type=7)))[0]["type"] == "string_type"


def test_status(client: TestClient) -> None:
    body = client.get("/status").json()
    assert body["is_ready"] is True
    assert (body["model_type"], body["objective_type"], body["quantile"]) == ("xgboost", "quantile", 0.9)
    _offset_ts(body["last_model_load"])
    assert body["models_exist"] == {"ttft_model": True, "tpot_model": True, "ttft_gated": False,
                                    "tpot_gated": False}
    assert all(isinstance(v, bool) for v in body["models_exist"].values())
    assert body["ensemble_active"] is False
    assert body["bundle"]["version"] == 1 and body["bundle"]["prior"] is False
    assert body["bundle"]["evaluator"] == {"ttft": "numpy-forest", "tpot": "numpy-forest"}
    assert body["bundle"]["forest_from"] == {"ttft": "booster files", "tpot": "booster files"}  # no array form
    assert body["refused"] == [] and body["sync"]["last_error"] is None
    assert body["training_server_url"].startswith("file://")


def test_status_carries_each_models_candidate_and_physical_base(tmp_path: Path) -> None:
    """What the router's status page reads (``router_client.model_watch``)."""
    base = {"terms": ["1", "num_request_running"], "coefficients": [20.0, 0.5], "rows": 600, "source": "fit"}
    build_bundle(tmp_path, 1, entry_patch={"candidate": "depth3", "base": base})
    with TestClient(create_app(dir_settings(tmp_path))) as c:
        models = c.get("/status").json()["bundle"]["models"]
    assert {n: (m["candidate"], m["base"]) for n, m in models.items()} == {"ttft": ("depth3", base),
                                                                           "tpot": ("depth3", base)}


def test_health_ready_root(client: TestClient) -> None:
    assert client.get("/healthz").json() == {"status": "ok", "service": "http-based-latency-predictor"}
    assert client.get("/readyz").json() == {"status": "ready", "model_type": "xgboost", "objective_type": "quantile",
                                            "quantile": 0.9}
    root = client.get("/").json()
    assert root["message"] == "HTTP-based Latency Predictor is running"
    assert root["is_ready"] is True and root["sync_interval"] == 60 and isinstance(root["training_server"], str)


def test_unknown_path_and_method(client: TestClient) -> None:
    r = client.get("/nope")
    assert (r.status_code, r.json()) == (404, {"detail": "Not Found"})
    r = client.get("/predict")
    assert (r.status_code, r.json()) == (405, {"detail": "Method Not Allowed"})


def test_metrics(client: TestClient) -> None:
    client.post("/predict/bulk/strict", json={"requests": [_row()] * 3})
    text = client.get("/metrics").text
    assert 'predictor_requests_total{endpoint="predict_bulk_strict",status="200"} 1.0' in text
    assert 'predictor_rows_predicted_total{endpoint="predict_bulk_strict"} 3.0' in text
    assert "predictor_bundle_version 1.0" in text
    assert "predictor_request_duration_seconds_bucket" in text
    assert "predictor_seconds_since_last_sync" in text and "predictor_bundles_refused_total 0.0" in text


def test_reload_when_nothing_new(client: TestClient) -> None:
    body = client.post("/reload").json()
    assert body["synced"] is False and body["loaded"] is True and body["is_ready"] is True
    _offset_ts(body["last_load_time"])
    assert {"model_type", "objective_type", "quantile"} <= set(body)


def test_not_ready_answers(empty_client: TestClient) -> None:
    c = empty_client
    assert c.get("/readyz").status_code == 503 and c.get("/readyz").json() == {"detail": "Models are not ready"}
    r = c.post("/predict", json=_row())
    assert (r.status_code, r.json()) == (503, {"detail": "Models not ready"})
    r = c.post("/predict/bulk/strict", json={"requests": [_row()]})
    assert (r.status_code, r.json()) == (503, {"detail": "Models not ready"})
    body = c.post("/predict/bulk", json={"requests": [_row(), _row(pod_type="decode")]}).json()
    assert body["predictions"] == [None, None]
    assert body["successful_predictions"] == 0 and body["failed_predictions"] == 2
    assert body["errors"][1]["index"] == 1
    assert body["errors"][1]["error"] == "Batch prediction error: 503: Models not ready"
    assert body["errors"][1]["request"]["pod_type"] == "decode"
    assert body["errors"][0]["request"]["prefill_tokens_in_flight"] == 0
    assert "pod_class" not in body["errors"][0]["request"], "extensions are echoed only when sent"
    echoed = c.post("/predict/bulk", json={"requests": [_row(pod_class="h100")]}).json()
    assert echoed["errors"][0]["request"]["pod_class"] == "h100"
    status = c.get("/status").json()
    assert status["is_ready"] is False and status["last_model_load"] is None and status["bundle"] is None
    assert status["models_exist"]["ttft_model"] is False
    assert c.get("/healthz").status_code == 200
    assert c.get("/").json()["is_ready"] is False
    assert _detail(c.post("/predict/bulk/strict", json={"requests": []}))[0]["type"] == "too_short"


def test_large_body_goes_through_threadpool(shared_built: Built) -> None:
    settings = dir_settings(shared_built.path.parent, inline_max_bytes=0)
    rows = random_rows(50, seed=3)
    with TestClient(create_app(settings)) as c:
        threaded = c.post("/predict/bulk/strict", json={"requests": rows}).json()
    with TestClient(create_app(dir_settings(shared_built.path.parent))) as c:
        inline = c.post("/predict/bulk/strict", json={"requests": rows}).json()
    assert [p["ttft_ms"] for p in threaded["predictions"]] == [p["ttft_ms"] for p in inline["predictions"]]
