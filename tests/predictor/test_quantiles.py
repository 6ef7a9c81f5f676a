"""The pinned ``?quantiles=`` extension on a real trainer-fitted multi-quantile bundle (p50/p90/p99)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest
from starlette.testclient import TestClient

from predictor.app import create_app
from shared.bundle import assemble, write_bundle
from shared.features import MODEL_NAMES, FeatureSpec
from tests.predictor.conftest import dir_settings, random_rows
from tests.trainer.test_fit_bundle import window_rows
from trainer.cycle import bundle_meta
from trainer.fit import FitParams
from trainer.fitted import fit_model

PATHS = ("/predict", "/predict/bulk", "/predict/bulk/strict")


@pytest.fixture(scope="module")
def bundle_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    spec, params = FeatureSpec(), FitParams(rounds=40, nthread=1, quantile_rows=2000)
    train, hold = window_rows(3000, 1), window_rows(800, 2)
    models = {name: fit_model(spec, name, train, hold, params) for name in MODEL_NAMES}
    manifest, files = assemble(1, "2026-12-01T00:00:00+00:00", {n: (m.files, m.entry) for n, m in models.items()},
                               bundle_meta(spec, params, prior=False), None)
    root = tmp_path_factory.mktemp("bundles")
    write_bundle(root, manifest, files)
    return root


def _ask(c: TestClient, path: str, rows: list[dict[str, Any]], query: str) -> tuple[int, Any]:
    body = rows[0] if path == "/predict" else {"requests": rows}
    r = c.post(path + query, content=orjson.dumps(body))
    data = r.json()
    if r.status_code == 200:
        data = [data] if path == "/predict" else data["predictions"]
    return r.status_code, data


def test_every_endpoint_answers_the_served_quantiles(bundle_dir: Path) -> None:
    rows = random_rows(50, seed=3)
    with TestClient(create_app(dir_settings(bundle_dir))) as c:
        for path in PATHS:
            _, plain = _ask(c, path, rows, "")
            status, preds = _ask(c, path, rows, "?quantiles=0.5,0.9,0.99")
            assert status == 200 and "ttft_quantiles_ms" not in plain[0], path
            for p, q in zip(plain, preds, strict=False):
                for name in ("ttft", "tpot"):
                    table = q[f"{name}_quantiles_ms"]
                    assert list(table) == ["0.5", "0.9", "0.99"], path
                    assert table["0.9"] == q[f"{name}_ms"] == p[f"{name}_ms"], path  # the contract field unchanged
                    assert 0 <= table["0.5"] <= table["0.9"] <= table["0.99"], (path, table)
            status, subset = _ask(c, path, rows, "?quantiles=0.99")
            assert status == 200 and all(list(s["ttft_quantiles_ms"]) == ["0.99"] for s in subset)
            assert [s["tpot_quantiles_ms"]["0.99"] for s in subset] == [
                q["tpot_quantiles_ms"]["0.99"] for q in preds[:len(subset)]]


def test_quantiles_spread_like_the_data(bundle_dir: Path) -> None:
    """Rows drawn like the training data: p99 well above p50 (the bundle is not three copies of p90)."""
    rows = random_rows(200, seed=4)
    with TestClient(create_app(dir_settings(bundle_dir))) as c:
        _, preds = _ask(c, "/predict/bulk/strict", rows, "?quantiles=0.5,0.99")
    ratio = np.array([p["ttft_quantiles_ms"]["0.99"] / p["ttft_quantiles_ms"]["0.5"] for p in preds])
    assert float(np.median(ratio)) > 1.2


@pytest.mark.parametrize("query", ["?quantiles=0.95", "?quantiles=0.5,0.75", "?quantiles=abc", "?quantiles=",
                                   "?quantiles=0.5,,0.9", "?quantiles=1.5", "?quantiles=nan"])
def test_unserved_or_malformed_quantiles_are_422_naming_the_parameter(bundle_dir: Path, query: str) -> None:
    rows = random_rows(3, seed=5)
    with TestClient(create_app(dir_settings(bundle_dir))) as c:
        for path in PATHS:
            status, body = _ask(c, path, rows, query)
            assert status == 422, (path, query, body)
            assert any(d["loc"] == ["query", "quantiles"] for d in body["detail"]), body
