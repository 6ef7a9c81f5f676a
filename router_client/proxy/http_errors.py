"""The one place where proxy errors become HTTP responses (OpenAI error envelope)."""

from __future__ import annotations

from typing import Any

import orjson
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from router_client.proxy.errors import ProxyError


def error_body(message: str, error_type: str, *, param: str | None = None, **extra: Any) -> dict[str, Any]:
    """``{"error": {...}}`` as OpenAI-compatible servers (vLLM included) shape it."""
    err: dict[str, Any] = {"message": message, "type": error_type, "param": param, "code": error_type}
    err.update(extra)
    return {"error": err}


def json_response(status: int, body: Any, headers: dict[str, str] | None = None) -> Response:
    return Response(orjson.dumps(body), status_code=status, headers=headers, media_type="application/json")


def proxy_error_response(exc: ProxyError, request_id: str | None = None) -> Response:
    headers = exc.headers()
    if request_id and "x-request-id" not in headers:
        headers["x-request-id"] = request_id
    return json_response(exc.status, error_body(exc.message, exc.error_type, param=exc.param), headers)


async def handle_proxy_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ProxyError)
    return proxy_error_response(exc, request.headers.get("x-request-id"))


async def handle_http_exception(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    kind = "not_found" if exc.status_code == 404 else "invalid_request_error"
    return json_response(exc.status_code, error_body(str(exc.detail), kind), dict(exc.headers or {}))


EXCEPTION_HANDLERS = {ProxyError: handle_proxy_error, HTTPException: handle_http_exception}
