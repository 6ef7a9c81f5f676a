"""The OpenAI-compatible routing proxy as a Starlette app (built by ``create_app``; no globals).

Routes: ``POST /v1/completions``, ``POST /v1/chat/completions``, ``GET /v1/models``, ``GET /healthz``,
``GET /readyz``, ``GET /metrics``, ``GET /status`` (the router's state as JSON), ``GET /ui`` (status page),
``GET /ui/data`` and ``GET /ui/requests`` (``proxy/ui.py``). The two completion routes
are the hot path: :class:`ProxyApp` dispatches them itself, before Starlette's routing and middleware (≈10 %
of the proxy's CPU per request in a profile), and maps their ``ProxyError`` with the same
``proxy_error_response``; every other route goes through Starlette. Every route, the two completion routes
included (``DIRECT_ROUTES``), is declared in ``proxy/access.py``: an undeclared one fails ``create_app`` and
start-up. The lifespan starts the router library (scraper, reporter, predictor clients) and the shared
keep-alive client to the pods, and closes both at shutdown.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import httpx
from starlette.applications import Starlette
from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from router_client.config import RouterConfig
from router_client.proxy import access
from router_client.proxy.downstream import remember_server_send
from router_client.proxy.errors import ProxyError
from router_client.proxy.forwarding import Forwarder, ForwardSettings, make_pool
from router_client.proxy.http_errors import EXCEPTION_HANDLERS, error_body, json_response, proxy_error_response
from router_client.proxy.metrics import ProxyMetrics
from router_client.proxy.models import ModelCatalog
from router_client.proxy.parsing import CHAT, COMPLETIONS
from router_client.proxy.ui import ROUTES as UI_ROUTES
from router_client.proxy.ui import StatusSampler, UiState
from router_client.request_log import RequestLog
from router_client.router import Router
from router_client.status_history import StatusHistory
from shared.auth import Served
from shared.jsonbody import dumps

_PROMETHEUS = "text/plain; version=0.0.4; charset=utf-8"
_COMPLETION_ROUTES = frozenset((COMPLETIONS, CHAT))
DIRECT_ROUTES = (Served("POST", COMPLETIONS, "completions"), Served("POST", CHAT, "chat_completions"))


@dataclass
class ProxyState:
    router: Router
    forwarder: Forwarder
    catalog: ModelCatalog
    metrics: ProxyMetrics
    ui: UiState
    ready: bool = False


def _state(request: Request) -> ProxyState:
    state: ProxyState = request.app.state.proxy
    return state


async def models(request: Request) -> Response:
    return json_response(200, await _state(request).catalog.listing())


async def healthz(request: Request) -> Response:
    return json_response(200, {"status": "ok", "service": "latency-router"})


async def readyz(request: Request) -> Response:
    if not _state(request).ready:
        return json_response(503, {"detail": "Router is starting"})
    return json_response(200, {"status": "ready"})


async def metrics(request: Request) -> Response:
    state = _state(request)
    return Response(state.metrics.render(state.router.metrics_registry), media_type=_PROMETHEUS)


async def status(request: Request) -> Response:
    state = _state(request)
    return Response(dumps(state.router.status()), media_type="application/json")


class ProxyApp(Starlette):
    """Starlette that records the server's own ``send`` in the scope before any middleware wraps it
    (``downstream.SERVER_SEND``: streams are written to the client's connection directly) and
    serves ``POST`` to the completion routes without Starlette's routing and middleware (``direct_routes``)."""

    direct_routes = DIRECT_ROUTES

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        remember_server_send(scope, send)
        if scope["type"] != "http" or scope["path"] not in _COMPLETION_ROUTES:
            await super().__call__(scope, receive, send)
        elif scope["method"] == "POST":
            await self._completion(scope, receive, send)
        else:
            not_allowed = error_body("Method Not Allowed", "invalid_request_error")
            await json_response(405, not_allowed, {"allow": "POST"})(scope, receive, send)

    async def _completion(self, scope: Scope, receive: Receive, send: Send) -> None:
        body = await _read_body(receive)
        if body is None:
            return  # the client left before sending its whole body
        headers = Headers(scope=scope)
        state: ProxyState = self.state.proxy
        try:
            response = await state.forwarder.handle(scope["path"], body, headers)
        except ProxyError as exc:
            response = proxy_error_response(exc, headers.get("x-request-id"))
        await response(scope, receive, send)


async def _read_body(receive: Receive) -> bytes | None:
    parts = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        parts.append(message.get("body", b""))
        if not message.get("more_body", False):
            return parts[0] if len(parts) == 1 else b"".join(parts)


def create_app(config: RouterConfig, settings: ForwardSettings | None = None) -> Starlette:
    """Build the proxy for ``config``; nothing starts until the app's lifespan runs."""
    settings = settings or ForwardSettings()
    proxy_metrics = ProxyMetrics()

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        access.check(app.routes, DIRECT_ROUTES)
        router = Router(config)
        upstream = make_pool(settings)
        client = httpx.AsyncClient(timeout=httpx.Timeout(2.0), limits=httpx.Limits(
            max_connections=100, max_keepalive_connections=20, keepalive_expiry=settings.pod_max_idle_s))
        ui = UiState(router, StatusHistory(), RequestLog())
        state = ProxyState(router, Forwarder(router, upstream, proxy_metrics, requests=ui.requests),
                           ModelCatalog(client, router.pod_urls, settings.served_model_name), proxy_metrics, ui)
        app.state.proxy = state
        await router.start()
        sampler = StatusSampler(ui)
        sampler.start()
        state.ready = True
        try:
            yield
        finally:
            state.ready = False
            await sampler.stop()
            await router.aclose()
            await upstream.aclose()
            await client.aclose()

    routes = [
        Route("/v1/models", models, methods=["GET"]),
        Route("/healthz", healthz, methods=["GET"]),
        Route("/readyz", readyz, methods=["GET"]),
        Route("/metrics", metrics, methods=["GET"]),
        Route("/status", status, methods=["GET"]),
        *UI_ROUTES,
    ]
    app = ProxyApp(routes=routes, lifespan=lifespan, exception_handlers=dict(EXCEPTION_HANDLERS))
    access.check(app.routes, DIRECT_ROUTES)
    return app

