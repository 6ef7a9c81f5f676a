"""The trainer's trust boundary: every route declared public, read or write, and each endpoint's body limit.

Both are enforced by the shared ASGI guards (``shared.auth.BearerGuard``, ``shared.body_limit.BodyLimit``)
wrapped around the whole app, so no route checks anything itself. Deny by default: ``check`` refuses to start
an app serving a route that ``ACCESS`` does not declare (``shared.auth.RouteAccessError`` naming it).
"""

from __future__ import annotations

import fastapi.routing
from fastapi import FastAPI

from shared.auth import AccessPolicy, BearerGuard, Level, Rule, Tokens, public, served_routes
from shared.body_limit import BodyLimit
from shared.trainer_settings import TrainerSettings
from trainer.metrics import TrainerMetrics

ACCESS = AccessPolicy([
    Rule("POST", "/add_training_data_bulk", Level.WRITE, "add_training_data_bulk"),
    Rule("POST", "/flush", Level.WRITE, "flush"),
    Rule("GET", "/model/export", Level.READ, "model_export"),
    Rule("GET", "/model/{name}/download", Level.READ, "model_download"),
    Rule("GET", "/model/{name}/xgb/json", Level.READ, "model_xgb_json"),
    Rule("GET", "/bundle/manifest", Level.READ, "bundle"),
    Rule("GET", "/bundle/v/{version}/{filename}", Level.READ, "bundle"),
    *public("POST", "/predict"),
    *public("GET", "/healthz", "/readyz", "/", "/model/download/info", "/models/list", "/model/{name}/info",
            "/data/status", "/debug/prefix_distribution", "/metrics", "/ui", "/ui/data", "/openapi.json"),
])


def body_limits(settings: TrainerSettings) -> dict[str, int]:
    return {"/add_training_data_bulk": settings.max_ingest_bytes}


def install(app: FastAPI, settings: TrainerSettings, tokens: Tokens, metrics: TrainerMetrics) -> None:
    """Wrap ``app``: the token check runs first (outermost), then the byte limit."""
    app.add_middleware(BodyLimit, limits=body_limits(settings), default=settings.max_body_bytes)
    app.add_middleware(BearerGuard, policy=ACCESS, tokens=tokens, count=metrics.count_auth)


def routes_of(app: FastAPI) -> list[object]:
    """The app's routes, included routers expanded (newer FastAPI keeps them as one lazy entry each)."""
    expand = getattr(fastapi.routing, "iter_route_contexts", None)
    return list(app.routes) if expand is None else list(expand(app.routes))


def check(app: FastAPI) -> None:
    """Refuse to start unless every route of ``app`` is declared exactly once in ``ACCESS``."""
    ACCESS.require_declared("trainer", served_routes(routes_of(app)))
