"""The predictor's trust boundary: every route declared public, read or write (``POST /reload`` needs the write
token, the rest is public), and each endpoint's body limit.

Enforced by the shared ASGI guards wrapped around the app (``shared.auth``, ``shared.body_limit``);
the predict routes only pay a dict lookup and a header scan. Deny by default: ``check`` refuses to start an
app serving a route that ``ACCESS`` does not declare (``shared.auth.RouteAccessError`` naming it).
"""

from __future__ import annotations

from collections.abc import Iterable

from starlette.middleware import Middleware

from shared.auth import AccessPolicy, BearerGuard, Counter, Level, Rule, Tokens, public, served_routes
from shared.body_limit import BodyLimit
from shared.predictor_settings import PredictorSettings

ACCESS = AccessPolicy([
    Rule("POST", "/reload", Level.WRITE, "reload"),
    *public("POST", "/predict", "/predict/bulk", "/predict/bulk/strict"),
    *public("GET", "/status", "/healthz", "/readyz", "/", "/metrics", "/openapi.json"),
])
BULK_PATHS = ("/predict/bulk", "/predict/bulk/strict")


def middleware(settings: PredictorSettings, tokens: Tokens, count: Counter) -> list[Middleware]:
    """Outermost first: the token check, then the byte limit."""
    limits = dict.fromkeys(BULK_PATHS, settings.max_bulk_bytes)
    return [Middleware(BearerGuard, policy=ACCESS, tokens=tokens, count=count),  # type: ignore[arg-type]
            Middleware(BodyLimit, limits=limits, default=settings.max_body_bytes)]  # type: ignore[arg-type]


def check(routes: Iterable[object]) -> None:
    """Refuse to start unless every route is declared exactly once in ``ACCESS``."""
    ACCESS.require_declared("predictor", served_routes(routes))
