"""A minimal keep-alive HTTP/1.1 client for hot paths (the proxy → pod streams, the decision →
predictor bulk calls, the metrics scraper).

Why not httpx or aiohttp here: under 50 concurrent streams on 2 cores, httpx/httpcore's per-request
and per-chunk cost dominated the proxy's CPU profile, a predictor round trip through httpx costs ~3×
one through this client, and neither library can hand body bytes to a callback: every chunk wakes a
task. Figures: ``bench/results/proxy/RESULTS-proxy.md`` ("HTTP client decision").

This client is an ``asyncio.Protocol`` with httptools' C response parser (chunked decoding, chunk
extensions and trailers included) and a per-origin LIFO pool of idle connections. ``http://`` and
``https://`` (``ssl_context``; the system trust store by default) URLs. A body is either read by
awaiting (:meth:`Http1Response.chunks` / :meth:`Http1Response.read`) or pushed to a
:class:`BodySink` from the connection's ``data_received`` callback
(:meth:`Http1Response.stream_to`): no task wake-up per chunk; the sink applies back-pressure with
:meth:`Http1Response.pause_reading` / :meth:`Http1Response.resume_reading`.

No read timeout by default (streams can be long; callers bound a whole exchange with
:meth:`Http1Pool.fetch` or ``asyncio.timeout``); a bounded connect (and TLS handshake) timeout.
Interim ``1xx`` responses (``100 Continue``, ``103 Early Hints``) are skipped; a response without
``content-length`` or chunked encoding ends at the server's close. ``ConnectFailed``: the server
could not be reached (nothing was received); ``StreamBroken``: the connection dropped, or the
response was malformed, after the request was sent. A reused keep-alive connection that the server
closed while idle is retried once on a fresh connection. A request cancelled half-way closes its
connection (it is never returned to the pool). Not supported: ``HEAD`` (the parser would wait for
the announced body), proxies, ``Upgrade``.
"""

from __future__ import annotations

from router_client.http1.errors import BodySink, ConnectFailed, Http1Error, StreamBroken
from router_client.http1.pool import Http1Exchange, Http1Pool, Http1Response

__all__ = ["BodySink", "ConnectFailed", "Http1Error", "Http1Exchange", "Http1Pool", "Http1Response",
           "StreamBroken"]
