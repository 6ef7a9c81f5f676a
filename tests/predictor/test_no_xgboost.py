"""The predictor needs only numpy: it serves the trees' array form from the bundle, compiles older bundles' .ubj
files without XGBoost, refuses what it cannot serve without it, and a real predictor process maps no XGBoost."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import httpx
import numpy as np
import orjson
import xgboost as xgb
from starlette.testclient import TestClient

from predictor.app import create_app
from predictor.serving import build_serving
from shared.bundle import ModelFiles, assemble, build_manifest, encode_model, read_current, write_bundle
from shared.features import MODEL_NAMES, FeatureSpec
from shared.model import load_bundle
from shared.timefmt import rfc3339
from tests.predictor.conftest import build_bundle, columns, dir_settings, random_rows
from tests.procs import REPO, peak_rss_kib, predictor

SPEC = FeatureSpec()
META = {"feature_flags": SPEC.as_dict(), "model_type": "xgboost", "objective_type": "quantile", "quantile": 0.9,
        "quantiles": [0.5, 0.9, 0.99], "prior": False}
QUANTILES = (0.5, 0.9, 0.99)
HEAVY = ("libxgboost", "/sklearn/", "/scipy/")


def trained_models(seed: int = 0) -> ModelFiles:
    """Per model, as the trainer publishes it: a log1p location booster, a multi-quantile booster on its margin,
    per-quantile calibration and the array form (``encode_model``)."""
    cols = columns(random_rows(1500, seed))
    rng = np.random.default_rng(seed)
    out = {}
    for name in MODEL_NAMES:
        x = SPEC.matrix(name, cols)
        y = np.log1p(x[:, 2].astype(np.float64) * 0.02 + x[:, 4] * 0.5 + rng.gamma(2.0, 3.0, len(x)))
        location = xgb.train({"objective": "reg:squarederror", "max_depth": 5, "nthread": 1}, xgb.DMatrix(x, y), 25)
        margin = np.asarray(location.inplace_predict(x), np.float32).reshape(-1, 1).repeat(3, axis=1)
        booster = xgb.train({"objective": "reg:quantileerror", "quantile_alpha": np.array(QUANTILES), "max_depth": 5,
                             "tree_method": "hist", "nthread": 1, "base_score": 0.0},
                            xgb.QuantileDMatrix(x, y, base_margin=margin), 20)
        cal = {"0.5": {"scale": 1.0, "offset": 0.0}, "0.9": {"scale": 1.1, "offset": 0.1},
               "0.99": {"scale": 1.2, "offset": 0.2}}
        out[name] = encode_model(booster, name, SPEC.columns(name), {
            "quantiles": list(QUANTILES), "primary_quantile": 0.9, "target_transform": "log1p",
            "calibration": cal["0.9"], "calibrations": cal, "training_rows": len(x)}, location)
    return out


def publish(root: Path, version: int, models: ModelFiles) -> None:
    write_bundle(root, *assemble(version, rfc3339(), models, META, None))


def test_a_trained_bundle_is_served_from_its_array_form_bit_equal_to_xgboost(bundle_root: Path) -> None:
    publish(bundle_root, 1, trained_models())
    bundle = read_current(bundle_root, None)
    assert bundle is not None and all(bundle.model_entry(n).forest_file == f"{n}-forest.json" for n in MODEL_NAMES)
    serving = build_serving(bundle, dir_settings(bundle_root), "test")
    assert dict(serving.forest_from) == {"ttft": "bundle", "tpot": "bundle"}
    reference = load_bundle(bundle, SPEC)  # XGBoost (shared.boosters), as the trainer evaluates it
    cols = columns(random_rows(700, 3))
    for name in MODEL_NAMES:
        np.testing.assert_array_equal(serving.predict(name, cols), reference.predict_all(name, cols))


def test_a_bundle_without_array_form_that_needs_xgboost_is_refused(bundle_root: Path) -> None:
    build_bundle(bundle_root, 1)
    rng = np.random.default_rng(0)
    files, models = {}, {}
    for name in MODEL_NAMES:
        x = rng.random((200, len(SPEC.columns(name)))).astype(np.float32)
        booster = xgb.train({"objective": "reg:logistic", "nthread": 1}, xgb.DMatrix(x, label=x[:, 0] > 0.5), 3)
        files[f"{name}.ubj"] = bytes(booster.save_raw("ubj"))
        models[name] = {"file": f"{name}.ubj", "features": list(SPEC.columns(name)), "quantiles": [0.9]}
    write_bundle(bundle_root, build_manifest(2, rfc3339(), models, files, META, None), files)
    with TestClient(create_app(dir_settings(bundle_root))) as c:
        reason = c.post("/reload").json()["error"]
        assert "non-identity link" in reason and "without XGBoost" in reason and "array form" in reason
        assert c.get("/status").json()["bundle"]["version"] == 1


def test_a_broken_array_form_is_refused(bundle_root: Path) -> None:
    publish(bundle_root, 1, trained_models())
    models = {name: (dict(files), entry) for name, (files, entry) in trained_models(1).items()}
    models["tpot"][0]["tpot-forest.json"] = orjson.dumps({"format": "latency-forest", "format_version": 1})
    publish(bundle_root, 2, models)  # hashed as written: the content itself is wrong
    with TestClient(create_app(dir_settings(bundle_root))) as c:
        assert "tpot: forest booster lacks depth" in c.post("/reload").json()["error"]
        assert c.get("/status").json()["bundle"]["version"] == 1


def _mapped(pid: int) -> list[str]:
    paths = {line.split()[-1] for line in Path(f"/proc/{pid}/maps").read_text().splitlines() if "/" in line}
    return sorted(p for p in paths if any(h in p for h in HEAVY))


def test_a_predictor_process_maps_no_xgboost_nor_scikit_learn(tmp_path: Path) -> None:
    """A real ``python -m predictor`` serving a trained bundle (and an older one without the array form) in the dev
    virtualenv (where XGBoost would pull in scikit-learn and scipy): none of them is mapped."""
    root = tmp_path / "bundles"
    publish(root, 1, trained_models())
    body = orjson.dumps({"requests": random_rows(100, 5)})
    with predictor(tmp_path, ["--bundle-dir", str(root)], {"PREDICT_LONG_POLL": "false"}) as (url, proc):
        for _ in range(20):
            assert httpx.post(f"{url}/predict/bulk/strict", content=body, timeout=30).status_code == 200
        build_bundle(root, 2)  # no array form: compiled from its .ubj files
        assert httpx.post(f"{url}/reload", timeout=30).json()["version"] == 2
        assert httpx.post(f"{url}/predict/bulk/strict", content=body, timeout=30).status_code == 200
        status = httpx.get(f"{url}/status").json()["bundle"]
        assert status["forest_from"] == {"ttft": "booster files", "tpot": "booster files"}
        assert _mapped(proc.pid) == [] and peak_rss_kib(proc.pid) > 0


def test_the_predictor_imports_no_xgboost() -> None:
    """Every module the predictor process imports (the app, the CLI, serving): XGBoost and what it pulls in are not
    among them (a child interpreter, so this test's own imports do not count)."""
    script = ("import sys\nimport predictor.__main__, predictor.app, predictor.serving\n"
              "print(sorted(m for m in sys.modules if m.split('.')[0] in ('xgboost', 'sklearn', 'scipy', 'pandas')))")
    out = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr
