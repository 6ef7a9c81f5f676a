"""Predictor client: one ``POST /predict/bulk/strict`` per decision (all candidates), concurrent
decisions coalesced into one call, rotated over the pool's predictor URLs.

Coalescing is opportunistic by default (``window_s == 0``): a decision whose client has no call in
flight is sent at once; decisions arriving while a call is in flight wait and are sent together,
in one call, when it returns (each call carries whatever queued up during the previous one, so the
batch size follows the load and a lone decision never waits). A call whose decisions have all
given up (deadline passed or cancelled) no longer holds the queue back. With ``window_s > 0`` the
first queued decision instead waits up to that window for company and calls may overlap. Rows of
the decisions in a call are concatenated and the answer is split back positionally; a call
succeeds or fails as a whole. A call never carries more than ``max_rows`` rows (one oversized
decision is sent alone).

Each caller waits at most until its own deadline; late, failed or malformed answers raise
:class:`PredictionUnavailable` with the fallback reason (``timeout``, ``error``, ``status``,
``decode``, ``closed``). A URL that failed is skipped for ``backoff_s`` while others are healthy.
HTTP goes through :mod:`router_client.http1` (keep-alive; ``http://`` or ``https://`` URLs, system trust store).
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import orjson

from router_client.errors import PredictionUnavailable, RouterConfigError
from router_client.http1 import ConnectFailed, Http1Error, Http1Exchange, Http1Pool
from shared.keepalive import CLIENT_MAX_IDLE_S


class Prediction(NamedTuple):
    """One row's answer: the primary quantile (the contract's ``ttft_ms`` / ``tpot_ms``) and, when the
    client asks for an admission quantile (``?quantiles=``), that quantile too (else ``None``)."""

    ttft_ms: float
    tpot_ms: float
    admit_ttft_ms: float | None = None
    admit_tpot_ms: float | None = None


_Result = list[Prediction] | PredictionUnavailable
_PATH = "/predict/bulk/strict"
_HEADERS = {"content-type": "application/json"}


class _Call:
    """One bulk call in flight: how many of its decisions still wait for it."""

    __slots__ = ("waiting", "live")

    def __init__(self, waiting: int) -> None:
        self.waiting = waiting
        self.live = True


class _Waiter:
    __slots__ = ("rows", "future", "call", "queued")

    def __init__(self, rows: Sequence[dict[str, Any]], future: asyncio.Future[_Result]) -> None:
        self.rows = rows
        self.future = future
        self.call: _Call | None = None
        self.queued = True
        """In ``_pending`` and counted in ``_pending_rows``."""


def _prediction(p: dict[str, Any], key: str | None) -> Prediction:
    if key is None:
        return Prediction(float(p["ttft_ms"]), float(p["tpot_ms"]))
    return Prediction(float(p["ttft_ms"]), float(p["tpot_ms"]), float(p["ttft_quantiles_ms"][key]),
                      float(p["tpot_quantiles_ms"][key]))


def parse_predictions(body: bytes, expected: int, quantile: float | None = None) -> list[Prediction]:
    """One :class:`Prediction` per row from a strict bulk response (with the ``quantile`` answers when asked);
    ``PredictionUnavailable("decode")`` for anything but ``expected`` finite, non-negative answers."""
    key = None if quantile is None else format(quantile, "g")
    try:
        out = [_prediction(p, key) for p in orjson.loads(body)["predictions"]]
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
        raise PredictionUnavailable("decode", f"bad bulk response: {exc!r}") from None
    if len(out) != expected:
        raise PredictionUnavailable("decode", f"{len(out)} predictions for {expected} rows")
    if not all(v is None or (math.isfinite(v) and v >= 0) for p in out for v in p):
        raise PredictionUnavailable("decode", "negative or non-finite prediction")
    return out


def _expire(waiter: _Waiter, budget_s: float) -> None:
    if not waiter.future.done():
        waiter.future.set_result(PredictionUnavailable("timeout", f"no predictions within {budget_s * 1e3:.1f} ms"))


class PredictorClient:
    """Bulk predictions for one pool. ``pool``: a shared :class:`Http1Pool`, or ``None`` to own one
    (closed by :meth:`aclose`; its connections idle longer than ``max_idle_s`` are not reused). Raises
    ``RouterConfigError`` for a URL that is not ``http(s)://host[:port]``."""

    def __init__(self, pool: Http1Pool | None, urls: Sequence[str], *, timeout_s: float, window_s: float,
                 max_rows: int, backoff_s: float, clock: Callable[[], float], quantile: float | None = None,
                 max_idle_s: float = CLIENT_MAX_IDLE_S) -> None:
        if not urls:
            raise ValueError("PredictorClient needs at least one URL")
        self._owns_pool = pool is None
        self._pool = Http1Pool(connect_timeout_s=timeout_s, max_idle_s=max_idle_s) if pool is None else pool
        self._urls = [u.rstrip("/") for u in urls]
        self._quantile = quantile
        path = _PATH if quantile is None else f"{_PATH}?quantiles={format(quantile, 'g')}"
        try:
            self._heads = [self._pool.request_head(u, "POST", path, _HEADERS) for u in self._urls]
        except ConnectFailed as exc:
            raise RouterConfigError(f"predictor URL: {exc}") from None
        self._timeout_s = timeout_s
        self._window_s = window_s
        self._max_rows = max_rows
        self._backoff_s = backoff_s
        self._clock = clock
        self._down_until = [0.0] * len(self._urls)
        self._next = 0
        self._pending: list[_Waiter] = []
        self._pending_rows = 0
        self._live = 0
        self._timer: asyncio.TimerHandle | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._closed = False
        self.calls = 0
        """Bulk HTTP calls made (coalescing shows as calls < decisions)."""

    async def predict(self, rows: Sequence[dict[str, Any]], deadline: float) -> list[Prediction]:
        """Predictions for ``rows`` in order, or ``PredictionUnavailable`` at ``deadline`` (monotonic s)."""
        if not rows:
            return []
        if self._closed:
            raise PredictionUnavailable("closed")
        remaining = deadline - self._clock()
        if remaining <= 0:
            raise PredictionUnavailable("timeout", "budget spent before the call")
        loop = asyncio.get_running_loop()
        waiter = _Waiter(rows, loop.create_future())
        timer = loop.call_later(remaining, _expire, waiter, remaining)
        self._enqueue(waiter)
        try:
            result = await waiter.future
        finally:
            timer.cancel()
            self._leave(waiter)
        if isinstance(result, PredictionUnavailable):
            raise result
        return result

    # -- batching ------------------------------------------------------------------------------
    def _enqueue(self, waiter: _Waiter) -> None:
        if self._pending and self._pending_rows + len(waiter.rows) > self._max_rows:
            self._flush()
        self._pending.append(waiter)
        self._pending_rows += len(waiter.rows)
        if self._pending_rows >= self._max_rows:
            self._flush()
        elif self._window_s > 0:
            if self._timer is None:
                self._timer = asyncio.get_running_loop().call_later(self._window_s, self._flush)
        elif self._live == 0:
            self._flush()

    def _leave(self, waiter: _Waiter) -> None:
        """A decision stopped waiting (answered, timed out or cancelled)."""
        if waiter.queued:  # still queued: its rows will not be sent
            waiter.queued = False
            self._pending_rows -= len(waiter.rows)
            return
        call = waiter.call
        if call is None:  # dropped from the queue by a flush or by aclose
            return
        call.waiting -= 1
        if call.waiting == 0 and call.live:
            self._retire(call)  # nobody waits for it any more: it must not hold the queue back

    def _retire(self, call: _Call) -> None:
        call.live = False
        self._live -= 1
        if self._live == 0 and self._pending and self._window_s <= 0:
            self._flush()

    def _flush(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        batch: list[_Waiter] = []
        rows = 0
        for w in self._pending:
            w.queued = False
            if w.future.done():
                continue  # gave up while queued
            if batch and rows + len(w.rows) > self._max_rows:
                self._start(batch, rows)
                batch, rows = [], 0
            batch.append(w)
            rows += len(w.rows)
        self._pending, self._pending_rows = [], 0
        if batch:
            self._start(batch, rows)

    def _start(self, batch: list[_Waiter], n_rows: int) -> None:
        """Encode and write the call now (on an idle keep-alive connection); a task awaits the answer."""
        call = _Call(len(batch))
        for w in batch:
            w.call = call
        self._live += 1
        self.calls += 1
        rows = batch[0].rows if len(batch) == 1 else [r for w in batch for r in w.rows]
        i = self._pick()
        try:
            body = orjson.dumps({"requests": rows})
        except orjson.JSONEncodeError as exc:
            failed = PredictionUnavailable("error", f"cannot encode rows: {exc}")
            for w in batch:
                w.future.set_result(failed)
            call.live = False  # never in flight; the caller (_flush) sends what is queued
            self._live -= 1
            return
        exchange = self._pool.start(self._urls[i], self._heads[i], body)
        task = asyncio.get_running_loop().create_task(self._send(batch, call, i, exchange, n_rows))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        task.add_done_callback(lambda _: exchange.abort())  # a task cancelled before it ran

    # -- HTTP --------------------------------------------------------------------------------
    def _pick(self) -> int:
        n = len(self._urls)
        if n == 1:
            return 0
        now = self._clock()
        for k in range(n):
            i = (self._next + k) % n
            if self._down_until[i] <= now:
                self._next = i + 1
                return i
        i = self._next % n
        self._next = i + 1
        return i

    async def _send(self, batch: list[_Waiter], call: _Call, i: int, exchange: Http1Exchange, n_rows: int) -> None:
        try:
            result = await self._exchange(exchange, n_rows)
        except BaseException:
            if call.live:
                self._retire(call)
            raise
        self._deliver(batch, call, i, result)

    def _deliver(self, batch: list[_Waiter], call: _Call, i: int, result: _Result) -> None:
        if isinstance(result, PredictionUnavailable):
            self._down_until[i] = self._clock() + self._backoff_s
            for w in batch:
                if not w.future.done():
                    w.future.set_result(result)
        elif len(batch) == 1:
            if not batch[0].future.done():
                batch[0].future.set_result(result)
        else:
            start = 0
            for w in batch:
                end = start + len(w.rows)
                if not w.future.done():
                    w.future.set_result(result[start:end])
                start = end
        if call.live:
            self._retire(call)  # answers first, then the next batch goes out

    async def _exchange(self, exchange: Http1Exchange, n_rows: int) -> _Result:
        try:
            async with asyncio.timeout(self._timeout_s):
                response = await exchange.response()
                try:
                    status, content = response.status_code, await response.read()
                finally:
                    await response.aclose()
        except TimeoutError:
            return PredictionUnavailable("timeout", f"HTTP timeout after {self._timeout_s * 1e3:.0f} ms")
        except Http1Error as exc:
            return PredictionUnavailable("error", f"HTTP error: {exc!r}")
        if status != 200:
            return PredictionUnavailable("status", f"HTTP {status}")
        try:
            return parse_predictions(content, n_rows, self._quantile)
        except PredictionUnavailable as exc:
            return exc

    async def aclose(self) -> None:
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        for w in self._pending:
            w.queued = False
            if not w.future.done():
                w.future.set_result(PredictionUnavailable("closed"))
        self._pending, self._pending_rows = [], 0
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._owns_pool:
            await self._pool.aclose()
