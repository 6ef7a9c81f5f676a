"""Errors of the router client (subclasses of the project hierarchy in ``shared.errors``)."""

from __future__ import annotations

from shared.errors import LatencyError


class RouterError(LatencyError):
    """Base of router-client errors."""

    status = 500


class RouterConfigError(RouterError):
    """The configuration is invalid (unknown key, unknown plugin, bad parameter): fail at start-up."""

    status = 500


class PredictionUnavailable(RouterError):
    """No predictions for a decision; ``reason`` is the fallback label (timeout, error, status, decode)."""

    status = 503

    def __init__(self, reason: str, message: str = "") -> None:
        super().__init__(message or reason)
        self.reason = reason
