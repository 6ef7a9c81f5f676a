"""Where bundles come from: the trainer's pull API (HTTP) or a shared bundle directory.

A source answers two questions. ``poll(seen, wait_s)``: is something other than ``seen`` (an
ETag, ``"v<version>"``) published? — cheap, and with ``wait_s`` it may wait for a change (HTTP
long-poll, or re-reading ``CURRENT``). ``fetch(offer)``: the verified ``Bundle`` (every sha256,
and the HMAC when a key is configured). ``SourceUnavailable`` means "could not ask" (trainer
down: only staleness grows); ``BundleError`` means "asked, and the bundle is bad" (refused).
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
from shared.bundle import (
    Bundle,
    current_version,
    manifest_files,
    manifest_version,
    read_bundle,
    sha256,
    verify_bundle,
    version_dir,
)
from shared.errors import BundleError, LatencyError

log = logging.getLogger(__name__)

RETRY_STATUSES = frozenset({502, 503, 504})
RETRY_BACKOFF_S = 0.2


class SourceUnavailable(LatencyError):
    """The bundle source could not be reached or answered unexpectedly (not the bundle's fault)."""

    status = 503


@dataclass(frozen=True)
class Offer:
    """A published bundle the predictor has not processed yet."""

    tag: str
    version: int | None
    manifest_bytes: bytes = b""


class BundleSource(Protocol):
    location: str

    async def poll(self, seen: str | None, wait_s: float = 0.0) -> Offer | None: ...

    async def fetch(self, offer: Offer) -> Bundle: ...

    async def aclose(self) -> None: ...


class BundleDirSource:
    """Bundles written by the trainer into a shared volume (``shared.bundle`` layout)."""

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
        return await asyncio.to_thread(read_bundle, version_dir(self.root, offer.version), self._key)

    async def aclose(self) -> None:
        return None


class HttpPullSource:
    """The trainer's pull API (docs/internal-contracts.md): manifest with ETag/304/``wait_s``, then each file."""

    def __init__(self, base_url: str, local_dir: Path, key: bytes | None, *, timeout_s: float = 30.0,
                 retries: int = 3, keep: int = 2) -> None:
        self.location = base_url.rstrip("/")
        self._local = local_dir
        self._key = key
        self._timeout = timeout_s
        self._retries = retries
        self._keep = keep
        self._client = httpx.AsyncClient(base_url=self.location, timeout=timeout_s)

    async def _get(self, path: str, *, headers: dict[str, str] | None = None,
                   params: dict[str, str] | None = None, timeout: float | None = None) -> httpx.Response:
        for attempt in range(self._retries + 1):
            try:
                response = await self._client.get(path, headers=headers, params=params,
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
            raise SourceUnavailable(f"GET /bundle/manifest: HTTP {response.status_code}")
        version = manifest_version(response.content)
        if version is not None:
            tag = version_tag(version)  # the pull API's ETag form; independent of weak/strong quoting
        else:
            tag = response.headers.get("etag") or f'"sha256:{sha256(response.content)}"'

        return Offer(tag, version, response.content)

    async def fetch(self, offer: Offer) -> Bundle:
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
                    raise SourceUnavailable(f"GET {name}: HTTP {response.status_code}")
                (tmp / name).write_bytes(response.content)
            (tmp / "manifest.json").write_bytes(offer.manifest_bytes)
            bundle = await asyncio.to_thread(_verify_dir, tmp, offer.manifest_bytes, self._key)
            await asyncio.to_thread(self._keep_on_disk, tmp, offer.version)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return bundle

    def _keep_on_disk(self, tmp: Path, version: int) -> None:
        """Best effort: keep the verified copy as ``vNNNNNN`` for operators (serving never reads it)."""
        target = version_dir(self._local, version)
        try:
            shutil.rmtree(target, ignore_errors=True)
            os.replace(tmp, target)
        except OSError as exc:
            log.warning("could not keep bundle v%d in %s: %s", version, self._local, exc)
            return
        kept = sorted(p for p in self._local.glob("v[0-9]*") if p.is_dir())
        for old in kept[:-self._keep]:
            shutil.rmtree(old, ignore_errors=True)

    async def aclose(self) -> None:
        await self._client.aclose()


def _verify_dir(path: Path, manifest_bytes: bytes, key: bytes | None) -> Bundle:
    return verify_bundle(manifest_bytes, lambda name: (path / name).read_bytes(), key)
