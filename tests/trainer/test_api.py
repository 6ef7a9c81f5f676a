"""In-process API tests of every training-server endpoint: shapes and literal strings (contract §4)."""

from __future__ import annotations

import gzip
import io
import json
import tarfile
from collections.abc import Callable
from typing import Any

import pytest
import xgboost as xgb
from fastapi.testclient import TestClient

from shared.bundle import verify_bundle

ENTRY: dict[str, Any] = {"kv_cache_percentage": 0.42, "input_token_length": 812, "num_request_waiting": 0,
                         "num_request_running": 3, "num_tokens_generated": 0, "prefix_cache_score": 0.25,
                         "actual_ttft_ms": 187.4, "actual_tpot_ms": 0.0}
SIX = ("ttft", "tpot", "ttft_scaler", "tpot_scaler", "ttft_gated", "tpot_gated")


def svc(client: TestClient) -> Any:
    return client.app.state.service  # type: ignore[attr-defined]


def post_entries(client: TestClient, entries: list[Any], query: str = "") -> Any:
    return client.post(f"/add_training_data_bulk{query}", content=json.dumps({"entries": entries}),
                       headers={"content-type": "application/json"})


def status(client: TestClient) -> dict[str, Any]:
    return client.get("/data/status").json()


def total_rows(client: TestClient) -> int:
    s = status(client)
    return s["training_data"]["total_samples"] + s["test_data"]["total_samples"]


# --- ingest -----------------------------------------------------------------------------------------------

def test_ingest_202_literal_and_visible_in_status(client: TestClient, rows_of: Callable[..., list]) -> None:
    r = post_entries(client, rows_of(300))
    assert r.status_code == 202 and r.json() == {"message": "Accepted 300 training samples."}
    s = status(client)
    assert s["training_data"]["ttft_samples"] + s["test_data"]["ttft_samples"] == 150
    assert s["durable"] == {"rows": 300, "bytes": svc(client).log.total_bytes}


def test_empty_list_is_valid(client: TestClient) -> None:
    r = post_entries(client, [])
    assert r.status_code == 202 and r.json() == {"message": "Accepted 0 training samples."}


def test_both_zero_targets_discarded_but_counted(client: TestClient) -> None:
    r = post_entries(client, [dict(ENTRY, actual_ttft_ms=0.0, actual_tpot_ms=0.0), ENTRY])
    assert r.json() == {"message": "Accepted 2 training samples."}
    assert total_rows(client) == 1 and status(client)["durable"]["rows"] == 1


def test_accepts_20000_rows_in_one_call(client: TestClient, rows_of: Callable[..., list]) -> None:
    r = post_entries(client, rows_of(20_000))
    assert r.status_code == 202 and r.json()["message"] == "Accepted 20000 training samples."
    assert status(client)["durable"]["rows"] == 20_000


@pytest.mark.parametrize(("literal", "field"), [("NaN", "actual_ttft_ms"), ("Infinity", "actual_ttft_ms"),
                                                ("-Infinity", "actual_tpot_ms"), ("1e999", "input_token_length"),
                                                ("1" + "0" * 400, "input_token_length"), ("4e6", "actual_ttft_ms"),
                                                ("20000000", "prefill_tokens_in_flight")])
def test_non_finite_and_huge_values_422_naming_field_nothing_stored(client: TestClient, literal: str,
                                                                     field: str) -> None:
    good = json.dumps(ENTRY)
    bad = json.dumps({**ENTRY, field: 1}).replace(f'"{field}": 1', f'"{field}": {literal}')
    r = client.post("/add_training_data_bulk", content=f'{{"entries": [{good}, {bad}]}}',
                    headers={"content-type": "application/json"})
    assert r.status_code == 422
    (error,) = r.json()["detail"]
    assert error["loc"] == ["body", "entries", 1, field] and {"type", "msg", "input"} <= set(error)
    assert total_rows(client) == 0 and status(client)["durable"]["rows"] == 0


