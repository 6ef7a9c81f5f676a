"""The trainer's ASGI app factory (no module-level app: settings are passed in)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI
from starlette.concurrency import run_in_threadpool

from shared.auth import Tokens, warn_if_open
from shared.trainer_settings import TrainerSettings
from trainer import access, http_errors, openapi
from trainer.pull import build_pull_router
from trainer.routes import build_router
from trainer.service import TrainerService
from trainer.ui import build_ui_router


def create_app(settings: TrainerSettings, run_loop: bool = True) -> FastAPI:
    """Build the app; the lifespan replays the log, bootstraps a bundle and starts the retrain loop. A route
    that ``trainer.access`` does not declare fails here and at start-up (``shared.auth.RouteAccessError``)."""
    tokens = Tokens.from_settings(settings)
    service = TrainerService(settings)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        access.check(app)
        warn_if_open(tokens, access.ACCESS, "trainer", settings.host, settings.port)
        service.live.bind_loop(asyncio.get_running_loop())
        await run_in_threadpool(service.start, run_loop)
        try:
            yield
        finally:
            await run_in_threadpool(service.stop)

    app = FastAPI(title="latency-trainer", lifespan=lifespan, docs_url=None, redoc_url=None)
    app.state.service = service
    http_errors.install(app)
    access.install(app, settings, tokens, service.metrics)
    app.include_router(build_router(service))
    app.include_router(build_pull_router(service))
    app.include_router(build_ui_router(service))
    openapi.install(app, settings)
    access.check(app)
    return app
