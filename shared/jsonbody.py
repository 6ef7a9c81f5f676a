"""JSON in and out: request bodies → values with FastAPI-shaped errors (json_invalid, missing),
and the one response encoder (``dumps``).

orjson rejects NaN / Infinity literals and overflowing exponents outright. So that a 422 can
name the offending *field* (not just "invalid JSON"), a body orjson refuses is re-read by the
standard library parser, which maps those literals to non-finite floats that validation then
reports per field. Only truly malformed JSON is answered with ``json_invalid``. Nesting deeper than
the configured limit is ``json_too_deep`` (``shared.jsondepth``), never a RecursionError.
"""

from __future__ import annotations

import json
from typing import Any

import orjson

from shared.errors import RequestValidationFailed
from shared.jsondepth import ORJSON_MAX_DEPTH, check_depth, too_deep

DEFAULT_MAX_DEPTH = 32
ECHO_MAX_DEPTH = 64
"""Values nested deeper are echoed (in a 422's ``input``) as a placeholder string."""


def _json_invalid(exc: json.JSONDecodeError) -> RequestValidationFailed:
    return RequestValidationFailed([{
        "type": "json_invalid", "loc": ["body", exc.pos], "msg": "JSON decode error",
        "input": {}, "ctx": {"error": exc.msg},
    }])


INT_RANGE = (-(2**63), 2**64)
"""Integers orjson encodes; anything outside (e.g. a 400-digit number echoed in a 422) is sent as its digits."""


def dumps(value: Any) -> bytes:
    """orjson bytes of ``value``; NaN/Infinity become null (never invalid JSON), out-of-range integers strings."""
    try:
        return orjson.dumps(value)
    except orjson.JSONEncodeError:
        return orjson.dumps(_encodable(value), default=str)


def _encodable(value: Any, depth: int = 0) -> Any:
    if isinstance(value, (dict, list, tuple)) and depth >= ECHO_MAX_DEPTH:
        return "<nested too deep>"
    if isinstance(value, dict):
        return {str(k): _encodable(v, depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_encodable(v, depth + 1) for v in value]
    if isinstance(value, int) and not isinstance(value, bool) and not INT_RANGE[0] <= value < INT_RANGE[1]:
        return str(value)
    return value


def parse_json(body: bytes, max_depth: int = DEFAULT_MAX_DEPTH) -> Any:
    """Parse a request body, or raise 422 (``missing`` for an empty body, ``json_too_deep`` past ``max_depth``)."""
    if not body.strip():
        raise RequestValidationFailed([{"type": "missing", "loc": ["body"], "msg": "Field required",
                                        "input": None}])
    try:
        value = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        if "depth limit" in str(exc):
            raise too_deep(min(max_depth, ORJSON_MAX_DEPTH)) from None
        value = _stdlib_loads(body, max_depth)
    check_depth(value, body, max_depth)
    return value


def _stdlib_loads(body: bytes, max_depth: int) -> Any:
    try:
        return json.loads(body)
    except RecursionError:
        raise too_deep(max_depth) from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        if isinstance(exc, UnicodeDecodeError):
            exc = json.JSONDecodeError("invalid utf-8", "", exc.start)
        raise _json_invalid(exc) from None


def list_field(payload: Any, key: str, *, min_len: int = 0, max_len: int | None = None) -> list[Any]:
    """``payload[key]`` as a list with the contract's ``missing``/``too_short``/``too_long`` errors."""
    loc = ["body", key]
    if not isinstance(payload, dict):
        raise RequestValidationFailed([{"type": "model_attributes_type", "loc": ["body"],
                                        "msg": "Input should be a valid dictionary or object to extract "
                                        "fields from", "input": payload}])
    if key not in payload:
        raise RequestValidationFailed([{"type": "missing", "loc": loc, "msg": "Field required",
                                        "input": payload}])
    rows = payload[key]
    if not isinstance(rows, list):
        raise RequestValidationFailed([{"type": "list_type", "loc": loc, "msg": "Input should be a valid list",
                                        "input": rows}])
    if len(rows) < min_len:
        raise RequestValidationFailed([{
            "type": "too_short", "loc": loc, "input": rows, "ctx": {"field_type": "List", "min_length": min_len,
                                                                     "actual_length": len(rows)},
            "msg": f"List should have at least {min_len} item after validation, not {len(rows)}"}])
    if max_len is not None and len(rows) > max_len:
        raise RequestValidationFailed([{
            "type": "too_long", "loc": loc, "input": f"<{len(rows)} items>",
            "ctx": {"field_type": "List", "max_length": max_len, "actual_length": len(rows)},
            "msg": f"List should have at most {max_len} items after validation, not {len(rows)}"}])
    return rows
