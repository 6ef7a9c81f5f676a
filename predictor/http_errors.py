"""The one place project errors become HTTP responses (``{"detail": ...}``, contract §0)."""

from __future__ import annotations

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from shared.errors import LatencyError
from shared.jsonbody import dumps

JSON = "application/json"


def json_response(payload: object, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(dumps(payload), status_code=status, media_type=JSON, headers=headers)


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
