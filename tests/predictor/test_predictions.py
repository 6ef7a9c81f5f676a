"""Served predictions equal XGBoost's own (inplace_predict on spec.matrix, then calibration)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import orjson
import pytest
from starlette.testclient import TestClient

from predictor.app import create_app
from shared.features import FeatureSpec
from tests.predictor.conftest import ALL_SPECS, build_bundle, dir_settings, random_rows


@pytest.mark.parametrize("spec", ALL_SPECS, ids=lambda s: f"tif={s.token_in_flight},enc={s.encoder}")
def test_every_endpoint_equals_xgboost(tmp_path: Path, spec: FeatureSpec) -> None:
    """The numpy forest (here compiled from the .ubj files: the bundle has no array form) serves XGBoost's numbers."""
    built = build_bundle(tmp_path, 3, spec, trees=25, depth=5, calibration=(1.1, -2.0))
    rows = random_rows(400, seed=11)
    expected = built.expected(rows)
    settings = dir_settings(tmp_path, enable_token_in_flight_features=spec.token_in_flight,
                            enable_encoder_features=spec.encoder)
    with TestClient(create_app(settings)) as c:
        status = c.get("/status").json()["bundle"]
        assert status["evaluator"] == {"ttft": "numpy-forest", "tpot": "numpy-forest"}
        assert status["feature_flags"] == spec.as_dict()
        strict = c.post("/predict/bulk/strict", content=orjson.dumps({"requests": rows})).json()["predictions"]
        bulk = c.post("/predict/bulk", content=orjson.dumps({"requests": rows})).json()["predictions"]
        single = [c.post("/predict", json=row).json() for row in rows[:40]]
        small = c.post("/predict/bulk/strict", json={"requests": rows[:30]}).json()["predictions"]
    for name in ("ttft", "tpot"):
        got = np.array([p[f"{name}_ms"] for p in strict])
        np.testing.assert_allclose(got, expected[name], rtol=1e-6, atol=1e-6)
        np.testing.assert_array_equal(got, expected[name])  # in fact bit-equal
        assert [p[f"{name}_ms"] for p in bulk] == got.tolist()
        assert [p[f"{name}_ms"] for p in single] == got[:40].tolist()
        assert [p[f"{name}_ms"] for p in small] == got[:30].tolist()
        assert (got >= 0).all()


def test_tokens_in_flight_used_on_every_endpoint(tmp_path: Path) -> None:
    """Upstream ignores tokens in flight on /predict and /predict/bulk; we must not."""
    build_bundle(tmp_path, 1, trees=30, depth=4)
    low = {"kv_cache_percentage": 0.3, "input_token_length": 3000, "num_request_waiting": 0,
           "num_request_running": 4, "num_tokens_generated": 1, "prefix_cache_score": 0.0}
    high = {**low, "prefill_tokens_in_flight": 19000, "decode_tokens_in_flight": 4500}
    with TestClient(create_app(dir_settings(tmp_path))) as c:
        for path, wrap in (("/predict", lambda r: r), ("/predict/bulk", lambda r: {"requests": [r]}),
                           ("/predict/bulk/strict", lambda r: {"requests": [r]})):
            a, b = c.post(path, json=wrap(low)).json(), c.post(path, json=wrap(high)).json()
            a, b = (a if path == "/predict" else a["predictions"][0]), (b if path == "/predict" else
                                                                        b["predictions"][0])
            assert b["ttft_ms"] > a["ttft_ms"], path


def test_negative_outputs_clipped_to_zero(tmp_path: Path) -> None:
    build_bundle(tmp_path, 1, calibration=(1.0, -1e6))
    with TestClient(create_app(dir_settings(tmp_path))) as c:
        rows = random_rows(20, seed=2)
        preds = c.post("/predict/bulk/strict", json={"requests": rows}).json()["predictions"]
    assert all(p["ttft_ms"] == 0.0 and p["tpot_ms"] == 0.0 for p in preds)
