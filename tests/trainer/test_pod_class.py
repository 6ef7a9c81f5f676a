"""Feature spec 2 (the ``pod_class`` extension): old clients, learning the class, and a data dir of spec 1.

The upgrade test builds what a spec-1 trainer left on disk — log records with the thirteen named columns
of spec 1 (no ``pod_class``), one format-1 record, and a live bundle whose manifest says
``feature_spec_version: 1`` with 13/9 model columns — and starts a real trainer process on it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import xgboost as xgb
from fastapi.testclient import TestClient

from shared.bundle import build_manifest, encode_model, write_bundle
from shared.columns import to_columns
from shared.features import MODEL_NAMES, TARGET_OF, FeatureSpec
from shared.timefmt import rfc3339
from tests.procs import free_port, wait_ready
from tests.trainer.conftest import mixed_rows, service_of
from tests.waiting import wait_for
from trainer.store import STORED_FIELDS, Layout, LogLimits, RowsRecord, SampleLog, record
from trainer.store.record import columns_to_matrix

REPO = Path(__file__).resolve().parents[2]
SPEC_1_FIELDS = tuple(n for n in STORED_FIELDS if n != "pod_class")
"""The stored columns of feature spec 1 (the eleven llm-d fields + two targets)."""


def _with_class(rows: list[dict[str, Any]], pod_class: str, factor: float) -> list[dict[str, Any]]:
    out = []
    for row in rows:
        row = {**row, "pod_class": pod_class}
        row["actual_ttft_ms"] *= factor
        row["actual_tpot_ms"] *= factor
        out.append(row)
    return out


def test_old_client_rows_and_class_rows_train_one_model(client_factory: Callable[..., TestClient]) -> None:
    """Rows without ``pod_class`` (every llm-d EPP) are accepted next to rows with it; the model learns a
    class whose pods are 3× slower, for TTFT and TPOT."""
    client = client_factory(min_samples_for_retrain=50, xgb_n_estimators=40)
    plain_rows, class_rows = mixed_rows(1200, seed=1), _with_class(mixed_rows(1200, seed=2), "h100-slow", 3.0)
    interleaved = [row for pair in zip(plain_rows, class_rows, strict=True) for row in pair]  # the holdout mixes both
    for part in (interleaved[:1200], interleaved[1200:]):
        sent = client.post("/add_training_data_bulk", json={"entries": part})
        assert sent.status_code == 202, sent.text
    assert service_of(client).loop.run_cycle() == 2
    probe = {"kv_cache_percentage": 0.3, "input_token_length": 2000, "num_request_waiting": 1,
             "num_request_running": 20, "num_tokens_generated": 0, "prefix_cache_score": 0.0}
    plain = client.post("/predict", json=probe).json()
    slow = client.post("/predict", json={**probe, "pod_class": "h100-slow"}).json()
    assert slow["ttft_ms"] > 1.8 * plain["ttft_ms"], (plain, slow)
    assert slow["tpot_ms"] > 1.8 * plain["tpot_ms"], (plain, slow)
    manifest = client.get("/bundle/manifest").json()
    assert manifest["feature_spec_version"] == 2
    assert all(manifest["models"][m]["features"][-1] == "pod_class" for m in MODEL_NAMES)


def test_bad_pod_class_names_the_field(client: TestClient) -> None:
    row = {**mixed_rows(1)[0], "pod_class": 17}
    r = client.post("/add_training_data_bulk", json={"entries": [row]})
    assert r.status_code == 422
    assert r.json()["detail"][0]["loc"] == ["body", "entries", 0, "pod_class"]


def _spec_1_bundle(root: Path, cols: dict[str, np.ndarray]) -> None:
    """A live bundle as a spec-1 trainer published it: 13 TTFT / 9 TPOT columns, feature_spec_version 1."""
    spec = FeatureSpec()
    models = {}
    for name in MODEL_NAMES:
        features = [c for c in spec.columns(name) if c != "pod_class"]
        x = spec.matrix(name, cols)[:, : len(features)]
        booster = xgb.train({"objective": "reg:quantileerror", "quantile_alpha": 0.9, "max_depth": 3, "nthread": 1},
                            xgb.DMatrix(x, label=cols[TARGET_OF[name]], feature_names=features), 5)
        models[name] = encode_model(booster, name, features, {"quantiles": [0.9], "training_rows": len(x)})
    files = {file: data for parts, _ in models.values() for file, data in parts.items()}
    meta = {"feature_flags": spec.as_dict(), "model_type": "xgboost", "objective_type": "quantile",
            "quantile": 0.9, "prior": False}
    manifest = build_manifest(7, rfc3339(), {n: e for n, (_, e) in models.items()}, files, meta, None)
    manifest["feature_spec_version"] = 1
    write_bundle(root, manifest, files)


def _format_1_record(rows: np.ndarray) -> bytes:
    """A rows record of the first log format (no column names: ``LEGACY_V1_FIELDS``), first_seq 0."""
    payload = record.ROWS_HEAD.pack(0, 1.0, len(rows), rows.shape[1]) + np.ascontiguousarray(
        rows.T, dtype="<f8").tobytes()
    return record.HEADER.pack(record.MAGIC, record.KIND_ROWS, len(payload), zlib.crc32(payload)) + payload


def _spec_1_data_dir(data_dir: Path, n: int) -> None:
    """A third of the rows in a format-1 record, the rest in two named spec-1 records, and a spec-1 bundle."""
    assert record.LEGACY_V1_FIELDS == SPEC_1_FIELDS
    cols = to_columns(mixed_rows(n, seed=5), ["entries"], targets=True)
    matrix = columns_to_matrix(cols)[:, [STORED_FIELDS.index(name) for name in SPEC_1_FIELDS]]
    third = n // 3
    (data_dir / "log").mkdir(parents=True)
    (data_dir / "log" / "seg-0000000000000000.log").write_bytes(_format_1_record(matrix[:third]))
    old_log = SampleLog(data_dir / "log", LogLimits(), Layout(fields=SPEC_1_FIELDS))
    assert sum(r.n_rows for r in old_log.replay() if isinstance(r, RowsRecord)) == third
    old_log.append_rows(matrix[third: 2 * third])
    old_log.append_rows(matrix[2 * third:])
    old_log.close()
    _spec_1_bundle(data_dir / "bundles", cols)


def test_spec_1_data_dir_keeps_every_row_and_refuses_the_old_bundle(tmp_path: Path) -> None:
    n = 600
    _spec_1_data_dir(tmp_path, n)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {**os.environ, "LATENCY_RETRAINING_INTERVAL_SEC": "1", "LATENCY_MIN_SAMPLES_FOR_RETRAIN": "100",
           "LATENCY_XGB_N_ESTIMATORS": "20", "LATENCY_TRAIN_THREADS": "1", "LATENCY_LOG_LEVEL": "INFO"}
    log_path = tmp_path / "trainer.log"
    with open(log_path, "wb") as log_file:
        proc = subprocess.Popen([sys.executable, "-m", "trainer", "--host", "127.0.0.1", "--port", str(port),
                                 "--data-dir", str(tmp_path)], cwd=REPO, env=env, stdout=log_file,
                                stderr=subprocess.STDOUT)
        try:
            wait_ready(url, proc, log_path)
            with httpx.Client(base_url=url, timeout=30) as c:
                status = c.get("/data/status").json()
                assert status["durable"]["rows"] == n, status
                live = c.get("/bundle/manifest")
                first = live.json()
                assert first["version"] > 7 and first["feature_spec_version"] == 2
                trained = wait_for(lambda: _trained(c), timeout=120, interval=0.3, what="a model trained on old rows")
                assert trained["models"]["ttft"]["training_rows"] + trained["models"]["ttft"]["holdout_rows"] >= n // 2
        finally:
            proc.terminate()
            proc.wait(20)
    text = log_path.read_text()
    assert "on disk rejected" in text and "feature_spec_version 1" in text, text
    assert "published the prior bundle" in text, text
    assert "rows stored with another column layout; mapped (defaults for ['pod_class']" in text, text


def _trained(c: httpx.Client) -> dict[str, Any] | None:
    manifest: dict[str, Any] = c.get("/bundle/manifest").json()
    return manifest if manifest.get("prior") is False else None
