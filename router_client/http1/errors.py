"""The client's errors and the body-sink contract."""

from __future__ import annotations

from typing import Protocol


class Http1Error(Exception):
    """Base of the connection errors (the proxy maps them to 502 / an SSE error event, the
    predictor client to the ``error`` fallback)."""


class ConnectFailed(Http1Error):
    """Connection refused, unreachable, TLS handshake or certificate failure, bad URL, or connect
    timeout: nothing reached the server."""


class StreamBroken(Http1Error):
    """The connection was lost (or the response was malformed) after the request was sent."""


class BodySink(Protocol):
    """Receives a response body from the connection's callbacks (see :meth:`Http1Response.stream_to`)."""

    def body(self, data: bytes) -> None:
        """Body bytes, as they arrive (chunked framing removed)."""

    def end(self, error: str | None) -> None:
        """Called once: ``None`` when the body is complete, else why the connection broke."""
