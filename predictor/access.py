"""The predictor's trust boundary: ``POST /reload`` needs the write token; each endpoint's body limit.

Enforced by the shared ASGI guards wrapped around the app (``shared.auth``, ``shared.body_limit``);
the predict routes only pay a dict lookup and a header scan.
"""

from __future__ import annotations

from starlette.middleware import Middleware

from shared.auth import AccessPolicy, BearerGuard, Counter, Level, Rule, Tokens
from shared.body_limit import BodyLimit
from shared.predictor_settings import PredictorSettings

ACCESS = AccessPolicy([Rule("POST", "/reload", Level.WRITE, "reload")])
BULK_PATHS = ("/predict/bulk", "/predict/bulk/strict")


def middleware(settings: PredictorSettings, tokens: Tokens, count: Counter) -> list[Middleware]:
    """Outermost first: the token check, then the byte limit."""
    limits = dict.fromkeys(BULK_PATHS, settings.max_bulk_bytes)
    return [Middleware(BearerGuard, policy=ACCESS, tokens=tokens, count=count),  # type: ignore[arg-type]
            Middleware(BodyLimit, limits=limits, default=settings.max_body_bytes)]  # type: ignore[arg-type]
