"""Predictor client: one ``POST /predict/bulk/strict`` per decision (all candidates), concurrent
decisions coalesced into one call, rotated over the pool's predictor URLs.

Each caller waits at most until its own deadline; late, failed or malformed answers raise
:class:`PredictionUnavailable` with the fallback reason (``timeout``, ``error``, ``status``,
``decode``, ``closed``). A URL that failed is skipped for ``backoff_s`` while others are healthy.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import httpx
import orjson

from router_client.errors import PredictionUnavailable

Prediction = tuple[float, float]
_Result = list[Prediction] | PredictionUnavailable
_HEADERS = {"content-type": "application/json"}


@dataclass(slots=True)
class _Waiter:
    rows: Sequence[dict[str, Any]]
    future: asyncio.Future[_Result]


def parse_predictions(body: bytes, expected: int) -> list[Prediction]:
    """``(ttft_ms, tpot_ms)`` per row from a strict bulk response; ``PredictionUnavailable("decode")``."""
    try:
        preds = orjson.loads(body)["predictions"]
        out = [(float(p["ttft_ms"]), float(p["tpot_ms"])) for p in preds]
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
        raise PredictionUnavailable("decode", f"bad bulk response: {exc!r}") from None
    if len(out) != expected:
        raise PredictionUnavailable("decode", f"{len(out)} predictions for {expected} rows")
    if not all(math.isfinite(a) and math.isfinite(b) and a >= 0 and b >= 0 for a, b in out):
        raise PredictionUnavailable("decode", "negative or non-finite prediction")
    return out


class PredictorClient:
    def __init__(self, http: httpx.AsyncClient, urls: Sequence[str], *, timeout_s: float, window_s: float,
                 max_rows: int, backoff_s: float, clock: Callable[[], float]) -> None:
        if not urls:
            raise ValueError("PredictorClient needs at least one URL")
        self._http = http
        self._urls = [u.rstrip("/") + "/predict/bulk/strict" for u in urls]
        self._timeout_s = timeout_s
        self._window_s = window_s
        self._max_rows = max_rows
        self._backoff_s = backoff_s
        self._clock = clock
        self._down_until = [0.0] * len(self._urls)
        self._next = 0
        self._pending: list[_Waiter] = []
        self._pending_rows = 0
        self._timer: asyncio.TimerHandle | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self.calls = 0
        """Bulk HTTP calls made (coalescing shows as calls < decisions)."""

    async def predict(self, rows: Sequence[dict[str, Any]], deadline: float) -> list[Prediction]:
        """Predictions for ``rows`` in order, or ``PredictionUnavailable`` at ``deadline`` (monotonic s)."""
        if not rows:
            return []
        loop = asyncio.get_running_loop()
        waiter = _Waiter(rows, loop.create_future())
        self._enqueue(waiter, loop)
        remaining = deadline - self._clock()
        if remaining <= 0:
            raise PredictionUnavailable("timeout", "budget spent before the call")
        try:
            result = await asyncio.wait_for(asyncio.shield(waiter.future), remaining)
        except asyncio.TimeoutError:
            raise PredictionUnavailable("timeout", f"no predictions within {remaining * 1e3:.1f} ms") from None
        if isinstance(result, PredictionUnavailable):
            raise result
        return result

    def _enqueue(self, waiter: _Waiter, loop: asyncio.AbstractEventLoop) -> None:
        if self._pending and self._pending_rows + len(waiter.rows) > self._max_rows:
            self._flush()
        self._pending.append(waiter)
        self._pending_rows += len(waiter.rows)
        if self._window_s <= 0 or self._pending_rows >= self._max_rows:
            self._flush()
        elif self._timer is None:
            self._timer = loop.call_later(self._window_s, self._flush)

    def _flush(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        batch, self._pending, self._pending_rows = self._pending, [], 0
        if batch:
            task = asyncio.get_running_loop().create_task(self._send(batch))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    def _pick(self) -> int:
        now = self._clock()
        n = len(self._urls)
        for k in range(n):
            i = (self._next + k) % n
            if self._down_until[i] <= now:
                self._next = i + 1
                return i
        i = self._next % n
        self._next = i + 1
        return i

    async def _send(self, batch: list[_Waiter]) -> None:
        rows = [r for w in batch for r in w.rows]
        i = self._pick()
        self.calls += 1
        try:
            resp = await self._http.post(self._urls[i], content=orjson.dumps({"requests": rows}), headers=_HEADERS,
                                         timeout=self._timeout_s)
        except httpx.TimeoutException as exc:
            self._fail(batch, i, PredictionUnavailable("timeout", f"HTTP timeout: {exc!r}"))
            return
        except httpx.HTTPError as exc:
            self._fail(batch, i, PredictionUnavailable("error", f"HTTP error: {exc!r}"))
            return
        if resp.status_code != 200:
            self._fail(batch, i, PredictionUnavailable("status", f"HTTP {resp.status_code}"))
            return
        try:
            preds = parse_predictions(resp.content, len(rows))
        except PredictionUnavailable as exc:
            self._fail(batch, i, exc)
            return
        start = 0
        for w in batch:
            end = start + len(w.rows)
            if not w.future.done():
                w.future.set_result(preds[start:end])
            start = end

    def _fail(self, batch: list[_Waiter], url_index: int, exc: PredictionUnavailable) -> None:
        self._down_until[url_index] = self._clock() + self._backoff_s
        for w in batch:
            if not w.future.done():
                w.future.set_result(exc)

    async def aclose(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        for w in self._pending:
            if not w.future.done():
                w.future.set_result(PredictionUnavailable("closed"))
        self._pending = []
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
