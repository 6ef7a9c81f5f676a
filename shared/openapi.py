"""OpenAPI 3.1 building blocks shared by both servers, generated from the one feature list so they never drift.

Request rows (``PredictionRequest``, ``TrainingEntry``) come from ``shared.features`` with the ranges
``shared.columns`` enforces; error bodies have the two shapes every server answers with (a 422
``detail`` list, ``{"detail": "..."}`` otherwise); bearer security follows ``shared.auth``. Each server
assembles its document from these (``trainer/openapi.py``, ``predictor/openapi.py``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from shared.auth import AccessPolicy, Level
from shared.columns import Bounds, upper_bound
from shared.features import FEATURE_FIELDS, TARGET_FIELDS, FieldKind, RawField
from shared.unknown_fields import INFORMATIONAL

Schema = dict[str, Any]
JSON = "application/json"
OPENAPI_VERSION = "3.1.0"
UNKNOWN_FIELDS = ("Unknown keys are accepted and ignored (counted per name in a metric); with "
                  "LATENCY_STRICT_FIELDS=true they are a 422 `extra_forbidden` naming the field.")
LAX = " Numeric strings and integral floats are accepted as upstream (pydantic lax mode)."


def ref(name: str) -> Schema:
    return {"$ref": f"#/components/schemas/{name}"}


LABELS = {
    "pod_type": "llm-d role label; any string is accepted, null or absent = \"\" (monolithic).",
    "pod_class": "Extension: the pod's hardware / engine class (e.g. GPU type); any string, \"\" = unknown. "
                 "Clients that never send it keep working.",
}


def field_schema(field: RawField, bounds: Bounds) -> Schema:
    if field.kind is FieldKind.LABEL:
        return {"type": ["string", "null"], "default": "", "description": LABELS.get(field.name, "A label string.")}
    schema: Schema = {"type": "integer" if field.kind is FieldKind.INT else "number", "minimum": 0,
                      "maximum": upper_bound(field, bounds)}
    if not field.required:
        schema["default"] = field.wire_default
    return schema


def row_schema(bounds: Bounds, targets: bool) -> Schema:
    fields = FEATURE_FIELDS + (TARGET_FIELDS if targets else ())
    properties = {f.name: field_schema(f, bounds) for f in fields}
    properties.update({name: {"description": "Informational (the EPP sends it); never used."}
                       for name in sorted(INFORMATIONAL)})
    return {"type": "object", "properties": properties, "required": [f.name for f in fields if f.required],
            "additionalProperties": True, "description": UNKNOWN_FIELDS + LAX}


def rows_body(key: str, item: str, min_items: int, max_items: int) -> Schema:
    return {"type": "object", "required": [key], "additionalProperties": True,
            "properties": {key: {"type": "array", "items": ref(item), "minItems": min_items, "maxItems": max_items}}}


VALIDATION_ERROR: Schema = {
    "type": "object", "required": ["type", "loc", "msg"],
    "properties": {"type": {"type": "string"}, "loc": {"type": "array", "items": {"type": ["string", "integer"]}},
                   "msg": {"type": "string"}, "input": {}, "ctx": {"type": "object"}}}
HTTP_VALIDATION_ERROR: Schema = {"type": "object", "required": ["detail"],
                                 "properties": {"detail": {"type": "array", "items": ref("ValidationError")}}}
ERROR: Schema = {"type": "object", "required": ["detail"], "properties": {"detail": {"type": "string"}}}


def common_components(bounds: Bounds) -> dict[str, Schema]:
    return {"PredictionRequest": row_schema(bounds, targets=False), "ValidationError": VALIDATION_ERROR,
            "HTTPValidationError": HTTP_VALIDATION_ERROR, "Error": ERROR}


SECURITY_SCHEMES: Schema = {
    "writeToken": {"type": "http", "scheme": "bearer", "description": "LATENCY_WRITE_TOKEN(_FILE). Required by "
                   "state-changing endpoints only when configured; 401 without it, 403 with another token."},
    "readToken": {"type": "http", "scheme": "bearer", "description": "LATENCY_READ_TOKEN(_FILE) (or the write "
                  "token). Required by model downloads only when configured."},
}
ERROR_TEXT = {401: "No bearer token (`WWW-Authenticate: Bearer`)", 403: "Wrong bearer token",
              404: "Not found", 413: "Request body over this endpoint's byte limit (checked before reading)",
              422: "Validation error: one element per problem (type, loc naming row and field, msg, input, ctx)",
              500: "Internal error", 503: "No model loaded yet"}


def json_response(description: str, schema: Schema, headers: Mapping[str, Schema] | None = None) -> Schema:
    out: Schema = {"description": description, "content": {JSON: {"schema": schema}}}
    if headers:
        out["headers"] = {name: {"schema": s} for name, s in headers.items()}
    return out


def raw_response(description: str, media_type: str, schema: Schema | None = None) -> Schema:
    return {"description": description, "content": {media_type: {"schema": schema or {"type": "string"}}}}


def errors(*codes: int) -> dict[str, Schema]:
    return {str(code): json_response(ERROR_TEXT[code], ref("HTTPValidationError") if code == 422 else ref("Error"))
            for code in codes}


def security(policy: AccessPolicy, method: str, path: str) -> list[Schema] | None:
    """The operation's security requirement (``{}``: open while no token is configured)."""
    level = policy.level_of(method.upper(), path)
    if level is None or level is Level.PUBLIC:
        return None
    names = ["writeToken"] if level is Level.WRITE else ["readToken", "writeToken"]
    return [*({name: []} for name in names), {}]


