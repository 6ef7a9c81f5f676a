"""The trainer's trust boundary: which endpoints need which token, and each endpoint's body limit.

Both are enforced by the shared ASGI guards (``shared.auth.BearerGuard``, ``shared.body_limit.BodyLimit``)
wrapped around the whole app, so no route checks anything itself.
"""

from __future__ import annotations

from fastapi import FastAPI

from shared.auth import AccessPolicy, BearerGuard, Level, Rule, Tokens
from shared.body_limit import BodyLimit
from shared.trainer_settings import TrainerSettings
from trainer.metrics import TrainerMetrics

ACCESS = AccessPolicy([
    Rule("POST", "/add_training_data_bulk", Level.WRITE, "add_training_data_bulk"),
    Rule("POST", "/flush", Level.WRITE, "flush"),
    Rule("GET", "/model/export", Level.READ, "model_export"),
    Rule("GET", "/model/*/download", Level.READ, "model_download"),
    Rule("GET", "/model/*/xgb/json", Level.READ, "model_xgb_json"),
    Rule("GET", "/bundle/", Level.READ, "bundle"),
])


def body_limits(settings: TrainerSettings) -> dict[str, int]:
    return {"/add_training_data_bulk": settings.max_ingest_bytes}


def install(app: FastAPI, settings: TrainerSettings, tokens: Tokens, metrics: TrainerMetrics) -> None:
    """Wrap ``app``: the token check runs first (outermost), then the byte limit."""
    app.add_middleware(BodyLimit, limits=body_limits(settings), default=settings.max_body_bytes)
    app.add_middleware(BearerGuard, policy=ACCESS, tokens=tokens, count=metrics.count_auth)
