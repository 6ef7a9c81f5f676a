"""Errors raised by the proxy. Each carries its HTTP status; ``http_errors`` maps them to responses.

The OpenAI error envelope is ``{"error": {"message", "type", "param", "code"}}``; ``error_type`` fills
``type`` and ``code``.
"""

from __future__ import annotations

from shared.errors import LatencyError


class ProxyError(LatencyError):
    """Base of the proxy's errors."""

    status = 500
    error_type = "internal_error"

    def __init__(self, message: str, *, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param

    def headers(self) -> dict[str, str]:
        return {}


class InvalidRequest(ProxyError):
    """The client's body or headers cannot be routed (malformed JSON, bad SLO header, ...)."""

    status = 400
    error_type = "invalid_request_error"


class Shed(ProxyError):
    """A sheddable request no pod can serve within its SLO."""

    status = 429
    error_type = "slo_shed"

    def __init__(self, message: str, *, retry_after_s: int, pool: str, request_id: str) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s
        self.pool = pool
        self.request_id = request_id

    def headers(self) -> dict[str, str]:
        return {"retry-after": str(self.retry_after_s), "x-routed-pool": self.pool, "x-request-id": self.request_id}


class NoEndpoint(ProxyError):
    """The router returned no pod (e.g. an empty pool)."""

    status = 503
    error_type = "no_endpoint"

    def __init__(self, message: str, *, retry_after_s: int) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s

    def headers(self) -> dict[str, str]:
        return {"retry-after": str(self.retry_after_s)}


class _PodFailure(ProxyError):
    """A 502 about one pod of one pool (named in the response headers by the subclass)."""

    status = 502

    def __init__(self, message: str, *, pod: str, pool: str) -> None:
        super().__init__(message)
        self.pod = pod
        self.pool = pool


class UpstreamUnavailable(_PodFailure):
    """The chosen pod could not be reached (or dropped the connection) before answering."""

    error_type = "upstream_unavailable"

    def headers(self) -> dict[str, str]:
        return {"x-routed-pod": self.pod, "x-routed-pool": self.pool}


class PrefillFailed(_PodFailure):
    """A disaggregated request's prefill pod failed and its pool's ``pd.on_prefill_failure`` is ``error``."""

    error_type = "prefill_failed"

    def headers(self) -> dict[str, str]:
        return {"x-prefill-pod": self.pod, "x-routed-pool": self.pool}
