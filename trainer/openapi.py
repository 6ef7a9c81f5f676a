"""The trainer's OpenAPI document: every route with its request body, 2xx body, errors and security.

Routes read their bodies themselves (fast, contract-shaped 422s), so FastAPI cannot see the bodies;
this module describes them from the shared feature list (``shared.openapi``) and replaces FastAPI's
generated document. ``tests/test_openapi.py`` keeps it equal to the real routes and fuzzes both.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI

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
    row_schema,
    rows_body,
    secured,
)
from shared.trainer_settings import TrainerSettings
from trainer.access import ACCESS
from trainer.idempotency import HEADER, MAX_KEY_CHARS
from trainer.pull import MANIFEST_SHA_HEADER, MAX_WAIT_S

COUNTS = obj({"ttft_samples": INTEGER, "tpot_samples": INTEGER, "total_samples": INTEGER})
FLUSH_REQUEST = {"type": "object", "additionalProperties": True, "properties": {
    "flush_training_data": {**BOOLEAN, "default": True}, "flush_test_data": {**BOOLEAN, "default": True},
    "flush_metrics": {**BOOLEAN, "default": True}, "reason": {**NULLABLE_STRING, "default": None}}}
FLUSHED = obj({"success": BOOLEAN, "flushed_at": TIMESTAMP, "reason": NULLABLE_STRING,
               **{f"{m}_{k}_samples_flushed": INTEGER for k in ("training", "test") for m in ("ttft", "tpot")},
               "metrics_cleared": BOOLEAN, "message": STRING})
BOUNDS = {"type": "array", "items": NUMBER, "minItems": 2, "maxItems": 2}
PREDICTION = obj({**{f"{m}_{k}": s for m in ("ttft", "tpot") for k, s in
                     (("ms", NUMBER), ("uncertainty", NUMBER), ("prediction_bounds", BOUNDS))},
                  "predicted_at": TIMESTAMP, **KIND, "bundle_version": INTEGER})
ACCEPTED = obj({"message": STRING}, {"accepted": INTEGER, "rejected": {"type": "array", "items": obj(
    {"index": INTEGER, "errors": {"type": "array", "items": ref("ValidationError")}})}})
ARTIFACT = obj({"exists": BOOLEAN, "size_bytes": INTEGER, "last_modified": NULLABLE_TIMESTAMP})
MODEL_INFO = obj({"model_name": STRING, "path": STRING, "size_bytes": INTEGER, "last_modified": TIMESTAMP,
                  "exists": BOOLEAN, "model_type": KIND["model_type"], "quantile": KIND["quantile"],
                  "bundle_version": NULLABLE_INTEGER, "format": STRING})
DATA_STATUS = obj({"training_data": COUNTS, "test_data": COUNTS, "ensemble": {"type": "object"},
                   "metrics": {"type": "object", "additionalProperties": INTEGER},
                   "bucket_distribution": {"type": "object", "additionalProperties": INTEGER},
                   "model_ready": BOOLEAN, "last_retrain": NULLABLE_STRING,
                   "durable": obj({"rows": INTEGER, "bytes": INTEGER})})
DOWNLOAD_INFO = obj({**KIND, "available_endpoints": {"type": "object"},
                     "model_status": bool_map(["ttft_model_ready", "tpot_model_ready"]),
                     "evaluation_info": {"type": "object", "additionalProperties": STRING},
                     "bundle": obj({"manifest": STRING, "version": NULLABLE_INTEGER,
                                    "base_score": {"type": "object"}})})
MODELS_LIST = obj({"models": {"type": "object", "additionalProperties": ARTIFACT}, "model_type": KIND["model_type"],
                   "quantile": KIND["quantile"], "server_time": TIMESTAMP,
                   "evaluation_metrics": {"type": "object", "additionalProperties": STRING}})
MODEL_NAME = {"name": "name", "in": "path", "required": True, "schema": STRING,
              "description": "ttft or tpot (the contract's other names answer 404)"}
OCTETS = "application/octet-stream"


def _op(summary: str, responses: dict[str, Schema], *, body: Schema | None = None, body_required: bool = True,
        parameters: list[Schema] | None = None, codes: tuple[int, ...] = ()) -> Schema:
    operation: Schema = {"summary": summary, "responses": {**responses, **errors(*codes)}}
    if body is not None:
        operation["requestBody"] = {"required": body_required, "content": {JSON: {"schema": body}}}
    if parameters:
        operation["parameters"] = parameters
    return operation


def _ingest(settings: TrainerSettings) -> Schema:
    partial = {"name": "partial", "in": "query", "required": False, "schema": {**BOOLEAN, "default": False},
               "description": "Store the valid rows and list the rejected ones (default: all-or-nothing 422)."}
    key = {"name": HEADER, "in": "header", "required": False,
           "schema": {"type": "string", "pattern": f"^[!-~]{{1,{MAX_KEY_CHARS}}}$"},
           "description": "A retry with the same key and body is acknowledged again (same 202 body, header "
                          "Idempotent-Replayed: true) and not stored twice; the same key with another body is a 422."}
    return _op("Add training rows (durable before the 202)",
               {"202": json_response("Accepted (`accepted`/`rejected` only with ?partial=true)", ACCEPTED)},
               body=rows_body("entries", "TrainingEntry", 0, settings.max_ingest_rows), parameters=[partial, key],
               codes=(413, 422, 500))


def _pull() -> dict[str, Schema]:
    wait = {"name": "wait_s", "in": "query", "required": False,
            "schema": {**NUMBER, "minimum": 0, "maximum": MAX_WAIT_S, "default": 0},
            "description": "With If-None-Match equal to the live ETag: hold up to this long for a new version."}
    etag = {"name": "If-None-Match", "in": "header", "required": False, "schema": STRING}
    headers = {"ETag": STRING, "X-Bundle-Version": STRING, MANIFEST_SHA_HEADER: STRING}
    manifest = _op("Live bundle manifest (pull API)",
                   {"200": json_response("manifest.json bytes", {"type": "object"}, headers),
                    "304": {"description": "Not modified (the If-None-Match version is still live)"}},
                   parameters=[wait, etag], codes=(422, 503))
    path = [{"name": "version", "in": "path", "required": True, "schema": INTEGER},
            {"name": "filename", "in": "path", "required": True, "schema": STRING}]
    file = _op("A file of a kept bundle version", {"200": raw_response("File bytes", OCTETS)}, parameters=path,
               codes=(404, 422))
    return {"/bundle/manifest": {"get": manifest}, "/bundle/v/{version}/{filename}": {"get": file}}


def _ui() -> dict[str, Schema]:
    recent = {"name": "recent", "in": "query", "required": False,
              "schema": {**INTEGER, "minimum": 0, "maximum": 5000, "default": 300},
              "description": "Newest window rows predicted by the live model (actual vs predicted)."}
    refresh = {"name": "refresh", "in": "query", "required": False,
               "schema": {**INTEGER, "minimum": 0, "maximum": 3600, "default": 5},
               "description": "Seconds between automatic reloads of the page (0: none)."}
    return {"/ui": {"get": _op("Status page (HTML, server-side SVG plots)", {"200": raw_response(
                "HTML page", "text/html")}, parameters=[refresh, recent], codes=(422,))},
            "/ui/data": {"get": _op("The status page's data", _ok({"type": "object"}, "Status page data"),
                                    parameters=[recent], codes=(422,))}}


def _ok(schema: Schema, what: str) -> dict[str, Schema]:
    return {"200": json_response(what, schema)}


def paths(settings: TrainerSettings) -> dict[str, dict[str, Schema]]:
    obj_200 = _ok  # a 200 JSON answer
    return {
        "/add_training_data_bulk": {"post": _ingest(settings)},
        "/flush": {"post": _op("Flush training/test data and metric history", obj_200(FLUSHED, "Flushed"),
                               body=FLUSH_REQUEST, body_required=False, codes=(413, 422, 500))},
        "/predict": {"post": _op("Predict one row in-process", obj_200(PREDICTION, "Prediction"),
                                 body=ref("PredictionRequest"), codes=(413, 422, 503))},
        "/healthz": {"get": _op("Liveness", obj_200(obj({"status": STRING}), "Alive"))},
        "/readyz": {"get": _op("Readiness (a live bundle)", obj_200(
            obj({"status": STRING, "bundle_version": INTEGER, "retrain": {"type": "object"}}), "Ready"),
            codes=(503,))},
        "/": {"get": _op("Service description", obj_200(obj({"message": STRING, **KIND, "description": STRING}),
                                                         "Running"))},
        "/data/status": {"get": _op("Training window and durable log", obj_200(DATA_STATUS, "Status"))},
        "/debug/prefix_distribution": {"get": _op("TTFT statistics per prefix-score range",
                                                  obj_200({"type": "object"}, "Distribution"))},
        "/model/download/info": {"get": _op("Model kind, readiness and bundle", obj_200(DOWNLOAD_INFO, "Info"))},
        "/models/list": {"get": _op("Artifacts of the live bundle", obj_200(MODELS_LIST, "List"))},
        "/model/export": {"get": _op("The live bundle as a seed tar.gz", {"200": raw_response(
            "gzip tar: model files, manifest.json, metadata.json", "application/gzip")}, codes=(503,))},
        "/model/{name}/info": {"get": _op("One live artifact", obj_200(MODEL_INFO, "Info"), parameters=[MODEL_NAME],
                                          codes=(404,))},
        "/model/{name}/download": {"get": _op("One live artifact's bytes (XGBoost UBJSON)", {
            "200": raw_response("Model file", OCTETS)}, parameters=[MODEL_NAME], codes=(404,))},
        "/model/{name}/xgb/json": {"get": _op("Tree dump (JSON array, one tree per element)", obj_200(
            {"type": "array"}, "Trees"), parameters=[MODEL_NAME], codes=(404, 503))},
        "/metrics": {"get": _op("Prometheus metrics", {"200": raw_response("Exposition format", "text/plain")})},
        **_ui(),
        **_pull(),
    }


def build(settings: TrainerSettings) -> dict[str, Any]:
    schemas = {**common_components(settings.bounds), "TrainingEntry": row_schema(settings.bounds, targets=True)}
    return document("latency-trainer", "llm-d-compatible training server (contract §4) plus the bundle pull API.",
                    secured(ACCESS, paths(settings)), schemas)


def install(app: FastAPI, settings: TrainerSettings) -> None:
    """Serve this document at /openapi.json instead of FastAPI's generated one."""
    doc = build(settings)
    app.openapi = lambda: doc  # type: ignore[method-assign]
