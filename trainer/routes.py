"""The llm-d training-server endpoints (contract §4). Thin: parse, call the service, shape."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from starlette.concurrency import run_in_threadpool
from starlette.responses import Response

from shared.errors import NotFound
from shared.features import MODEL_NAMES
from trainer import export, flush, metrics_view, predict, views
from trainer.http_errors import JSONBytesResponse
from trainer.idempotency import HEADER, check_key
from trainer.service import TrainerService
from trainer.xgb_dump import TreeDumps

REPLAYED = "Idempotent-Replayed"

def build_router(service: TrainerService) -> APIRouter:
    router = APIRouter(default_response_class=JSONBytesResponse)
    dumps = TreeDumps()

    @router.post("/add_training_data_bulk", status_code=202)
    async def add_training_data_bulk(request: Request, partial: bool = False) -> Response:
        key = check_key(request.headers.get(HEADER))
        body = await request.body()
        source = request.client.host if request.client else "unknown"
        result = await run_in_threadpool(service.ingestor.ingest, body, partial, key, source)
        content: dict[str, Any] = {"message": result.message}
        if partial:
            content.update(accepted=result.accepted, rejected=result.rejected)
        return JSONBytesResponse(content, status_code=202, headers={REPLAYED: "true"} if result.replayed else None)

    @router.get("/healthz")
    def healthz() -> Any:
        return {"status": "ok"}

    @router.get("/readyz")
    def readyz() -> Any:
        return views.readyz(service)

    @router.get("/")
    def root() -> Any:
        return views.root(service)

    @router.get("/model/download/info")
    def download_info() -> Any:
        return views.download_info(service)

    @router.get("/models/list")
    def models_list() -> Any:
        return views.models_list(service)

    @router.get("/model/export")
    def model_export() -> Response:
        return Response(export.export_tar_gz(service), media_type="application/gzip",
                        headers={"Content-Disposition": "attachment; filename=seed-model.tar.gz"})

    @router.get("/model/{name}/info")
    def model_info(name: str) -> Any:
        return views.model_info(service, name)

    @router.get("/model/{name}/download")
    def model_download(name: str) -> Response:
        path = views.artifact_path(service, name)
        return Response(path.read_bytes(), media_type="application/octet-stream",
                        headers={"Content-Disposition": f'attachment; filename="{path.name}"'})

    @router.get("/model/{name}/xgb/json")
    def xgb_json(name: str) -> Response:
        if name not in MODEL_NAMES:
            raise NotFound("Not Found")
        loaded = views.require_live(service)
        return Response(dumps.get(loaded, name), media_type="application/json")

    @router.post("/flush")
    async def flush_data(request: Request) -> Any:
        parsed = flush.parse_request(await request.body(), service.settings.max_json_depth, service.unknown)
        return await run_in_threadpool(flush.flush, service, parsed)

    @router.get("/data/status")
    def data_status() -> Any:
        return views.data_status(service)

    @router.get("/debug/prefix_distribution")
    def prefix_distribution() -> Any:
        return views.prefix_distribution(service)

    @router.post("/predict")
    async def predict_one(request: Request) -> Any:
        return predict.predict(service, await request.body())

    @router.get("/metrics")
    def metrics() -> Response:
        return Response(metrics_view.render(service), media_type=metrics_view.CONTENT_TYPE)

    return router


