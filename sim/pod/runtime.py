"""A pod's engine thread: the simulated GPU, stepping in (scaled) real time.

Requests are handed over through a lock-protected inbox; each step's token emissions are delivered
to the asyncio side in one ``call_soon_threadsafe`` batch when the step's end time is reached, so
SSE chunks are paced by engine steps. The event loop never runs engine code.
"""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass

from sim.engine import Engine, Sequence, StepResult
from sim.pod.config import PodConfig
from sim.pod.metrics import PodMetrics
from sim.pod.view import EngineView


@dataclass(frozen=True)
class TokenEvent:
    index: int
    """1-based token number."""
    finish_reason: str | None
    """``"length"`` / ``"stop"`` on the last token, else None."""


class TokenSink:
    """The asyncio end of one request."""

    def __init__(self, loop: asyncio.AbstractEventLoop, length_limited: bool) -> None:
        self.loop = loop
        self.queue: asyncio.Queue[TokenEvent] = asyncio.Queue()
        self.length_limited = length_limited
        self.last_token_v = 0.0


class PodRuntime:
    def __init__(self, cfg: PodConfig, metrics: PodMetrics) -> None:
        if cfg.time_scale <= 0:
            raise ValueError("time_scale must be > 0")
        self.cfg = cfg
        self.engine = Engine(cfg.engine)
        self.metrics = metrics
        self._cond = threading.Condition()
        self._inbox: list[Sequence] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._t0 = time.monotonic()

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self) -> None:
        self._t0 = time.monotonic()
        self._thread = threading.Thread(target=self._run, name="sim-pod-engine", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 5.0) -> None:
        self._stop.set()
        with self._cond:
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout_s)

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    # -- called from the event loop ------------------------------------------------------------
    def submit(self, seq: Sequence) -> None:
        with self._cond:
            self._inbox.append(seq)
            self._cond.notify()

    def abort(self, seq: Sequence) -> None:
        with self._cond:
            if seq in self._inbox:
                self._inbox.remove(seq)
            else:
                self.engine.abort(seq)

    def queue_depth(self) -> int:
        with self._cond:
            return len(self._inbox) + len(self.engine.waiting)

    def view(self) -> EngineView:
        with self._cond:
            e = self.engine
            return EngineView(
                len(e.waiting) + len(self._inbox), len(e.running), e.kv_usage, e.stats.preemptions,
                e.stats.prefix_queries, e.stats.prefix_hits,
            )

    # -- engine thread -------------------------------------------------------------------------
    def virtual_now(self) -> float:
        return (time.monotonic() - self._t0) / self.cfg.time_scale

    def _run(self) -> None:
        while not self._stop.is_set():
            with self._cond:
                while not self._stop.is_set() and not self._inbox and not self.engine.has_work():
                    self._cond.wait(0.5)
                if self._stop.is_set():
                    return
                self._admit_inbox()
                res = self.engine.step()
            if res is None:
                self._stop.wait(0.001)
            else:
                delay = self._t0 + res.end * self.cfg.time_scale - time.monotonic()
                if delay > 0 and self._stop.wait(delay):
                    return
                self._publish(res)

    def _admit_inbox(self) -> None:
        """Sync the engine clock with the wall clock (tolerating ``max_lag_s`` of lag) and admit."""
        now = self.virtual_now()
        engine = self.engine
        if engine.has_work():
            engine.clock = max(engine.clock, now - self.cfg.max_lag_s / self.cfg.time_scale)
        for seq in self._inbox:
            engine.add(seq, min(now, engine.clock) if engine.has_work() else now)
        self._inbox.clear()

    def _publish(self, res: StepResult) -> None:
        batches: dict[asyncio.AbstractEventLoop, list[tuple[TokenSink, TokenEvent]]] = {}
        finished = set(map(id, res.finished))
        for seq in res.emitted:
            sink: TokenSink = seq.payload
            reason = None
            if id(seq) in finished:
                reason = "length" if sink.length_limited else "stop"
            if seq.num_output == 1:
                self.metrics.observe_first_token(res.end - seq.arrival)
            else:
                self.metrics.observe_token_gap(res.end - sink.last_token_v)
            sink.last_token_v = res.end
            batches.setdefault(sink.loop, []).append((sink, TokenEvent(seq.num_output, reason)))
        for seq in res.finished:
            self.metrics.observe_finished(seq, "length" if seq.payload.length_limited else "stop")
        for loop, batch in batches.items():
            if not loop.is_closed():
                loop.call_soon_threadsafe(_deliver, batch)


def _deliver(batch: list[tuple[TokenSink, TokenEvent]]) -> None:
    for sink, event in batch:
        sink.queue.put_nowait(event)