def test_422_shape_negative_in_flight(client: TestClient) -> None:
    r = post_entries(client, [dict(ENTRY, prefill_tokens_in_flight=-1)])
    assert r.status_code == 422
    assert r.json() == {"detail": [{"type": "greater_than_equal",
                                    "loc": ["body", "entries", 0, "prefill_tokens_in_flight"],
                                    "msg": "Input should be greater than or equal to 0", "input": -1,
                                    "ctx": {"ge": 0}}]}


@pytest.mark.parametrize(("body", "kind", "loc"), [("", "missing", ["body"]), ("{nope", "json_invalid", None),
                                                   ("{}", "missing", ["body", "entries"]),
                                                   ('{"entries": 3}', "list_type", ["body", "entries"]),
                                                   ('{"entries": [3]}', "model_attributes_type", None)])
def test_body_level_422(client: TestClient, body: str, kind: str, loc: list | None) -> None:
    r = client.post("/add_training_data_bulk", content=body, headers={"content-type": "application/json"})
    assert r.status_code == 422
    detail = r.json()["detail"]
    assert detail[0]["type"] == kind and (loc is None or detail[0]["loc"] == loc)


def test_unknown_keys_and_lax_numbers(client: TestClient) -> None:
    row = dict(ENTRY, input_token_length="812", num_request_running=3.0, timestamp="2026-01-01T00:00:00.123Z",
               some_future_field={"x": 1}, pod_type="encode-prefill-decode")
    assert post_entries(client, [row]).status_code == 202


def test_partial_mode_stores_valid_rows(client: TestClient) -> None:
    entries = [ENTRY, dict(ENTRY, actual_ttft_ms=float("inf")), ENTRY, dict(ENTRY, kv_cache_percentage=2)]
    body = json.dumps({"entries": entries}).replace("Infinity", "Infinity")
    r = client.post("/add_training_data_bulk?partial=true", content=body, headers={"content-type": "application/json"})
    assert r.status_code == 202
    out = r.json()
    assert out["message"] == "Accepted 4 training samples." and out["accepted"] == 2
    assert [x["index"] for x in out["rejected"]] == [1, 3]
    assert out["rejected"][0]["errors"][0]["loc"] == ["body", "entries", 1, "actual_ttft_ms"]
    assert total_rows(client) == 2
    metrics = client.get("/metrics").text
    assert 'trainer_samples_rejected_total{reason="finite_number"} 1.0' in metrics
    assert 'trainer_samples_rejected_total{reason="less_than_equal"} 1.0' in metrics


def test_partial_mode_all_valid_has_empty_rejections(client: TestClient) -> None:
    r = post_entries(client, [ENTRY], "?partial=true")
    assert r.json() == {"message": "Accepted 1 training samples.", "accepted": 1, "rejected": []}


# --- health, root, info -----------------------------------------------------------------------------------

def test_health_ready_root(client: TestClient) -> None:
    assert client.get("/healthz").json() == {"status": "ok"}
    ready = client.get("/readyz")
    assert ready.status_code == 200 and ready.json()["status"] == "ready"
    assert ready.json()["retrain"]["failures"] == 0
    assert client.get("/").json() == {"message": "Latency Predictor is running.", "model_type": "xgboost",
                                      "objective_type": "quantile", "quantile": 0.9,
                                      "description": "Predicting 90% quantile for TTFT and TPOT latencies"}


def test_root_mean_description(client_factory: Callable[..., TestClient]) -> None:
    c = client_factory(objective_type="mean")
    assert c.get("/").json()["description"] == "Predicting mean TTFT and TPOT latencies"


def test_download_info(client: TestClient) -> None:
    info = client.get("/model/download/info").json()
    assert info["model_type"] == "xgboost" and info["objective_type"] == "quantile" and info["quantile"] == 0.9
    assert info["available_endpoints"] == {"trees": {"ttft_trees": "/model/ttft/xgb/json",
                                                     "tpot_trees": "/model/tpot/xgb/json"}}
    assert info["model_status"] == {"ttft_model_ready": True, "tpot_model_ready": True}
    assert set(info["evaluation_info"]) == {"quantile_loss", "coverage_percent", "violation_rate_percent"}
    assert isinstance(info["bundle"]["base_score"]["ttft"], float)


