"""The predictor's OpenAPI document, built once at start-up from the shared feature list (``shared.openapi``).

The predictor is a plain Starlette app for speed, so nothing is generated from its routes: this module is
the description, served as static bytes at ``GET /openapi.json``; ``tests/test_openapi.py`` keeps it equal
to the real routes and fuzzes the server against it.
"""

from __future__ import annotations

from typing import Any

from predictor.access import ACCESS
from shared.openapi import (
    BOOLEAN,
    INTEGER,
    JSON,
    KIND,
    NULLABLE_INTEGER,
    NULLABLE_STRING,
    NULLABLE_TIMESTAMP,
    NUMBER,
    STRING,
    TIMESTAMP,
    Schema,
    bool_map,
    common_components,
    document,
    errors,
    json_response,
    obj,
    raw_response,
    ref,
    rows_body,
    secured,
)
from shared.predictor_settings import PredictorSettings

LATENCY = {**NUMBER, "minimum": 0}
PREDICTION = obj({"ttft_ms": LATENCY, "tpot_ms": LATENCY, "predicted_at": TIMESTAMP, **KIND,
                  "last_model_load": TIMESTAMP})
COUNTS = {"total_requests": INTEGER, "successful_predictions": INTEGER, "failed_predictions": INTEGER,
          "processing_time_ms": NUMBER}
STRICT = obj({"predictions": {"type": "array", "items": ref("Prediction")}, **COUNTS})
BULK = obj({"predictions": {"type": "array", "items": {"anyOf": [ref("Prediction"), {"type": "null"}]}},
            "errors": {"type": "array", "items": obj({"index": INTEGER, "error": STRING,
                                                      "request": {"type": "object"}})}, **COUNTS})
STATUS = obj({"is_ready": BOOLEAN, **KIND, "last_model_load": NULLABLE_TIMESTAMP, "training_server_url": STRING,
              "models_exist": bool_map(["ttft_model", "tpot_model"]), "ensemble_active": BOOLEAN,
              "bundle": {"type": ["object", "null"]}, "sync": {"type": "object"},
              "refused": {"type": "array", "items": {"type": "object"}}, "refused_total": INTEGER})
RELOAD = obj({"synced": BOOLEAN, "loaded": BOOLEAN, "is_ready": BOOLEAN, **KIND, "last_load_time": NULLABLE_TIMESTAMP,
              "swapped": BOOLEAN, "version": NULLABLE_INTEGER, "error": NULLABLE_STRING})
MODEL_HEADERS: dict[str, Schema] = {"X-Model-Version": STRING,
                                    "X-Model-Prior": {"type": "string", "enum": ["true", "false"]}}


def predict_operation(summary: str, ok: Schema, body: Schema, codes: tuple[int, ...],
                      parameters: tuple[Schema, ...] = ()) -> Schema:
    """A predict endpoint; ``parameters`` are its query parameters (none at the moment)."""
    operation: Schema = {
        "summary": summary, "requestBody": {"required": True, "content": {JSON: {"schema": body}}},
        "responses": {"200": json_response("Predictions (headers name the bundle that answered)", ok, MODEL_HEADERS),
                      **errors(*codes)}}
    if parameters:
        operation["parameters"] = list(parameters)
    return operation


def _get(summary: str, schema: Schema, codes: tuple[int, ...] = ()) -> dict[str, Schema]:
    return {"get": {"summary": summary, "responses": {"200": json_response(summary, schema), **errors(*codes)}}}


def paths(settings: PredictorSettings) -> dict[str, dict[str, Schema]]:
    n = settings.max_bulk_rows
    return {
        "/predict": {"post": predict_operation("Predict one row", ref("Prediction"), ref("PredictionRequest"),
                                               (413, 422, 500, 503))},
        "/predict/bulk/strict": {"post": predict_operation(
            f"Predict 1–{n} rows, all or nothing (the EPP hot path)", STRICT,
            rows_body("requests", "PredictionRequest", 1, n), (413, 422, 500, 503))},
        "/predict/bulk": {"post": predict_operation(
            f"Predict 1–{n} rows; a failed prediction is a 200 with one error per row", BULK,
            rows_body("requests", "PredictionRequest", 1, n), (413, 422))},
        "/status": _get("Model, sync and refusal status", STATUS),
        "/reload": {"post": {"summary": "Sync with the bundle source now (no body)",
                             "responses": {"200": json_response("Sync result", RELOAD), **errors(413)}}},
        "/healthz": _get("Liveness", obj({"status": STRING, "service": STRING})),
        "/readyz": _get("Readiness (a model is loaded)", obj({"status": STRING, **KIND}), (503,)),
        "/": _get("Service description", obj({"message": STRING, **KIND, "is_ready": BOOLEAN,
                                              "sync_interval": INTEGER, "training_server": STRING})),
        "/metrics": {"get": {"summary": "Prometheus metrics",
                             "responses": {"200": raw_response("Exposition format", "text/plain")}}},
        "/openapi.json": _get("This document", {"type": "object"}),
    }


def build(settings: PredictorSettings) -> dict[str, Any]:
    return document("latency-predictor", "llm-d-compatible prediction server (contract §3).",
                    secured(ACCESS, paths(settings)), {**common_components(settings.bounds), "Prediction": PREDICTION})
