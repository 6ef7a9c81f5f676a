"""The OpenAI-compatible routing proxy as a Starlette app (built by ``create_app``; no globals).

Routes: ``POST /v1/completions``, ``POST /v1/chat/completions``, ``GET /v1/models``, ``GET /healthz``,
``GET /readyz``, ``GET /metrics``, ``GET /status`` (the router's state as JSON). The lifespan starts the
router library (scraper, reporter, predictor clients) and the shared keep-alive client to the pods, and
closes both at shutdown.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from router_client.config import RouterConfig
from router_client.proxy.forwarding import Forwarder, ForwardSettings, make_pool
from router_client.proxy.http_errors import EXCEPTION_HANDLERS, json_response
from router_client.proxy.metrics import ProxyMetrics
from router_client.proxy.models import ModelCatalog
from router_client.proxy.parsing import CHAT, COMPLETIONS
from router_client.router import Router
from shared.jsonbody import dumps

_PROMETHEUS = "text/plain; version=0.0.4; charset=utf-8"


@dataclass
class ProxyState:
    router: Router
    forwarder: Forwarder
    catalog: ModelCatalog
    metrics: ProxyMetrics
    ready: bool = False


def _state(request: Request) -> ProxyState:
    state: ProxyState = request.app.state.proxy
    return state


async def completions(request: Request) -> Response:
    return await _state(request).forwarder.handle(COMPLETIONS, await request.body(), request.headers)


async def chat_completions(request: Request) -> Response:
    return await _state(request).forwarder.handle(CHAT, await request.body(), request.headers)


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


def create_app(config: RouterConfig, settings: ForwardSettings | None = None) -> Starlette:
    """Build the proxy for ``config``; nothing starts until the app's lifespan runs."""
    settings = settings or ForwardSettings()
    proxy_metrics = ProxyMetrics()

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        router = Router(config)
        upstream = make_pool(settings)
        client = httpx.AsyncClient(timeout=httpx.Timeout(2.0))
        pods = [pod for pool in config.pools for pod in pool.pods]
        state = ProxyState(router, Forwarder(router, upstream, proxy_metrics),
                           ModelCatalog(client, pods, settings.served_model_name), proxy_metrics)
        app.state.proxy = state
        await router.start()
        state.ready = True
        try:
            yield
        finally:
            state.ready = False
            await router.aclose()
            await upstream.aclose()
            await client.aclose()

    routes = [
        Route(COMPLETIONS, completions, methods=["POST"]),
        Route(CHAT, chat_completions, methods=["POST"]),
        Route("/v1/models", models, methods=["GET"]),
        Route("/healthz", healthz, methods=["GET"]),
        Route("/readyz", readyz, methods=["GET"]),
        Route("/metrics", metrics, methods=["GET"]),
        Route("/status", status, methods=["GET"]),
    ]
    return Starlette(routes=routes, lifespan=lifespan, exception_handlers=dict(EXCEPTION_HANDLERS))