@pytest.mark.parametrize("name", ["ttft", "tpot"])
def test_model_info_and_download(client: TestClient, name: str) -> None:
    info = client.get(f"/model/{name}/info").json()
    assert info["model_name"] == name and info["exists"] is True and info["size_bytes"] > 0
    assert info["path"].endswith(f"{name}.ubj") and info["quantile"] == 0.9
    assert info["last_modified"].endswith("+00:00")
    r = client.get(f"/model/{name}/download")
    assert r.status_code == 200 and r.headers["content-type"] == "application/octet-stream"
    assert r.headers["content-disposition"] == f'attachment; filename="{name}.ubj"'
    assert int(r.headers["content-length"]) == info["size_bytes"] == len(r.content)
    xgb.Booster(model_file=bytearray(r.content))


@pytest.mark.parametrize("name", ["ttft_scaler", "tpot_scaler", "ttft_gated", "tpot_gated"])
def test_absent_artifacts_404(client: TestClient, name: str) -> None:
    for path in (f"/model/{name}/info", f"/model/{name}/download"):
        r = client.get(path)
        assert r.status_code == 404 and r.json() == {"detail": f"Model {name} not found"}


def test_unknown_model_404(client: TestClient) -> None:
    r = client.get("/model/bogus/info")
    assert r.status_code == 404 and r.json() == {"detail": "Unknown model: bogus"}
    assert client.get("/nope").json() == {"detail": "Not Found"}
    assert client.post("/healthz").status_code == 405


def test_models_list(client: TestClient) -> None:
    body = client.get("/models/list").json()
    assert tuple(body["models"]) == SIX
    assert body["models"]["ttft"]["exists"] is True and body["models"]["ttft"]["size_bytes"] > 0
    assert body["models"]["ttft_gated"] == {"exists": False, "size_bytes": 0, "last_modified": None}
    assert body["evaluation_metrics"] == {"quantile_loss": "Lower is better", "coverage_percent": "Target: 90.0%",
                                          "violation_rate_percent": "Target: 10.0%"}
    assert body["server_time"].endswith("+00:00") and body["model_type"] == "xgboost"


@pytest.mark.parametrize("name", ["ttft", "tpot"])
def test_xgb_json_is_bare_dump_array(client: TestClient, name: str) -> None:
    r = client.get(f"/model/{name}/xgb/json")
    assert r.status_code == 200
    trees = r.json()
    booster = xgb.Booster(model_file=bytearray(svc(client).live.get().bundle.model_bytes(name)))
    assert isinstance(trees, list) and trees == [json.loads(t) for t in booster.get_dump(dump_format="json")]
    assert trees == []  # the prior is its physical base alone (in the manifest): no trees to dump


def test_xgb_json_dumps_the_trees_of_a_trained_model(client: TestClient, rows_of: Callable[..., list]) -> None:
    post_entries(client, rows_of(2000))
    assert retrain(client) == 2
    for name in ("ttft", "tpot"):
        entry = svc(client).live.get().bundle.model_entry(name)
        trees = client.get(f"/model/{name}/xgb/json").json()
        assert isinstance(trees, list) and len(trees) == entry.quantile_rounds * len(entry.quantiles)
        assert all("split" in t or "leaf" in t for t in trees), name


# --- flush, status ----------------------------------------------------------------------------------------

def test_flush_default_and_message(client: TestClient, rows_of: Callable[..., list]) -> None:
    post_entries(client, rows_of(200))
    before = status(client)
    r = client.post("/flush")
    body = r.json()
    assert r.status_code == 200 and body["success"] is True and body["metrics_cleared"] is True
    tr, te = before["training_data"], before["test_data"]
    assert body["message"] == (f"Successfully flushed: {tr['ttft_samples']} TTFT and {tr['tpot_samples']} TPOT "
                               f"training samples, {te['ttft_samples']} TTFT and {te['tpot_samples']} TPOT test "
                               "samples, all metric scores")
    assert body["ttft_training_samples_flushed"] == tr["ttft_samples"] and body["reason"] is None
    after = status(client)
    assert after["training_data"]["total_samples"] == 0 and after["test_data"]["total_samples"] == 0
    assert client.get("/readyz").status_code == 200


