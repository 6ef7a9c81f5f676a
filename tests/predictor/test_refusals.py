"""Bad bundles are refused, the old model keeps serving, and the refusal is visible."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import numpy as np
import orjson
import pytest
from starlette.testclient import TestClient

from predictor.app import create_app
from predictor.hotpath import HotPath
from predictor.serving import Serving, build_serving
from shared.bundle import build_manifest, read_current, set_current, version_dir, write_bundle
from shared.columns import Bounds
from shared.errors import LatencyError
from shared.features import FeatureSpec
from shared.predictor_settings import PredictorSettings
from shared.timefmt import rfc3339
from tests.predictor.conftest import build_bundle, dir_settings

ROW = {"kv_cache_percentage": 0.5, "input_token_length": 900, "num_request_waiting": 1, "num_request_running": 2,
       "num_tokens_generated": 1, "prefix_cache_score": 0.1}


def _flip_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))


def tampered(root: Path, v: int) -> None:
    _flip_byte(build_bundle(root, v).path / "ttft.ubj")


def truncated(root: Path, v: int) -> None:
    path = build_bundle(root, v).path / "tpot.ubj"
    path.write_bytes(path.read_bytes()[:100])


def file_missing(root: Path, v: int) -> None:
    (build_bundle(root, v).path / "tpot.ubj").unlink()


def wrong_flags(root: Path, v: int) -> None:
    build_bundle(root, v, FeatureSpec(token_in_flight=False))


def wrong_spec_version(root: Path, v: int) -> None:
    build_bundle(root, v, manifest_patch={"feature_spec_version": 99})


def wrong_features(root: Path, v: int) -> None:
    built = build_bundle(root, v)
    shutil.rmtree(built.path)
    models = {k: dict(e) for k, e in built.manifest["models"].items()}
    models["ttft"]["features"] = list(reversed(models["ttft"]["features"]))
    files = {f"{n}.ubj": bytes(built.boosters[n].save_raw("ubj")) for n in ("ttft", "tpot")}
    meta = {k: built.manifest[k] for k in ("feature_flags", "model_type", "objective_type", "quantile", "prior")}
    write_bundle(root, build_manifest(v, rfc3339(), models, files, meta, None), files)


def not_xgboost(root: Path, v: int) -> None:
    files = {"ttft.ubj": b"{not a model", "tpot.ubj": b"{not a model"}
    spec = FeatureSpec()
    models = {n: {"file": f"{n}.ubj", "features": list(spec.columns(n))} for n in ("ttft", "tpot")}
    write_bundle(root, build_manifest(v, rfc3339(), models, files, {"feature_flags": spec.as_dict()}, None), files)


def model_missing(root: Path, v: int) -> None:
    built = build_bundle(root, v)
    shutil.rmtree(built.path)
    files = {"ttft.ubj": bytes(built.boosters["ttft"].save_raw("ubj"))}
    models = {"ttft": built.manifest["models"]["ttft"]}
    write_bundle(root, build_manifest(v, rfc3339(), models, files, {"feature_flags": built.spec.as_dict()}, None),
                 files)


def not_a_bundle(root: Path, v: int) -> None:
    version_dir(root, v).mkdir()
    (version_dir(root, v) / "manifest.json").write_bytes(b'{"format": "pickle"}')
    set_current(root, v)


BAD: dict[str, Callable[[Path, int], None]] = {
    "tampered": tampered, "truncated": truncated, "file_missing": file_missing, "wrong_flags": wrong_flags,
    "wrong_spec_version": wrong_spec_version, "wrong_features": wrong_features, "not_xgboost": not_xgboost,
    "model_missing": model_missing, "not_a_bundle": not_a_bundle,
}


@pytest.mark.parametrize("kind", list(BAD))
def test_bad_bundle_refused_old_model_keeps_serving(bundle_root: Path, kind: str) -> None:
    build_bundle(bundle_root, 1)
    with TestClient(create_app(dir_settings(bundle_root))) as c:
        before = c.post("/predict", json=ROW)
        BAD[kind](bundle_root, 2)
        reload = c.post("/reload").json()
        assert reload["swapped"] is False and reload["loaded"] is True and reload["error"]
        after = c.post("/predict", json=ROW)
        assert after.status_code == 200 and after.headers["x-model-version"] == "1"
        assert after.json()["ttft_ms"] == before.json()["ttft_ms"]
        status = c.get("/status").json()
        assert status["bundle"]["version"] == 1 and status["is_ready"] is True
        assert status["refused_total"] == 1 and status["refused"][0]["tag"] == '"v2"'
        assert status["refused"][0]["reason"] and status["refused"][0]["at"].endswith("+00:00")
        c.post("/reload")  # a refused tag is remembered by the periodic path, but /reload retries it
        assert "predictor_bundles_refused_total 2.0" in c.get("/metrics").text
        build_bundle(bundle_root, 3)
        assert c.post("/reload").json()["swapped"] is True
        assert c.post("/predict", json=ROW).headers["x-model-version"] == "3"


def test_refused_once_by_the_sync_loop(bundle_root: Path) -> None:
    build_bundle(bundle_root, 1)
    with TestClient(create_app(dir_settings(bundle_root))) as c:
        tampered(bundle_root, 2)
        state = c.app.state.predictor  # type: ignore[attr-defined]
        for _ in range(3):
            c.portal.call(state.syncer.sync_once)  # type: ignore[union-attr]
        assert c.get("/status").json()["refused_total"] == 1


def test_hmac(bundle_root: Path) -> None:
    build_bundle(bundle_root, 1, key=b"right-key")
    with TestClient(create_app(dir_settings(bundle_root, bundle_hmac_key="right-key"))) as c:
        assert c.get("/status").json()["bundle"]["version"] == 1
        build_bundle(bundle_root, 2, key=b"wrong-key")
        assert "HMAC" in c.post("/reload").json()["error"]
        build_bundle(bundle_root, 3)  # unsigned
        assert "HMAC" in c.post("/reload").json()["error"]
        build_bundle(bundle_root, 4, key=b"right-key")
        assert c.post("/reload").json()["version"] == 4
        assert c.get("/status").json()["refused_total"] == 2


def test_bad_first_bundle_means_not_ready(bundle_root: Path) -> None:
    tampered(bundle_root, 1)
    with TestClient(create_app(dir_settings(bundle_root))) as c:
        assert c.get("/readyz").status_code == 503
        assert c.get("/status").json()["refused_total"] == 1


def test_prior_bundle_served_and_reported(bundle_root: Path) -> None:
    build_bundle(bundle_root, 1, prior=True)
    with TestClient(create_app(dir_settings(bundle_root))) as c:
        r = c.post("/predict/bulk/strict", json={"requests": [ROW]})
        assert r.status_code == 200 and r.headers["x-model-prior"] == "true"
        assert c.get("/status").json()["bundle"]["prior"] is True
        assert c.get("/readyz").status_code == 200
        assert "predictor_bundle_prior 1.0" in c.get("/metrics").text
        build_bundle(bundle_root, 2)
        c.post("/reload")
        assert c.get("/status").json()["bundle"]["prior"] is False


def _broken(serving: Serving) -> Serving:
    def nan(matrix: np.ndarray) -> np.ndarray:
        return np.full((len(matrix), 1), np.nan, dtype=np.float32)
    models = {name: replace(model, evaluator=nan) for name, model in serving.loaded.models.items()}
    return replace(serving, loaded=replace(serving.loaded, models=models))


def test_non_finite_output_is_a_500_never_nan(bundle_root: Path) -> None:
    bundle = read_current(build_bundle(bundle_root, 1).path.parent, None)
    assert bundle is not None
    serving = _broken(build_serving(bundle, PredictorSettings(), "test"))
    hot = HotPath(Bounds(), 10_000)
    body = b'{"requests":[' + orjson.dumps(ROW) + b"]}"
    with pytest.raises(LatencyError) as err:
        hot.strict(body, serving)
    assert (err.value.status, err.value.detail()) == (500, "Internal error during batch prediction")
    with pytest.raises(LatencyError) as err:
        hot.single(orjson.dumps(ROW), serving)
    assert err.value.detail() == "Internal error during prediction"
    answer = hot.bulk(body, serving)
    assert b"Batch prediction error: 500: Internal error during batch prediction" in answer.body
    assert b"NaN" not in answer.body
