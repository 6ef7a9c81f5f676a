"""Each pool's live models as its predictors serve them: a background read of a predictor's ``GET /status``.

Every ``model_status.interval_s`` seconds one background loop asks each pool with predictors for its bundle — the
first of ``predictor_urls`` that answers within ``timeout_s`` — and keeps what it said: version, prior, creation
time and per model the configuration chosen (``candidate``) and the physical base (coefficient per term in ms per
unit, rows, source; ``shared.base``). The answer replaces the pool's snapshot (``status``: the proxy's ``/status``
carries it per pool); a new version, or the same version with other models, is appended to the pool's history (the
newest ``history`` kept; ``history``: the status page plots the coefficients over time from it).

Never on the request path, never raising: a failed read (no answer, an error status, a body that is not a
predictor's status) keeps the last snapshot, is counted (``errors``) with its reason (``last_error``, cleared by
the next good read) and logged once when a pool's reads start failing and once when they work again.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import httpx
import orjson

from router_client.background import BackgroundLoop
from router_client.config import ModelStatusConfig

log = logging.getLogger(__name__)
PATH = "/status"


class StatusUnreadable(ValueError):
    """A predictor's ``/status`` could not be read or is not one."""


def _base(doc: Any) -> dict[str, Any] | None:
    """``{"coefficients": {term: ms per unit}, "rows", "source"}`` of a model entry's ``base`` (None: none)."""
    if doc is None:
        return None
    terms, coefficients = doc.get("terms"), doc.get("coefficients")
    if (not isinstance(terms, list) or not isinstance(coefficients, list) or len(terms) != len(coefficients)
            or not all(isinstance(t, str) for t in terms)
            or not all(isinstance(c, int | float) and not isinstance(c, bool) and math.isfinite(c) and c >= 0
                        for c in coefficients)):
        raise StatusUnreadable(f"base is not terms with as many finite coefficients >= 0: {doc!r:.200}")
    rows, source = doc.get("rows", 0), doc.get("source", "")
    if not isinstance(rows, int) or not isinstance(source, str):
        raise StatusUnreadable(f"base rows / source are not an integer / a string: {rows!r}, {source!r:.50}")
    return {"coefficients": {t: float(c) for t, c in zip(terms, coefficients, strict=True)}, "rows": rows,
            "source": source}


def parse_bundle(body: bytes) -> dict[str, Any] | None:
    """The ``bundle`` of a predictor's ``/status`` body — version, prior, created_at and per model its candidate and
    base — or None before it loaded one; :class:`StatusUnreadable` for anything else."""
    try:
        doc = orjson.loads(body)
        bundle = doc["bundle"]
        if bundle is None:
            return None
        version, models = bundle["version"], bundle.get("models", {})
        if not isinstance(version, int) or not isinstance(models, dict):
            raise StatusUnreadable(f"bundle version {version!r:.50} or models is not an integer / an object")
        return {"version": version, "prior": bool(bundle.get("prior", False)), "created_at": bundle.get("created_at"),
                "models": {str(name): {"candidate": str(entry.get("candidate", "")), "base": _base(entry.get("base"))}
                           for name, entry in models.items()}}
    except (orjson.JSONDecodeError, KeyError, TypeError, AttributeError) as exc:
        raise StatusUnreadable(f"not a predictor status: {type(exc).__name__}: {exc}") from None


class _Pool:
    """One pool's snapshot, history and read errors."""

    def __init__(self, urls: Sequence[str], history: int) -> None:
        self.urls = [u.rstrip("/") for u in urls]
        self.history: deque[dict[str, Any]] = deque(maxlen=history)
        self.snapshot: dict[str, Any] = {"url": None, "read_at": None, "bundle": None, "errors": 0,
                                         "last_error": None}

    def read(self, url: str, bundle: dict[str, Any] | None, at: float) -> None:
        self.snapshot = {**self.snapshot, "url": url, "read_at": at, "bundle": bundle, "last_error": None}
        last = self.history[-1] if self.history else None
        if bundle is not None and (last is None or (last["version"], last["models"]) != (bundle["version"],
                                                                                          bundle["models"])):
            self.history.append({"at": at, **bundle})

    def failed(self, error: str) -> None:
        self.snapshot = {**self.snapshot, "errors": self.snapshot["errors"] + 1, "last_error": error}


class ModelWatch:
    """``start(http)`` / ``await stop()`` around the background reads; ``status(pool)`` and ``history(pool)`` for the
    status documents. ``pools``: pool name → its predictor URLs (pools without any are not read)."""

    def __init__(self, pools: Mapping[str, Sequence[str]], cfg: ModelStatusConfig,
                 clock: Callable[[], float] = time.time) -> None:
        self._pools = {name: _Pool(urls, cfg.history) for name, urls in pools.items() if urls}
        self._cfg = cfg
        self._clock = clock
        self._http: httpx.AsyncClient | None = None
        self._loop = BackgroundLoop("router-model-watch", self.read_all, cfg.interval_s)

    def start(self, http: httpx.AsyncClient) -> None:
        self._http = http
        if self._pools:
            self._loop.start()

    async def stop(self) -> None:
        await self._loop.stop()

    async def read_all(self) -> None:
        """Read every pool once (concurrently)."""
        await asyncio.gather(*(self._read_pool(pool) for pool in self._pools.values()))

    async def _read_pool(self, pool: _Pool) -> None:
        errors = []
        for url in pool.urls:
            try:
                bundle = await self._read(url)
            except StatusUnreadable as exc:
                errors.append(f"{url}: {exc}")
                continue
            if pool.snapshot["last_error"] is not None:
                log.info("predictor status readable again at %s (%d failed reads)", url, pool.snapshot["errors"])
            pool.read(url, bundle, self._clock())
            return
        if pool.snapshot["last_error"] is None:
            log.warning("predictor status unreadable (the pool's last models are kept): %s", "; ".join(errors))
        pool.failed("; ".join(errors))

    async def _read(self, url: str) -> dict[str, Any] | None:
        if self._http is None:
            raise StatusUnreadable("not started")
        try:
            response = await self._http.get(url + PATH, timeout=self._cfg.timeout_s)
        except httpx.HTTPError as exc:
            raise StatusUnreadable(f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__) from None
        if response.status_code != 200:
            raise StatusUnreadable(f"HTTP {response.status_code}")
        return parse_bundle(response.content)

    def status(self, pool: str) -> dict[str, Any] | None:
        """What the pool's predictor said last (``bundle``: None before a read or its first bundle), where, when
        (``read_at``, epoch s) and the failed reads (``errors``, ``last_error``); None for a pool without
        predictors."""
        found = self._pools.get(pool)
        return None if found is None else found.snapshot

    def history(self, pool: str) -> list[dict[str, Any]]:
        """Every distinct bundle read, oldest first: ``at`` (epoch s, first read) and the bundle as in ``status``."""
        found = self._pools.get(pool)
        return [] if found is None else list(found.history)
