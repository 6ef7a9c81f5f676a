"""The one place project errors become HTTP responses (``{"detail": ...}``, contract §0)."""

from __future__ import annotations

from typing import Any

import orjson
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from shared.errors import LatencyError

JSON = "application/json"


def json_response(payload: object, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    try:
        body = orjson.dumps(payload)
    except orjson.JSONEncodeError:  # e.g. a 400-digit integer echoed as a 422 "input"
        body = orjson.dumps(_encodable(payload))
    return Response(body, status_code=status, media_type=JSON, headers=headers)


def _encodable(value: Any) -> Any:
    """Integers beyond 64 bits become their decimal string (orjson cannot encode them)."""
    if isinstance(value, dict):
        return {k: _encodable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_encodable(v) for v in value]
    if isinstance(value, int) and not isinstance(value, bool) and not -(2**63) <= value < 2**64:
        return str(value)
    return value


def error_response(exc: LatencyError, headers: dict[str, str] | None = None) -> Response:
    """A domain error as ``{"detail": <string or FastAPI-shaped list>}`` with its status."""
    return json_response({"detail": exc.detail()}, exc.status, headers)


async def latency_error_handler(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, LatencyError)
    return error_response(exc)


async def http_exception_handler(request: Request, exc: Exception) -> Response:
    """Routing errors (404 unknown path, 405 wrong method) in the JSON shape clients expect."""
    assert isinstance(exc, HTTPException)
    return json_response({"detail": exc.detail}, exc.status_code, dict(exc.headers or {}))


async def internal_error_handler(request: Request, exc: Exception) -> Response:
    """Last resort of the framework for a bug: still the contract's JSON shape (the traceback is logged)."""
    return json_response({"detail": "Internal server error"}, 500)


HANDLERS = {LatencyError: latency_error_handler, HTTPException: http_exception_handler, 500: internal_error_handler}