def secured(policy: AccessPolicy, paths: Mapping[str, dict[str, Schema]]) -> dict[str, dict[str, Schema]]:
    """Add ``security`` plus the 401/403 answers to every operation the policy guards."""
    out: dict[str, dict[str, Schema]] = {}
    for path, operations in paths.items():
        out[path] = {}
        for method, operation in operations.items():
            requirement = security(policy, method, path)
            if requirement is not None:
                operation = {**operation, "security": requirement,
                             "responses": {**operation["responses"], **errors(401, 403)}}
            out[path][method] = operation
    return out


def document(title: str, description: str, paths: Mapping[str, Any], schemas: Mapping[str, Schema]) -> Schema:
    return {"openapi": OPENAPI_VERSION, "info": {"title": title, "version": "1", "description": description},
            "paths": dict(paths), "components": {"schemas": dict(schemas), "securitySchemes": SECURITY_SCHEMES}}


def bool_map(keys: Iterable[str] | None = None) -> Schema:
    """An object whose values are all JSON booleans (the EPP decodes ``map[string]bool``)."""
    schema: Schema = {"type": "object", "additionalProperties": {"type": "boolean"}}
    if keys is not None:
        schema["required"] = list(keys)
    return schema


def obj(required: Mapping[str, Schema], optional: Mapping[str, Schema] | None = None) -> Schema:
    """An object with these required (and optional) properties; other keys allowed (additive fields are safe)."""
    return {"type": "object", "required": list(required), "properties": {**required, **(optional or {})}}


STRING, NUMBER, INTEGER, BOOLEAN = {"type": "string"}, {"type": "number"}, {"type": "integer"}, {"type": "boolean"}
NULLABLE_STRING, NULLABLE_INTEGER = {"type": ["string", "null"]}, {"type": ["integer", "null"]}
TIMESTAMP: Schema = {"type": "string", "format": "date-time"}
NULLABLE_TIMESTAMP: Schema = {"type": ["string", "null"], "format": "date-time"}
MODEL_TYPE: Schema = {"type": "string", "enum": ["bayesian_ridge", "xgboost", "lightgbm"]}
OBJECTIVE_TYPE: Schema = {"type": "string", "enum": ["quantile", "mean"]}
QUANTILE: Schema = {"type": "number", "exclusiveMinimum": 0, "maximum": 1}
KIND = {"model_type": MODEL_TYPE, "objective_type": OBJECTIVE_TYPE, "quantile": QUANTILE}
