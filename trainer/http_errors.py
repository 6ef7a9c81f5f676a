"""The one mapping from errors to HTTP responses for the trainer (and its JSON encoder).

Domain errors (shared.errors.LatencyError) carry their status; FastAPI's own validation
errors (query/path parameters) keep the contract's 422 shape; anything unexpected becomes a
500 ``{"detail": ...}`` after being logged with its traceback. Bodies are encoded with orjson
(``shared.jsonbody.dumps``: never invalid JSON; integers beyond 64 bits are sent as strings).
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.responses import Response

from shared.errors import LatencyError, Unauthorized
from shared.jsonbody import dumps

log = logging.getLogger(__name__)
ROUTE_FAILURE = {"/add_training_data_bulk": "Failed to add training data in bulk", "/predict": "Internal error "
                 "during prediction"}


class JSONBytesResponse(Response):
    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        return dumps(content)


def error_response(exc: LatencyError) -> JSONBytesResponse:
    headers = {"WWW-Authenticate": "Bearer"} if isinstance(exc, Unauthorized) else None
    return JSONBytesResponse({"detail": exc.detail()}, status_code=exc.status, headers=headers)


async def _latency_error(_: Request, exc: Exception) -> Response:
    assert isinstance(exc, LatencyError)
    if exc.status >= 500:
        log.error("%s: %s", type(exc).__name__, exc.message, exc_info=exc.__cause__ or None)
    return error_response(exc)


async def _validation_error(_: Request, exc: Exception) -> Response:
    assert isinstance(exc, RequestValidationError)
    errors = [{k: v for k, v in e.items() if k != "url"} for e in exc.errors()]
    return JSONBytesResponse({"detail": errors}, status_code=422)


async def _unexpected(request: Request, exc: Exception) -> Response:
    log.error("unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
    return JSONBytesResponse({"detail": ROUTE_FAILURE.get(request.url.path, "Internal error")}, status_code=500)


def install(app: FastAPI) -> None:
    app.add_exception_handler(LatencyError, _latency_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(Exception, _unexpected)
