"""The proxy's access declaration: every route it serves, each public.

The proxy holds no token: a completion's ``Authorization`` header is forwarded to the pod, which checks it
(vLLM's ``--api-key``); the status routes are open as the servers' are. Deny by default all the same:
``check`` refuses to start an app serving a route that ``ACCESS`` does not declare, and a route declared read
or write (there is no token here to check it) — ``shared.auth.RouteAccessError`` naming it.
"""

from __future__ import annotations

from collections.abc import Iterable

from router_client.proxy.parsing import CHAT, COMPLETIONS
from shared.auth import AccessPolicy, Level, RouteAccessError, Served, public, served_routes

ACCESS = AccessPolicy([
    *public("POST", COMPLETIONS, CHAT),
    *public("GET", "/v1/models", "/healthz", "/readyz", "/metrics", "/status", "/ui", "/ui/data", "/ui/requests"),
])


def check(routes: Iterable[object], direct: Iterable[Served]) -> None:
    """Refuse to start unless every route (Starlette's and those the app serves ``direct``, before routing) is
    declared exactly once in ``ACCESS``, and public."""
    guarded = [f"{r.method} {r.path}" for r in ACCESS.rules if r.level is not Level.PUBLIC]
    if guarded:
        raise RouteAccessError(f"router proxy refuses to start: {', '.join(guarded)} declared read or write, "
                               "but the proxy holds no token to check")
    ACCESS.require_declared("router proxy", [*served_routes(routes), *direct])
