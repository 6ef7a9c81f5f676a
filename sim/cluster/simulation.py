"""Discrete-event cluster replay in virtual time.

Arrivals are processed in order. Before each routing decision every pod's engine runs all steps
that start before the arrival (decode runs jump in closed form), first-token / completion events
up to that instant update the router-side state, and the scraped metrics are refreshed if a scrape
tick passed. The policy then sees only :class:`PodSnapshot` objects.

Scenario events (:mod:`sim.scenario`) are applied at their virtual time: every pod first runs the
steps that start before it and the events up to it are delivered, then the change applies. A pod
that fails loses its queued and running requests (recorded with ``aborted = "pod_failed"``, no
completion callback) and is no candidate until it is restored.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from sim.cluster.config import POD_TYPES, ClusterConfig, PodPlan
from sim.cluster.policy import (
    Completion,
    Decision,
    PodSnapshot,
    Policy,
    RequestView,
    ScrapedMetrics,
)
from sim.cluster.router_state import InFlight, PrefixIndex
from sim.engine import FIRST_TOKEN, Engine, SimError, StepTimeModel
from sim.engine import Sequence as EngineSeq
from sim.scenario import Scenario, TimedEvent, apply_change


@dataclass(frozen=True)
class ReplayItem:
    view: RequestView
    output_tokens: int
    """True number of tokens the pod will generate."""


@dataclass
class RequestRecord:
    request_id: str
    arrival_s: float
    prompt_tokens: int
    output_tokens: int
    max_tokens: int | None = None
    pod_id: str | None = None
    pool: str | None = None
    pod_class: str | None = None
    shed_reason: str | None = None
    ttft_ms: float | None = None
    tpot_ms: float | None = None
    e2e_ms: float | None = None
    prefix_hit_fraction: float | None = None
    preemptions: int = 0
    predicted_ttft_ms: float | None = None
    predicted_tpot_ms: float | None = None
    aborted: str | None = None
    """Why the request was lost after dispatch (``pod_failed``), else None."""
    first_token_s: float | None = None
    """Virtual time of the first token (set when it is delivered, before completion)."""
    prefill_pod: str | None = None
    """P/D clusters: the pod that prefilled the prompt (``pod_id`` itself when not disaggregated)."""
    decode_pod: str | None = None
    """P/D clusters: the pod that decoded and streamed the tokens (= ``pod_id``)."""
    disaggregated: bool | None = None
    """P/D clusters: prefilled on a prefill pod and its KV shipped to the decode pod."""
    kv_transfer_ms: float | None = None
    """Disaggregated: from the decode pod's block allocation to the last KV byte (link queue + bytes / bandwidth
    + latency)."""
    kv_block_wait_ms: float | None = None
    """Disaggregated: from reaching the decode pod to its KV blocks being allocated (queue, no free blocks)."""


@dataclass
class PodResult:
    pod_id: str
    pool: str
    pod_class: str
    requests: int
    busy_s: float
    steps: int
    preemptions: int
    mean_kv_usage: float
    max_kv_usage: float
    prefix_hit_rate: float
    events: list[dict[str, object]] | None = None
    """Scenario events applied to this pod (None when the run had no scenario)."""


@dataclass
class ReplayResult:
    records: list[RequestRecord]
    samples: list[dict[str, float | int | str]]
    pods: list[PodResult]
    span_s: float
    extra: dict[str, object] = field(default_factory=dict)


@dataclass
class SimPod:
    """One pod of the replay: its engine, the metrics as last scraped and the router-side dispatches."""

    pod_id: str
    pool: str
    pod_class: str
    engine: Engine
    scraped: ScrapedMetrics
    dispatched: int = 0
    active: dict[str, _Dispatch] = field(default_factory=dict)
    """Dispatched and not completed, by request id."""
    events: list[dict[str, object]] = field(default_factory=list)
    routable: bool = True
    """False while a controller drains the pod or keeps it off (no routing candidate)."""
    tp: int = 1
    """GPUs of the pod (its tensor-parallel degree)."""
    role: str = ""
    """``prefill``, ``decode``, ``both`` or ``""`` (:data:`sim.cluster.config.ROLES`)."""


class Controller(Protocol):
    """Changes the cluster while it runs (e.g. an autoscaler): attached once, ticked before every dispatch
    (after the pods advanced and the events up to ``now`` were delivered), finished at the end."""

    def attach(self, pods: Sequence[SimPod], start_s: float) -> None: ...

    def tick(self, now: float) -> None: ...

    def finish(self, end_s: float) -> dict[str, object]: ...


@dataclass
class _Dispatch:
    item: ReplayItem
    pod: SimPod
    features: dict[str, float | int | str]
    uncached: int
    record: RequestRecord
    first_token_seen: bool = False
    aborted: bool = False


ProgressFn = Callable[[int, int, float], None]
StopFn = Callable[[float, Sequence["RequestRecord"]], bool]
"""Asked before every dispatch with the time and the records so far; True ends the replay there."""


def _context_needed(view: RequestView) -> int:
    """vLLM rejects ``prompt + max_tokens > max_model_len`` (and a prompt that leaves no room)."""
    return view.prompt_tokens + (view.max_output_tokens or 1)


class ClusterSimulation:
    def __init__(self, cfg: ClusterConfig, policy: Policy, seed: int = 0, scenario: Scenario | None = None,
                 controller: Controller | None = None) -> None:
        self.cfg = cfg
        self.policy = policy
        self.scenario = scenario
        self.controller = controller
        self.pods = [self._make_pod(plan, seed * 1009 + n) for n, plan in enumerate(cfg.pods())]
        self._by_id = {p.pod_id: p for p in self.pods}
        capacity = cfg.router_prefix_blocks or max(p.engine.pool.num_blocks for p in self.pods)
        self.prefix = PrefixIndex(list(self._by_id), capacity)
        self.in_flight = InFlight(list(self._by_id))
        self._events: list[tuple[float, int, int, EngineSeq]] = []
        self._event_no = 0
        self._last_tick = -math.inf
        self.records: list[RequestRecord] = []
        self.samples: list[dict[str, float | int | str]] = []
        if scenario is not None:
            scenario.check_pods({p.pod_id: p.engine.cfg for p in self.pods})
        bind = getattr(policy, "bind_pods", None)
        if callable(bind):  # an oracle (sim.policies.clairvoyant) reads the engines; router policies never do
            bind(self.pods)

    @staticmethod
    def _make_pod(plan: PodPlan, seed: int) -> SimPod:
        engine = Engine(plan.engine, StepTimeModel(plan.engine, seed=seed))
        return SimPod(plan.pod_id, plan.pool, plan.pod_class, engine, ScrapedMetrics(0, 0, 0.0, 0, 0.0),
                      tp=plan.engine.tensor_parallel_size, role=plan.role)

    def run(self, items: Sequence[ReplayItem], progress: ProgressFn | None = None,
            stop: StopFn | None = None) -> ReplayResult:
        """Replay ``items``; ``stop`` may end the replay early (the result's ``extra["stopped_at_s"]``)."""
        total = len(items)
        stopped_at: float | None = None
        pending: list[TimedEvent] = []
        if self.scenario is not None and items:
            pending = self.scenario.resolve(items[0].view.arrival_s, items[-1].view.arrival_s)[::-1]
        if self.controller is not None:
            self.controller.attach(self.pods, items[0].view.arrival_s if items else 0.0)
        for i, item in enumerate(items):
            t = item.view.arrival_s
            while pending and pending[-1].at_s <= t:
                self._apply_event(pending.pop())
            self._maybe_scrape(t)
            self._advance_all(t)
            self._drain(t)
            if self.controller is not None:
                self.controller.tick(t)
            if stop is not None and stop(t, self.records):
                stopped_at = t
                break
            self._dispatch(item, t)
            if progress is not None and (i % 256 == 0 or i == total - 1):
                progress(i + 1, total, t)
        if stopped_at is not None:
            result = self._result(items)
            result.extra["stopped_at_s"] = stopped_at
            return result
        while pending:
            self._apply_event(pending.pop())
        self._advance_all(math.inf)
        self._drain(math.inf)
        return self._result(items)

    # -- scenario ----------------------------------------------------------------------------
    def _apply_event(self, ev: TimedEvent) -> None:
        self._maybe_scrape(ev.at_s)
        self._advance_all(ev.at_s)
        self._drain(ev.at_s)
        pod = self._by_id[ev.pod]
        apply_change(pod.engine, ev.change, ev.at_s)
        pod.events.append(ev.describe())
        if ev.change.fail:
            self._abort_all(pod)

    def _abort_all(self, pod: SimPod) -> None:
        """Release the router-side state of every request lost with ``pod``."""
        for d in pod.active.values():
            d.aborted = True
            d.record.aborted = "pod_failed"
            if not d.first_token_seen:
                self.in_flight.first_token(pod.pod_id, d.uncached)
            self.in_flight.complete(pod.pod_id)
        pod.active.clear()

    # -- time --------------------------------------------------------------------------------
    def _maybe_scrape(self, t: float) -> None:
        interval = self.cfg.scrape_interval_s
        tick = t if interval <= 0 else math.floor(t / interval) * interval
        if tick <= self._last_tick:
            return
        self._advance_all(tick)
        for pod in self.pods:
            e = pod.engine
            pod.scraped = ScrapedMetrics(
                e.num_waiting, len(e.running), e.kv_usage, e.stats.preemptions, tick
            )
        self._last_tick = tick

    def _advance_all(self, t: float) -> None:
        ff = self.cfg.fast_forward
        for pod in self.pods:
            if pod.engine.has_work():
                for when, kind, seq in pod.engine.advance_until(t, ff):
                    self._event_no += 1
                    heapq.heappush(self._events, (when, self._event_no, kind, seq))

    def _drain(self, t: float) -> None:
        events = self._events
        while events and events[0][0] <= t:
            when, _, kind, seq = heapq.heappop(events)
            d: _Dispatch = seq.payload
            if not d.aborted:
                self._event(when, kind, seq, d)

    def _event(self, when: float, kind: int, seq: EngineSeq, d: _Dispatch) -> None:
        if kind == FIRST_TOKEN:
            d.first_token_seen = True
            d.record.first_token_s = when
            self.in_flight.first_token(d.pod.pod_id, d.uncached)
        else:
            self._complete(seq, d, when)

    # -- routing -----------------------------------------------------------------------------
    def _snapshots(self, view: RequestView) -> list[PodSnapshot]:
        out = []
        need = _context_needed(view)
        for pod in self.pods:
            max_len = pod.engine.cfg.max_model_len
            if need > max_len or pod.engine.failed or not pod.routable:
                continue
            out.append(
                PodSnapshot(
                    pod.pod_id,
                    pod.pool,
                    max_len,
                    pod.scraped,
                    self.in_flight.requests[pod.pod_id],
                    self.in_flight.prefill_tokens[pod.pod_id],
                    self.prefix.score(pod.pod_id, view.block_hashes),
                    pod_type=POD_TYPES.get(pod.role, ""),
                    pod_class=pod.pod_class,
                )
            )
        return out

    def _dispatch(self, item: ReplayItem, t: float) -> None:
        view = item.view
        rec = RequestRecord(view.request_id, t, view.prompt_tokens, item.output_tokens, view.max_output_tokens)
        self.records.append(rec)
        snaps = self._snapshots(view)
        if not snaps:
            fits = any(_context_needed(view) <= p.engine.cfg.max_model_len for p in self.pods)
            rec.shed_reason = "no_live_pod" if fits else "prompt_too_long"
            return
        decision: Decision = self.policy.choose(view, snaps)
        rec.predicted_ttft_ms = decision.predicted_ttft_ms
        rec.predicted_tpot_ms = decision.predicted_tpot_ms
        if decision.pod_id is None:
            rec.shed_reason = decision.shed_reason or "shed"
            return
        snap = next((s for s in snaps if s.pod_id == decision.pod_id), None)
        if snap is None:
            raise SimError(f"policy {self.policy.name!r} chose {decision.pod_id!r}, not a candidate")
        self._route(item, decision, snaps, snap, rec, t)

    def _route(self, item: ReplayItem, decision: Decision, snaps: Sequence[PodSnapshot], snap: PodSnapshot,
               rec: RequestRecord, t: float) -> None:
        """Send the request to the chosen pod (``snap``); P/D clusters also handle a prefill pod here."""
        if decision.prefill_pod_id not in (None, snap.pod_id):
            raise SimError(f"policy {self.policy.name!r} asked for a prefill pod on a cluster without prefill pods")
        view = item.view
        pod = self._by_id[snap.pod_id]
        rec.pod_id, rec.pool, rec.pod_class = pod.pod_id, pod.pool, pod.pod_class
        uncached = round(view.prompt_tokens * (1.0 - snap.prefix_cache_score))
        d = _Dispatch(item, pod, snap.features(view, 1), uncached, rec)
        self.in_flight.dispatch(pod.pod_id, uncached)
        self.prefix.record(pod.pod_id, view.block_hashes)
        pod.dispatched += 1
        pod.active[view.request_id] = d
        seq = EngineSeq(view.request_id, view.prompt_tokens, item.output_tokens, view.block_hashes, payload=d)
        pod.engine.add(seq, t)

    def _complete(self, seq: EngineSeq, d: _Dispatch, when: float) -> None:
        self.in_flight.complete(d.pod.pod_id)
        del d.pod.active[seq.request_id]
        rec = d.record
        ttft_ms = (seq.ttft or 0.0) * 1e3
        tpot_ms = seq.avg_tpot * 1e3
        rec.ttft_ms, rec.tpot_ms = ttft_ms, tpot_ms
        rec.e2e_ms = (when - seq.arrival) * 1e3
        rec.output_tokens = seq.num_output
        rec.prefix_hit_fraction = seq.prefix_hit_fraction
        rec.preemptions = seq.preemptions
        sample = dict(d.features)
        sample["num_tokens_generated"] = 0
        sample["actual_ttft_ms"] = ttft_ms
        sample["actual_tpot_ms"] = tpot_ms
        self.samples.append(sample)
        self.policy.on_complete(
            Completion(
                d.item.view, d.pod.pod_id, d.pod.pool, d.features, sample, ttft_ms, tpot_ms,
                rec.e2e_ms, seq.num_output, seq.prefix_hit_fraction, seq.preemptions, when,
            )
        )

    def _result(self, items: Sequence[ReplayItem]) -> ReplayResult:
        span = max((p.engine.clock for p in self.pods), default=0.0)
        start = items[0].view.arrival_s if items else 0.0
        elapsed = max(span - start, 1e-9)
        pods = []
        for p in self.pods:
            st = p.engine.stats
            hit_rate = st.prefix_hits / st.prefix_queries if st.prefix_queries else 0.0
            pods.append(
                PodResult(
                    p.pod_id, p.pool, p.pod_class, p.dispatched, st.busy_s, st.steps, st.preemptions,
                    st.kv_usage_integral / elapsed, st.max_kv_usage, hit_rate,
                    None if self.scenario is None else p.events,
                )
            )
        extra: dict[str, object] = {}
        if self.controller is not None:
            extra["controller"] = self.controller.finish(span)
        return ReplayResult(self.records, self.samples, pods, elapsed, extra)
