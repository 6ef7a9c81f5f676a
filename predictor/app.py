"""The prediction server's routes (contract §3), assembled around injected settings.

Thin on purpose: each route reads the holder's ``Serving`` snapshot once, hands bytes to
``HotPath`` and maps ``shared.errors`` through ``http_errors``. Small bodies are predicted on
the event loop (sub-millisecond numpy work; a threadpool hop costs more than it saves), bodies
above ``PREDICT_INLINE_MAX_BYTES`` go to the threadpool so a 10,000-row call never stalls it.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from predictor import access, openapi
from predictor.holder import ModelHolder
from predictor.hotpath import Answer, HotPath, Quantiles, parse_quantiles
from predictor.http_errors import HANDLERS, JSON, error_response, json_response
from predictor.metrics import PredictorMetrics
from predictor.serving import Serving
from predictor.sources import BundleDirSource, BundleSource, HttpPullSource
from predictor.status import StatusView
from predictor.sync import Syncer
from shared.auth import Tokens, warn_if_open
from shared.errors import LatencyError
from shared.jsonbody import dumps
from shared.predictor_settings import PredictorSettings
from shared.unknown_fields import UnknownFields

log = logging.getLogger(__name__)
INITIAL_SYNC_MAX_S = 10.0  # start-up never waits longer for the first bundle (the loops keep trying)
PredictFn = Callable[[bytes, "Serving | None", Quantiles], Answer]


def make_source(settings: PredictorSettings, tokens: Tokens | None = None) -> BundleSource:
    if settings.bundle_dir:
        return BundleDirSource(Path(settings.bundle_dir), settings.hmac_key, settings.dir_watch_interval_sec)
    return HttpPullSource(settings.training_server_url, Path(settings.local_model_dir), settings.hmac_key,
                          timeout_s=settings.http_timeout, retries=settings.download_retries,
                          keep=settings.keep_local_bundles, token=None if tokens is None else tokens.read,
                          max_idle_s=settings.keepalive_timeout_sec / 2)


def _version_headers(serving: Serving | None) -> dict[str, str] | None:
    if serving is None:
        return None
    return {"X-Model-Version": str(serving.version), "X-Model-Prior": "true" if serving.prior else "false"}


class PredictorApp:
    """State shared by the routes: settings, holder, syncer, hot path, metrics."""

    def __init__(self, settings: PredictorSettings, source: BundleSource | None = None) -> None:
        self.settings = settings
        self.tokens = Tokens.from_settings(settings)
        self.holder = ModelHolder(settings)
        self.metrics = PredictorMetrics()
        self.metrics.bind(self.holder)
        self.source = source or make_source(settings, self.tokens)
        self.syncer = Syncer(self.holder, self.source, self.metrics)
        unknown = UnknownFields(self.metrics.count_unknown, settings.strict_fields, "predictor")
        self.hot = HotPath(settings.bounds, settings.max_bulk_rows, unknown, settings.max_json_depth)
        self.view = StatusView(settings, self.holder, self.source)
        self.openapi = dumps(openapi.build(settings))
        self._tasks: list[asyncio.Task[None]] = []

    async def _predict(self, request: Request, endpoint: str, fn: PredictFn) -> Response:
        start = time.perf_counter()
        serving = self.holder.serving
        headers = _version_headers(serving)
        rows = 0
        try:
            body = await request.body()
            quantiles = parse_quantiles(request.query_params.get("quantiles"))
            if len(body) <= self.settings.inline_max_bytes:
                answer = fn(body, serving, quantiles)
            else:
                answer = await run_in_threadpool(fn, body, serving, quantiles)
        except LatencyError as exc:
            response = error_response(exc, headers)
        else:
            rows = answer.rows
            response = Response(answer.body, media_type=JSON, headers=headers)
        self.metrics.observe(endpoint, response.status_code, time.perf_counter() - start, rows)
        return response

    async def predict(self, request: Request) -> Response:
        return await self._predict(request, "predict", self.hot.single)

    async def predict_bulk(self, request: Request) -> Response:
        return await self._predict(request, "predict_bulk", self.hot.bulk)

    async def predict_bulk_strict(self, request: Request) -> Response:
        return await self._predict(request, "predict_bulk_strict", self.hot.strict)

    def _small(self, endpoint: str, start: float, payload: Any, status: int = 200) -> Response:
        response = json_response(payload, status)
        self.metrics.observe(endpoint, status, time.perf_counter() - start)
        return response

    async def status(self, request: Request) -> Response:
        return self._small("status", time.perf_counter(), self.view.status())

    async def reload(self, request: Request) -> Response:
        start = time.perf_counter()
        result = await self.syncer.sync_once(force=True)
        return self._small("reload", start, self.view.reload(result))

    async def healthz(self, request: Request) -> Response:
        return self._small("healthz", time.perf_counter(),
                           {"status": "ok", "service": "http-based-latency-predictor"})

    async def readyz(self, request: Request) -> Response:
        start = time.perf_counter()
        if self.holder.serving is None:
            return self._small("readyz", start, {"detail": "Models are not ready"}, 503)
        return self._small("readyz", start, {"status": "ready", **self.view.model_meta()})

    async def root(self, request: Request) -> Response:
        return self._small("root", time.perf_counter(), self.view.root())

    async def openapi_endpoint(self, request: Request) -> Response:
        return Response(self.openapi, media_type=JSON)

    async def metrics_endpoint(self, request: Request) -> Response:
        start = time.perf_counter()
        body = self.metrics.render()
        self.metrics.observe("metrics", 200, time.perf_counter() - start)
        return Response(body, media_type=CONTENT_TYPE_LATEST)

    @contextlib.asynccontextmanager
    async def lifespan(self, app: Starlette) -> AsyncIterator[None]:
        access.check(app.routes)
        warn_if_open(self.tokens, access.ACCESS, "predictor", self.settings.host, self.settings.port)
        await self._first_bundle()
        gc.freeze()  # start-up objects (modules, boosters) leave the GC's view: shorter full collections
        self._start(self.syncer.run_periodic(self.settings.model_sync_interval_sec))
        if self.settings.long_poll:
            self._start(self.syncer.run_long_poll(self.settings.long_poll_wait_sec))
        try:
            yield
        finally:
            for task in self._tasks:
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)
            self._tasks.clear()
            await self.source.aclose()

    async def _first_bundle(self) -> None:
        """Serve the newest valid local bundle at once (the trainer may be down), then ask the source: in
        the background when something is serving already, else waiting up to INITIAL_SYNC_MAX_S."""
        if await self.syncer.serve_local():
            self._start(self.syncer.sync_once())
            return
        try:
            await asyncio.wait_for(self.syncer.sync_once(), timeout=min(self.settings.http_timeout,
                                                                         INITIAL_SYNC_MAX_S))
        except TimeoutError:
            self.holder.sync_failed("initial sync timed out")

    def _start(self, coro: Any) -> None:
        task = asyncio.create_task(coro)
        task.add_done_callback(_log_crash)
        self._tasks.append(task)

    def routes(self) -> list[Route]:
        return [
            Route("/predict", self.predict, methods=["POST"]),
            Route("/predict/bulk", self.predict_bulk, methods=["POST"]),
            Route("/predict/bulk/strict", self.predict_bulk_strict, methods=["POST"]),
            Route("/status", self.status, methods=["GET"]),
            Route("/reload", self.reload, methods=["POST"]),
            Route("/healthz", self.healthz, methods=["GET"]),
            Route("/readyz", self.readyz, methods=["GET"]),
            Route("/", self.root, methods=["GET"]),
            Route("/metrics", self.metrics_endpoint, methods=["GET"]),
            Route("/openapi.json", self.openapi_endpoint, methods=["GET"]),
        ]


def _log_crash(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("sync task stopped: %r", task.exception())


def create_app(settings: PredictorSettings, source: BundleSource | None = None) -> Starlette:
    """Build the ASGI app; the sync loops run inside its lifespan. A route that ``predictor.access`` does not
    declare fails here and at start-up (``shared.auth.RouteAccessError``)."""
    state = PredictorApp(settings, source)
    app = Starlette(routes=state.routes(), lifespan=state.lifespan, exception_handlers=dict(HANDLERS),  # type: ignore[arg-type]
                    middleware=access.middleware(settings, state.tokens, state.metrics.count_auth))
    access.check(app.routes)
    app.state.predictor = state
    return app


def app_from_env() -> Starlette:
    """``uvicorn --factory predictor.app:app_from_env`` (settings from the environment, built at start-up)."""
    return create_app(PredictorSettings.from_env())
