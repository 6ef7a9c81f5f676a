"""Where bundles come from: the trainer's pull API (HTTP) or a shared bundle directory.

A source answers two questions. ``poll(seen, wait_s)``: is something other than ``seen`` (an
ETag, ``"v<version>"``) published? — cheap, and with ``wait_s`` it may wait for a change (HTTP
long-poll, or re-reading ``CURRENT``). ``fetch(offer)``: the verified ``Bundle`` (every sha256,
the manifest's own sha256 — ``X-Manifest-SHA256`` / ``CURRENT`` — and the HMAC when a key is
configured). ``SourceUnavailable`` means "could not ask" (trainer down: only staleness grows);
``BundleError`` means "asked, and the bundle is bad" (refused).

Both sources also keep bundles on local disk that the predictor can serve without asking anyone
(``local_versions`` / ``read_local``): the pull source keeps every verified download in
``LOCAL_MODEL_DIR`` (with its manifest sha256), the directory source *is* local. At start-up the
newest valid one is served at once, so a restart while the trainer is down is ready in seconds.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import httpx

from predictor.holder import version_tag
from shared.auth import TokenSource
from shared.bundle import (
    MANIFEST_SHA,
    Bundle,
    check_manifest_sha,
    current_version,
    fallback_order,
    manifest_files,
    manifest_version,
    read_bundle,
    read_version,
    sha256,
    verify_bundle,
    version_dir,
    versions_on_disk,
)
from shared.errors import BundleError, LatencyError
from shared.keepalive import CLIENT_MAX_IDLE_S

log = logging.getLogger(__name__)

RETRY_STATUSES = frozenset({502, 503, 504})
RETRY_BACKOFF_S = 0.2
MANIFEST_SHA_HEADER = "X-Manifest-SHA256"
AUTH_HINT = {401: " (the trainer wants a token: set LATENCY_READ_TOKEN)", 403: " (LATENCY_READ_TOKEN is wrong)"}


class SourceUnavailable(LatencyError):
    """The bundle source could not be reached or answered unexpectedly (not the bundle's fault)."""

    status = 503


@dataclass(frozen=True)
class Offer:
    """A published bundle the predictor has not processed yet."""

    tag: str
    version: int | None
    manifest_bytes: bytes = b""
    manifest_sha: str | None = None
    """The sha256 the trainer announced for the manifest (``X-Manifest-SHA256``), checked before use."""


class BundleSource(Protocol):
    location: str
    local_is_published: bool
    """True when the local bundles are the published ones (a refused local version is refused upstream too)."""

    async def poll(self, seen: str | None, wait_s: float = 0.0) -> Offer | None: ...

    async def fetch(self, offer: Offer) -> Bundle: ...

    def local_versions(self) -> list[int]: ...

    async def read_local(self, version: int) -> Bundle: ...

    async def aclose(self) -> None: ...


class BundleDirSource:
    """Bundles written by the trainer into a shared volume (``shared.bundle`` layout)."""

    local_is_published = True

    def __init__(self, root: Path, key: bytes | None, watch_interval_s: float = 0.25) -> None:
        self.root = root
        self.location = f"file://{root}"
        self._key = key
        self._interval = watch_interval_s

    async def poll(self, seen: str | None, wait_s: float = 0.0) -> Offer | None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait_s
        while True:
            if not self.root.is_dir():
                raise SourceUnavailable(f"bundle directory {self.root} does not exist")
            version = current_version(self.root)
            if version is not None and version_tag(version) != seen:
                return Offer(version_tag(version), version)
            if loop.time() >= deadline:
                return None
            await asyncio.sleep(self._interval)

    async def fetch(self, offer: Offer) -> Bundle:
        assert offer.version is not None
        return await self.read_local(offer.version)

    def local_versions(self) -> list[int]:
        return fallback_order(self.root)

    async def read_local(self, version: int) -> Bundle:
        return await asyncio.to_thread(read_version, self.root, version, self._key)

    async def aclose(self) -> None:
        return None


class HttpPullSource:
    """The trainer's pull API (docs/internal-contracts.md): manifest with ETag/304/``wait_s``, then each file."""

    local_is_published = False

    def __init__(self, base_url: str, local_dir: Path, key: bytes | None, *, timeout_s: float = 30.0,
                 retries: int = 3, keep: int = 2, token: TokenSource | None = None,
                 max_idle_s: float = CLIENT_MAX_IDLE_S) -> None:
        self.location = base_url.rstrip("/")
        self._local = local_dir
        self._key = key
        self._timeout = timeout_s
        self._retries = retries
        self._keep = keep
        self._token = token
        # a pooled connection idle longer than max_idle_s is dropped, never reused: the trainer must not close it first
        self._client = httpx.AsyncClient(base_url=self.location, timeout=timeout_s,
                                         limits=httpx.Limits(max_connections=100, max_keepalive_connections=20,
                                                             keepalive_expiry=max_idle_s))

    def _headers(self, extra: dict[str, str] | None) -> dict[str, str]:
        auth = self._token.header() if self._token is not None else {}
        return {**auth, **(extra or {})}

    async def _get(self, path: str, *, headers: dict[str, str] | None = None,
                   params: dict[str, str] | None = None, timeout: float | None = None) -> httpx.Response:
        for attempt in range(self._retries + 1):
            try:
                response = await self._client.get(path, headers=self._headers(headers), params=params,
                                                   timeout=timeout or self._timeout)
            except httpx.HTTPError as exc:
                raise SourceUnavailable(f"GET {path}: {type(exc).__name__}: {exc}") from None
            if response.status_code not in RETRY_STATUSES or attempt == self._retries:
                return response
            await asyncio.sleep(RETRY_BACKOFF_S * (attempt + 1))
        raise AssertionError("unreachable")

    async def poll(self, seen: str | None, wait_s: float = 0.0) -> Offer | None:
        headers = {"If-None-Match": seen} if seen else None
        params = {"wait_s": f"{wait_s:g}"} if seen and wait_s > 0 else None
        response = await self._get("/bundle/manifest", headers=headers, params=params,
                                   timeout=self._timeout + (wait_s if params else 0.0))
        if response.status_code == 304:
            return None
        if response.status_code != 200:
            code = response.status_code
            raise SourceUnavailable(f"GET /bundle/manifest: HTTP {code}{AUTH_HINT.get(code, '')}")
        version = manifest_version(response.content)
        if version is not None:
            tag = version_tag(version)  # the pull API's ETag form; independent of weak/strong quoting
        else:
            tag = response.headers.get("etag") or f'"sha256:{sha256(response.content)}"'

        return Offer(tag, version, response.content, response.headers.get(MANIFEST_SHA_HEADER))

    async def fetch(self, offer: Offer) -> Bundle:
        check_manifest_sha(offer.manifest_bytes, offer.manifest_sha, f"the {MANIFEST_SHA_HEADER} header")
        names = manifest_files(offer.manifest_bytes)
        if offer.version is None:
            raise BundleError("manifest has no integer version")
        self._local.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=self._local))
        try:
            for name in names:
                response = await self._get(f"/bundle/v/{offer.version}/{name}")
                if response.status_code == 404:
                    raise BundleError(f"{name}: not served by the trainer (404)")
                if response.status_code != 200:
                    code = response.status_code
                    raise SourceUnavailable(f"GET {name}: HTTP {code}{AUTH_HINT.get(code, '')}")
                (tmp / name).write_bytes(response.content)
            (tmp / "manifest.json").write_bytes(offer.manifest_bytes)
            (tmp / MANIFEST_SHA).write_text(sha256(offer.manifest_bytes))
            bundle = await asyncio.to_thread(_verify_dir, tmp, offer.manifest_bytes, self._key)
            await asyncio.to_thread(self._keep_on_disk, tmp, offer.version)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return bundle

    def _keep_on_disk(self, tmp: Path, version: int) -> None:
        """Best effort: keep the verified copy as ``vNNNNNN`` (served at start-up when the trainer is away)."""
        target = version_dir(self._local, version)
        try:
            shutil.rmtree(target, ignore_errors=True)
            os.replace(tmp, target)
        except OSError as exc:
            log.warning("could not keep bundle v%d in %s: %s", version, self._local, exc)
            return
        for old in versions_on_disk(self._local)[self._keep:]:
            shutil.rmtree(version_dir(self._local, old), ignore_errors=True)

    def local_versions(self) -> list[int]:
        return versions_on_disk(self._local)

    async def read_local(self, version: int) -> Bundle:
        return await asyncio.to_thread(read_bundle, version_dir(self._local, version), self._key)

    async def aclose(self) -> None:
        await self._client.aclose()


def _verify_dir(path: Path, manifest_bytes: bytes, key: bytes | None) -> Bundle:
    return verify_bundle(manifest_bytes, lambda name: (path / name).read_bytes(), key)
