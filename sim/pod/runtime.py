"""A pod's engine thread: the simulated GPU, stepping in (scaled) real time.

Requests are handed over through a lock-protected inbox; each step's token emissions are delivered
to the asyncio side in one ``call_soon_threadsafe`` batch when the step's end time is reached, so
SSE chunks are paced by engine steps. The event loop never runs engine code beyond O(1) hand-overs
and scenario changes (:meth:`PodRuntime.apply_now`, all under the same lock).

Scenario events scheduled in :attr:`PodConfig.scenario` apply when the pod's virtual time (wall time
since start / ``time_scale``) reaches them; a step already running finishes at its old speed.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Any

from sim.engine import Engine, Sequence, StepResult
from sim.engine.kv_transfer import IngressLink, RemoteKV
from sim.pod.config import PodConfig
from sim.pod.metrics import PodMetrics
from sim.pod.view import EngineView
from sim.scenario import PodChange, TimedEvent, apply_change, pod_condition


@dataclass(frozen=True)
class TokenEvent:
    index: int
    """1-based token number."""
    finish_reason: str | None
    """``"length"`` / ``"stop"`` on the last token, ``"abort"`` when the pod failed, else None."""
    error: str | None = None
    """Why the request was aborted (the pod failed), else None."""


class TokenSink:
    """The asyncio end of one request."""

    def __init__(self, loop: asyncio.AbstractEventLoop, length_limited: bool) -> None:
        self.loop = loop
        self.queue: asyncio.Queue[TokenEvent] = asyncio.Queue()
        self.length_limited = length_limited
        self.last_token_v = 0.0
        self.closed = False
        """Set when the request was lost; later token emissions are dropped."""
        self.remote: RemoteKV | None = None
        """A do_remote_prefill request's transfer (reported with its first token)."""


class PodRuntime:
    def __init__(self, cfg: PodConfig, metrics: PodMetrics) -> None:
        if cfg.time_scale <= 0:
            raise ValueError("time_scale must be > 0")
        self.cfg = cfg
        self.engine = Engine(cfg.engine)
        self.engine.kv_ingress = IngressLink(cfg.kv_link)
        self.metrics = metrics
        self._cond = threading.Condition()
        self._inbox: list[Sequence] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._t0 = time.monotonic()
        mine = [e for e in cfg.scenario if e.pod == cfg.pod_id]
        for ev in mine:
            ev.change.check(cfg.engine, f"scenario event {ev.index}")
        self._pending = deque(sorted(mine, key=lambda e: (e.at_s, e.index)))
        self.events: list[dict[str, Any]] = []
        """Scenario changes applied so far (scheduled or via the admin endpoint)."""

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

    def apply_now(self, change: PodChange) -> dict[str, Any]:
        """Apply ``change`` at the current virtual time (admin endpoint); return the new state."""
        with self._cond:
            self._apply(change, self.virtual_now(), "admin")
            self._cond.notify()
            return self._state()

    def scenario_state(self) -> dict[str, Any]:
        with self._cond:
            return self._state()

    def _state(self) -> dict[str, Any]:
        return {
            "pod": self.cfg.pod_id,
            "virtual_time_s": round(self.virtual_now(), 6),
            **pod_condition(self.engine),
            "events": list(self.events),
            "pending": [e.describe() for e in self._pending],
        }

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
                self._wait_for_work()
                if self._stop.is_set():
                    return
                self._apply_due()
                self._admit_inbox()
                res = self.engine.step()
            if res is None:
                self._stop.wait(0.001)
            else:
                delay = self._t0 + res.end * self.cfg.time_scale - time.monotonic()
                if delay > 0 and self._stop.wait(delay):
                    return
                self._publish(res)

    def _wait_for_work(self) -> None:
        while not self._stop.is_set() and not self._inbox and not self.engine.has_work():
            timeout = 0.5
            if self._pending:
                due = (self._pending[0].at_s - self.virtual_now()) * self.cfg.time_scale
                if due <= 0:
                    return
                timeout = min(timeout, due)
            self._cond.wait(timeout)

    def _apply_due(self) -> None:
        now = self.virtual_now()
        while self._pending and self._pending[0].at_s <= now:
            ev: TimedEvent = self._pending.popleft()
            self._apply(ev.change, now, f"scenario event {ev.index}")

    def _apply(self, change: PodChange, now: float, source: str) -> None:
        self._lose(apply_change(self.engine, change, now), now)
        if change.fail:
            self._drop_inbox(now)
        self.events.append({"at_s": round(now, 6), "source": source, **change.as_dict()})

    def _drop_inbox(self, now: float) -> None:
        for seq in self._inbox:
            seq.arrival = now
        self._lose(list(self._inbox), now)
        self._inbox.clear()

    def _lose(self, seqs: list[Sequence], now: float) -> None:
        """Tell the clients of ``seqs`` that the pod failed under them."""
        batches: dict[asyncio.AbstractEventLoop, list[tuple[TokenSink, TokenEvent]]] = {}
        for seq in seqs:
            sink: TokenSink = seq.payload
            sink.closed = True
            seq.finished, seq.finish_time = True, now
            self.metrics.observe_finished(seq, "abort")
            event = TokenEvent(seq.num_output, "abort", "the pod failed (scenario)")
            batches.setdefault(sink.loop, []).append((sink, event))
        _send(batches)

    def _admit_inbox(self) -> None:
        """Sync the engine clock with the wall clock (tolerating ``max_lag_s`` of lag) and admit."""
        now = self.virtual_now()
        engine = self.engine
        if engine.failed:
            self._drop_inbox(now)
            return
        if engine.has_work():
            engine.clock = max(engine.clock, now - self.cfg.max_lag_s / self.cfg.time_scale)
        for seq in self._inbox:
            at = min(now, engine.clock) if engine.has_work() else now
            if seq.remote is None:
                engine.add(seq, at)
            else:  # a do_remote_prefill request (sim/pod/transfer.py): its KV comes over the ingress link
                engine.add_remote(seq, at, seq.remote)
        self._inbox.clear()

    def _publish(self, res: StepResult) -> None:
        batches: dict[asyncio.AbstractEventLoop, list[tuple[TokenSink, TokenEvent]]] = {}
        finished = set(map(id, res.finished))
        for seq in res.emitted:
            sink: TokenSink = seq.payload
            if sink.closed:
                continue
            reason = None
            if id(seq) in finished:
                reason = "length" if sink.length_limited else "stop"
            if seq.num_output == 1:
                self.metrics.observe_first_token(res.end - seq.arrival)
                if sink.remote is not None and sink.remote.transfer_s is not None:
                    self.metrics.observe_transfer(sink.remote.transfer_s, sink.remote.nbytes)
            else:
                self.metrics.observe_token_gap(res.end - sink.last_token_v)
            sink.last_token_v = res.end
            batches.setdefault(sink.loop, []).append((sink, TokenEvent(seq.num_output, reason)))
        for seq in res.finished:
            if not seq.payload.closed:
                self.metrics.observe_finished(seq, "length" if seq.payload.length_limited else "stop")
        _send(batches)


def _send(batches: dict[asyncio.AbstractEventLoop, list[tuple[TokenSink, TokenEvent]]]) -> None:
    for loop, batch in batches.items():
        if not loop.is_closed():
            loop.call_soon_threadsafe(_deliver, batch)


def _deliver(batch: list[tuple[TokenSink, TokenEvent]]) -> None:
    for sink, event in batch:
        sink.queue.put_nowait(event)
