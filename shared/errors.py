"""The one exception hierarchy of the project.

Every domain error carries the HTTP status it maps to; each server maps them to responses in
exactly one place (its ``http_errors`` module). The domain never raises web-framework types.
"""

from __future__ import annotations

from typing import Any


class LatencyError(Exception):
    """Base of all project errors. ``status`` is the HTTP status a server answers with."""

    status: int = 500

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def detail(self) -> Any:
        """The JSON value placed under ``"detail"`` in an error response."""
        return self.message


class RequestValidationFailed(LatencyError):
    """Bad input. ``errors`` is the FastAPI-shaped list (type, loc, msg, input, ctx)."""

    status = 422

    def __init__(self, errors: list[dict[str, Any]]) -> None:
        super().__init__(f"{len(errors)} validation error(s)")
        self.errors = errors

    def detail(self) -> Any:
        return self.errors


class NotReady(LatencyError):
    """No model is loaded yet."""

    status = 503


class NotFound(LatencyError):
    status = 404


class Unauthorized(LatencyError):
    """No credentials where a bearer token is required (answered with ``WWW-Authenticate: Bearer``)."""

    status = 401


class Forbidden(LatencyError):
    """Credentials given, but not the configured token."""

    status = 403


class PayloadTooLarge(LatencyError):
    """The request body exceeds the byte limit of its endpoint (checked before it is read or parsed)."""

    status = 413


class BundleError(LatencyError):
    """A model bundle is malformed, incomplete, tampered with or incompatible."""

    status = 500


class StorageError(LatencyError):
    """The durable sample log could not be written or read."""

    status = 500


class TrainingError(LatencyError):
    """A retrain failed (counted and reported, never swallowed)."""

    status = 500
