"""The naive baseline for bench.predictor.service: the upstream style of serving, in one small FastAPI app.

Per-row pydantic request models, a pydantic response model per prediction, features built
row by row into Python lists, an ``xgb.DMatrix`` per model per call and ``Booster.predict``
(pandas is not installed; upstream builds a DataFrame at this point). Run:
``python -m bench.predictor.baseline --bundle-dir DIR --port P``.
"""

from __future__ import annotations

import argparse
import time
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import uvicorn
import xgboost as xgb
from fastapi import FastAPI
from pydantic import BaseModel, Field

from shared.bundle import read_current
from shared.features import MODEL_NAMES, FeatureSpec, pod_class_code, pod_type_code


class PredictionRequest(BaseModel):
    kv_cache_percentage: float = Field(ge=0, le=1)
    input_token_length: int = Field(ge=0)
    num_request_waiting: int = Field(ge=0)
    num_request_running: int = Field(ge=0)
    num_tokens_generated: int = Field(ge=0)
    prefix_cache_score: float = Field(ge=0, le=1)
    pod_type: str | None = ""
    prefill_tokens_in_flight: int = Field(default=0, ge=0)
    decode_tokens_in_flight: int = Field(default=0, ge=0)
    encoder_input_size: int = Field(default=0, ge=0)
    encoder_matched_size: int = Field(default=0, ge=0)
    pod_class: str | None = ""


class BulkRequest(BaseModel):
    requests: list[PredictionRequest] = Field(min_length=1, max_length=10_000)


class PredictionResponse(BaseModel):
    ttft_ms: float
    tpot_ms: float
    predicted_at: datetime
    model_type: str
    objective_type: str
    quantile: float
    last_model_load: datetime | None


class BulkResponse(BaseModel):
    predictions: list[PredictionResponse]
    total_requests: int
    successful_predictions: int
    failed_predictions: int
    processing_time_ms: float


def _features(row: PredictionRequest, spec: FeatureSpec, name: str) -> list[float]:
    values = row.model_dump()
    values["is_queued"] = 1.0 if row.num_request_waiting > 0 else 0.0
    values["effective_input_tokens"] = (1 - row.prefix_cache_score) * row.input_token_length
    values["prefill_score_bucket"] = min(int(row.prefix_cache_score * 4), 3)
    values["pod_type_cat"] = pod_type_code(row.pod_type)
    values["pod_class"] = pod_class_code(row.pod_class)
    return [float(values[c]) for c in spec.columns(name)]


def build_app(bundle_dir: Path) -> FastAPI:
    bundle = read_current(bundle_dir, None)
    assert bundle is not None
    spec = FeatureSpec()
    boosters = {}
    for name in MODEL_NAMES:
        booster = xgb.Booster()
        booster.load_model(bytearray(bundle.model_bytes(name)))
        boosters[name] = booster
    loaded_at = datetime.now(UTC)
    app = FastAPI()

    def predict_rows(rows: list[PredictionRequest]) -> list[PredictionResponse]:
        out = {}
        for name in MODEL_NAMES:
            matrix = xgb.DMatrix(np.array([_features(r, spec, name) for r in rows], dtype=np.float32))
            out[name] = np.maximum(boosters[name].predict(matrix), 0.0)
        now = datetime.now(UTC)
        return [PredictionResponse(ttft_ms=float(a), tpot_ms=float(b), predicted_at=now, model_type="xgboost",
                                   objective_type="quantile", quantile=0.9, last_model_load=loaded_at)
                for a, b in zip(out["ttft"], out["tpot"], strict=True)]

    @app.post("/predict", response_model=PredictionResponse)
    def predict(request: PredictionRequest) -> PredictionResponse:
        return predict_rows([request])[0]

    @app.post("/predict/bulk/strict", response_model=BulkResponse)
    def strict(request: BulkRequest) -> BulkResponse:
        start = time.perf_counter()
        predictions = predict_rows(request.requests)
        n = len(predictions)
        return BulkResponse(predictions=predictions, total_requests=n, successful_predictions=n,
                            failed_predictions=0, processing_time_ms=(time.perf_counter() - start) * 1e3)

    @app.get("/readyz")
    def readyz() -> dict[str, str]:
        return {"status": "ready"}

    return app


def main() -> None:
    parser = argparse.ArgumentParser(prog="bench.predictor.baseline", description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--bundle-dir", required=True)
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    uvicorn.run(build_app(Path(args.bundle_dir)), host="127.0.0.1", port=args.port, access_log=False,
                log_level="warning")


if __name__ == "__main__":
    main()