def test_flush_only_test_data(client: TestClient, rows_of: Callable[..., list]) -> None:
    post_entries(client, rows_of(200))
    r = client.post("/flush", json={"flush_training_data": False, "flush_metrics": False, "reason": "drift"})
    body = r.json()
    assert body["reason"] == "drift" and body["ttft_training_samples_flushed"] == 0
    assert body["message"].startswith("Successfully flushed: ") and "test samples" in body["message"]
    assert status(client)["test_data"]["total_samples"] == 0
    assert status(client)["training_data"]["total_samples"] > 0


def test_flush_nothing_and_bad_flag(client: TestClient) -> None:
    r = client.post("/flush", json={"flush_training_data": False, "flush_test_data": False, "flush_metrics": False})
    assert r.json()["message"] == "No data flushed"
    bad = client.post("/flush", json={"flush_training_data": "maybe"})
    assert bad.status_code == 422 and bad.json()["detail"][0]["loc"] == ["body", "flush_training_data"]


def test_flush_token_guard(client_factory: Callable[..., TestClient]) -> None:
    c = client_factory(write_token="s3cret")
    assert c.post("/flush").status_code == 401
    assert c.post("/flush", headers={"Authorization": "Bearer wrong"}).status_code == 403
    assert c.post("/flush", headers={"Authorization": "Bearer s3cret"}).status_code == 200


def test_data_status_shape(client: TestClient, rows_of: Callable[..., list]) -> None:
    post_entries(client, rows_of(100, kind="ttft"))
    s = status(client)
    assert set(s) >= {"training_data", "test_data", "ensemble", "metrics", "bucket_distribution", "model_ready",
                      "last_retrain", "durable"}
    assert s["ensemble"]["ensemble_active"] is False and s["model_ready"] is True and s["last_retrain"] is None
    assert all(k.startswith("queue_") and "_cache_" in k and "_prefix_" in k for k in s["bucket_distribution"])
    assert sum(s["bucket_distribution"].values()) == s["training_data"]["ttft_samples"]


# --- retrain, metrics, export, predict -------------------------------------------------------------------

def retrain(client: TestClient) -> int | None:
    return svc(client).loop.run_cycle()


def test_retrain_publishes_and_metrics_show_it(client: TestClient, rows_of: Callable[..., list],
                                               caplog: pytest.LogCaptureFixture) -> None:
    post_entries(client, rows_of(2000))
    with caplog.at_level("INFO", logger="trainer.retrain"):
        assert retrain(client) == 2
    lines = [r.getMessage() for r in caplog.records if "model trained on" in r.getMessage()]
    assert len(lines) == 2
    import re
    shape = re.compile(r"^(TTFT|TPOT) model trained on \d+ samples\. MAE = \d+\.\d\d, RMSE = \d+\.\d\d, "
                       r"coverage = \d+\.\d%, pinball = \d+\.\d\d \(reference pinball \d+\.\d\d, chose "
                       r"(base|depth\d+), rounds \d+\+\d+, shift n/a, fit \d+\.\d\d s, base [0-9.e+-]+( \+ "
                       r"[0-9.e+-]+·[a-z_*]+)*, published v2\)$")
    assert all(shape.match(line) for line in lines), lines
    assert retrain(client) is None  # no new rows → no fit
    text = client.get("/metrics").text
    for literal in ('model_type{type="xgboost"} 1', "ensemble_active{} 0", 'objective_type{type="quantile"} 1',
                    'ttft_importance{feature="prefix_cache_score"} ', "trainer_live_bundle_version 2.0",
                    'training_samples_count{model="ttft",queue_bucket="0",cache_bucket="0",prefix_bucket="0"} ',
                    'ttft_coverage_percent{idx="0"} ', "target_coverage_percent{} 90.0", "prefix_score_mean{} ",
                    "trainer_retrain_duration_seconds_count 1.0", 'trainer_model_pinball{model="ttft"}',
                    'trainer_model_base_coefficient{model="tpot",term="num_request_running"} '):
        assert literal in text, literal
    for line in text.splitlines():
        if line and not line.startswith("#"):
            float(line.rsplit(" ", 1)[1])
    assert status(client)["last_retrain"] is not None and status(client)["metrics"]["ttft_scores_count"] == 1


