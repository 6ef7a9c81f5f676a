"""The status page routes: ``GET /ui`` (HTML, refreshes itself) and ``GET /ui/data`` (the same data as JSON).

Both are read-only and open like ``/data/status`` (they expose scores and counts, never model bytes). The
handlers are plain ``def``: building the data predicts a few hundred rows, so it runs in the threadpool.
"""

from __future__ import annotations

from fastapi import APIRouter, Query
from starlette.responses import HTMLResponse, Response

from trainer.http_errors import JSONBytesResponse
from trainer.service import TrainerService
from trainer.ui_data import RECENT_ROWS, ui_data
from trainer.ui_page import render

MAX_RECENT = 5000


def build_ui_router(service: TrainerService) -> APIRouter:
    router = APIRouter()

    @router.get("/ui")
    def ui(refresh: int = Query(5, ge=0, le=3600), recent: int = Query(RECENT_ROWS, ge=0, le=MAX_RECENT)) -> Response:
        return HTMLResponse(render(ui_data(service, recent), refresh))

    @router.get("/ui/data")
    def data(recent: int = Query(RECENT_ROWS, ge=0, le=MAX_RECENT)) -> Response:
        return JSONBytesResponse(ui_data(service, recent))

    return router
