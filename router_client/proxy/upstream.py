"""The proxy's pod-facing client: the library's keep-alive HTTP/1.1 client under the proxy's names.

The implementation (asyncio protocol + httptools parser, per-origin LIFO idle pool, no read
timeout, bounded connect) lives in :mod:`router_client.http1`, shared with the predictor client.
``ConnectFailed``: the pod could not be reached (nothing was received); ``StreamBroken``: the
connection dropped after the request was sent.
"""

from __future__ import annotations

from router_client.http1 import ConnectFailed, Http1Error, Http1Pool, Http1Response, StreamBroken

UpstreamError = Http1Error
"""Base of the pod-connection errors (mapped to 502 or an SSE error event by the caller)."""
UpstreamPool = Http1Pool
UpstreamResponse = Http1Response

__all__ = ["ConnectFailed", "StreamBroken", "UpstreamError", "UpstreamPool", "UpstreamResponse"]
