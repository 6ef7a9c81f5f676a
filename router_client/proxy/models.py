"""``GET /v1/models``: the union of the pods' model lists (cached briefly), or a configured name."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from typing import Any

import httpx
import orjson


class ModelCatalog:
    """Asks every pod (``pods()``: the pools' pods at that moment) for ``/v1/models`` at most once per ``ttl_s``;
    unreachable pods are skipped."""

    def __init__(self, client: httpx.AsyncClient, pods: Callable[[], Sequence[str]], served_name: str | None = None,
                 ttl_s: float = 10.0, timeout_s: float = 1.0, clock: Callable[[], float] = time.monotonic) -> None:
        self._client = client
        self._pods = pods
        self._served_name = served_name
        self._ttl_s = ttl_s
        self._timeout_s = timeout_s
        self._clock = clock
        self._cached: dict[str, Any] | None = None
        self._cached_at = 0.0

    async def listing(self) -> dict[str, Any]:
        if self._served_name is not None:
            return {"object": "list", "data": [_card(self._served_name)]}
        now = self._clock()
        if self._cached is None or now - self._cached_at > self._ttl_s:
            self._cached = await self._collect()
            self._cached_at = now
        return self._cached

    async def _collect(self) -> dict[str, Any]:
        answers = await asyncio.gather(*(self._one(pod) for pod in self._pods()))
        seen: dict[str, dict[str, Any]] = {}
        for cards in answers:
            for card in cards:
                seen.setdefault(str(card["id"]), card)
        return {"object": "list", "data": list(seen.values())}

    async def _one(self, pod: str) -> list[dict[str, Any]]:
        try:
            resp = await self._client.get(pod + "/v1/models", timeout=self._timeout_s)
        except httpx.HTTPError:
            return []
        if resp.status_code != 200:
            return []
        try:
            data = orjson.loads(resp.content).get("data")
        except (orjson.JSONDecodeError, AttributeError):
            return []
        return [c for c in data if isinstance(c, dict) and "id" in c] if isinstance(data, list) else []


def _card(name: str) -> dict[str, Any]:
    return {"id": name, "object": "model", "created": 0, "owned_by": "latency-router"}
