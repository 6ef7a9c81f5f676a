"""The trainer ⇄ predictor pull API (docs/internal-contracts.md).

* ``GET /bundle/manifest`` → the live manifest.json bytes, ``ETag: "v<version>"``,
  ``X-Bundle-Version``, ``X-Manifest-SHA256`` (hex sha256 of the body; the predictor checks it);
  ``If-None-Match`` equal to the live ETag → 304. With ``wait_s`` (≤ 30)
  and a matching ``If-None-Match`` the request is held until a new version is published
  (→ 200) or the wait ends (→ 304): the cheap notify path.
* ``GET /bundle/v/{version}/{filename}`` → the file of any version still on disk, else 404.
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.responses import Response

from shared.bundle import sha256
from shared.errors import NotFound
from trainer.service import TrainerService
from trainer.views import require_live

MAX_WAIT_S = 30.0
MANIFEST_SHA_HEADER = "X-Manifest-SHA256"


def etag(version: int) -> str:
    return f'"v{version}"'


def _matches(if_none_match: str | None, version: int) -> bool:
    if not if_none_match:
        return False
    tags = {t.strip().removeprefix("W/") for t in if_none_match.split(",")}
    return etag(version) in tags or "*" in tags


def build_pull_router(service: TrainerService) -> APIRouter:
    router = APIRouter()

    @router.get("/bundle/manifest")
    async def manifest(request: Request, wait_s: float = 0.0) -> Response:
        loaded = require_live(service)
        if_none_match = request.headers.get("if-none-match")
        wait = min(max(wait_s, 0.0), MAX_WAIT_S)
        if wait > 0 and _matches(if_none_match, loaded.version):
            await service.live.wait_change(loaded.version, wait, request.is_disconnected)
            loaded = require_live(service)
        headers = {"ETag": etag(loaded.version), "X-Bundle-Version": str(loaded.version),
                   "Cache-Control": "no-cache"}
        if _matches(if_none_match, loaded.version):
            return Response(status_code=304, headers=headers)
        manifest = loaded.bundle.manifest_bytes
        headers[MANIFEST_SHA_HEADER] = sha256(manifest)
        return Response(manifest, media_type="application/json", headers=headers)

    @router.get("/bundle/v/{version}/{filename}")
    def bundle_file(version: int, filename: str) -> Response:
        path = service.publisher.path_of(version, filename)
        if path is None:
            raise NotFound(f"File {filename} of bundle v{version} not found")
        return Response(path.read_bytes(), media_type="application/octet-stream",
                        headers={"X-Bundle-Version": str(version)})

    return router