def test_worse_challenger_is_kept_out(client: TestClient, rows_of: Callable[..., list],
                                      caplog: pytest.LogCaptureFixture) -> None:
    post_entries(client, rows_of(2000))
    assert retrain(client) == 2
    noisy = rows_of(40, seed=99, kind="ttft")
    for row in noisy:
        row["actual_ttft_ms"] = 1.0
    post_entries(client, noisy)
    with caplog.at_level("INFO", logger="trainer.retrain"):
        version = retrain(client)
    msgs = [r.getMessage() for r in caplog.records if "TTFT model trained" in r.getMessage()]
    assert msgs and (version == 3) == ("published v3" in msgs[0])
    if version is None:
        assert "kept v2: pinball" in msgs[0]


def test_export_tar_gz(client: TestClient) -> None:
    r = client.get("/model/export")
    assert r.status_code == 200 and r.headers["content-type"] == "application/gzip"
    assert r.headers["content-disposition"] == "attachment; filename=seed-model.tar.gz"
    with tarfile.open(fileobj=io.BytesIO(gzip.decompress(r.content))) as tar:
        members = {m.name: m for m in tar.getmembers()}
        assert set(members) == {"ttft.ubj", "tpot.ubj", "ttft-forest.json", "tpot-forest.json", "manifest.json",
                            "metadata.json"}
        assert len({m.mtime for m in members.values()}) == 1 and members["ttft.ubj"].mtime > 0
        files = {name: tar.extractfile(m).read() for name, m in members.items()}  # type: ignore[union-attr]
    meta = json.loads(files["metadata.json"])
    assert {"model_type", "quantile_alpha", "exported_at", "ttft_samples", "tpot_samples"} <= set(meta)
    verify_bundle(files["manifest.json"], files.__getitem__, None)


def test_predict_in_process(client: TestClient) -> None:
    row = {k: v for k, v in ENTRY.items() if not k.startswith("actual_")}
    r = client.post("/predict", json=row)
    body = r.json()
    assert r.status_code == 200 and body["ttft_ms"] > 0 and body["tpot_ms"] > 0
    assert body["ttft_uncertainty"] == pytest.approx(0.1 * body["ttft_ms"])
    assert body["ttft_prediction_bounds"] == pytest.approx([0.8 * body["ttft_ms"], 1.2 * body["ttft_ms"]])
    assert "last_model_load" not in body and body["predicted_at"].endswith("+00:00")
    live = svc(client).live.get()
    from shared.features import feature_columns
    cols = feature_columns({k: float(v) for k, v in row.items()}, 1)
    assert body["ttft_ms"] == pytest.approx(float(live.predict("ttft", cols)[0]))


def test_predict_422_missing_field(client: TestClient) -> None:
    r = client.post("/predict", json={"kv_cache_percentage": 0.1})
    assert r.status_code == 422
    assert {"type": "missing", "loc": ["body", "input_token_length"]}.items() <= r.json()["detail"][0].items()


def test_retrain_failure_is_counted_and_visible(client: TestClient, rows_of: Callable[..., list]) -> None:
    import shutil
    root = svc(client).publisher.root
    post_entries(client, rows_of(500))
    shutil.rmtree(root)
    root.write_text("not a directory")
    assert retrain(client) is None
    ready = client.get("/readyz").json()
    assert ready["status"] == "ready" and ready["retrain"]["failures"] == 1
    assert "Error" in ready["retrain"]["last_error"]
    assert "trainer_retrain_failures_total 1.0" in client.get("/metrics").text
    root.unlink()
    assert retrain(client) == 2  # retried without new rows once the disk is back
    assert client.get("/readyz").json()["retrain"]["consecutive_failures"] == 0


def test_debug_prefix_distribution(client: TestClient, rows_of: Callable[..., list]) -> None:
    assert client.get("/debug/prefix_distribution").json() == {"error": "No training samples available"}
    post_entries(client, rows_of(400, kind="ttft"))
    body = client.get("/debug/prefix_distribution").json()
    assert set(body["prefix_ranges"]) == {"0.00-0.25", "0.25-0.50", "0.50-0.75", "0.75-1.00"}
    assert sum(r["count"] for r in body["prefix_ranges"].values()) == body["total_samples"]
