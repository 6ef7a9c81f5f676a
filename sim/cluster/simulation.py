"""Discrete-event cluster replay in virtual time.

Arrivals are processed in order. Before each routing decision every pod's engine runs all steps
that start before the arrival (decode runs jump in closed form), first-token / completion events
up to that instant update the router-side state, and the scraped metrics are refreshed if a scrape
tick passed. The policy then sees only :class:`PodSnapshot` objects.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from sim.cluster.config import ClusterConfig
from sim.cluster.policy import (
    Completion,
    Decision,
    PodSnapshot,
    Policy,
    RequestView,
    ScrapedMetrics,
)
from sim.cluster.router_state import InFlight, PrefixIndex
from sim.engine import FIRST_TOKEN, Engine, EngineConfig, SimError, StepTimeModel
from sim.engine import Sequence as EngineSeq


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
    pod_id: str | None = None
    pool: str | None = None
    shed_reason: str | None = None
    ttft_ms: float | None = None
    tpot_ms: float | None = None
    e2e_ms: float | None = None
    prefix_hit_fraction: float | None = None
    preemptions: int = 0
    predicted_ttft_ms: float | None = None
    predicted_tpot_ms: float | None = None


@dataclass
class PodResult:
    pod_id: str
    pool: str
    requests: int
    busy_s: float
    steps: int
    preemptions: int
    mean_kv_usage: float
    max_kv_usage: float
    prefix_hit_rate: float


@dataclass
class ReplayResult:
    records: list[RequestRecord]
    samples: list[dict[str, float | int | str]]
    pods: list[PodResult]
    span_s: float
    extra: dict[str, object] = field(default_factory=dict)


@dataclass
class _Pod:
    pod_id: str
    pool: str
    engine: Engine
    scraped: ScrapedMetrics
    dispatched: int = 0


@dataclass
class _Dispatch:
    item: ReplayItem
    pod: _Pod
    features: dict[str, float | int | str]
    uncached: int
    record: RequestRecord


ProgressFn = Callable[[int, int, float], None]


class ClusterSimulation:
    def __init__(self, cfg: ClusterConfig, policy: Policy, seed: int = 0) -> None:
        self.cfg = cfg
        self.policy = policy
        self.pods: list[_Pod] = []
        pod_ids = cfg.pod_ids()
        pools = {p.name: p.engine for p in cfg.pools}
        for n, (pod_id, pool) in enumerate(pod_ids):
            self.pods.append(self._make_pod(pod_id, pool, pools[pool], seed * 1009 + n))
        self._by_id = {p.pod_id: p for p in self.pods}
        capacity = cfg.router_prefix_blocks or max(p.engine.pool.num_blocks for p in self.pods)
        self.prefix = PrefixIndex([p for p, _ in pod_ids], capacity)
        self.in_flight = InFlight([p for p, _ in pod_ids])
        self._events: list[tuple[float, int, int, EngineSeq]] = []
        self._event_no = 0
        self._last_tick = -math.inf
        self.records: list[RequestRecord] = []
        self.samples: list[dict[str, float | int | str]] = []

    @staticmethod
    def _make_pod(pod_id: str, pool: str, cfg: EngineConfig, seed: int) -> _Pod:
        engine = Engine(cfg, StepTimeModel(cfg, seed=seed))
        return _Pod(pod_id, pool, engine, ScrapedMetrics(0, 0, 0.0, 0, 0.0))

    def run(self, items: Sequence[ReplayItem], progress: ProgressFn | None = None) -> ReplayResult:
        total = len(items)
        for i, item in enumerate(items):
            t = item.view.arrival_s
            self._maybe_scrape(t)
            self._advance_all(t)
            self._drain(t)
            self._dispatch(item, t)
            if progress is not None and (i % 256 == 0 or i == total - 1):
                progress(i + 1, total, t)
        self._advance_all(math.inf)
        self._drain(math.inf)
        return self._result(items)

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
                len(e.waiting), len(e.running), e.kv_usage, e.stats.preemptions, tick
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
            if kind == FIRST_TOKEN:
                self.in_flight.first_token(d.pod.pod_id, d.uncached)
            else:
                self._complete(seq, d, when)

    # -- routing -----------------------------------------------------------------------------
    def _snapshots(self, view: RequestView) -> list[PodSnapshot]:
        out = []
        for pod in self.pods:
            max_len = pod.engine.cfg.max_model_len
            if view.prompt_tokens >= max_len:
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
                )
            )
        return out

    def _dispatch(self, item: ReplayItem, t: float) -> None:
        view = item.view
        rec = RequestRecord(view.request_id, t, view.prompt_tokens, item.output_tokens)
        self.records.append(rec)
        snaps = self._snapshots(view)
        if not snaps:
            rec.shed_reason = "prompt_too_long"
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
        pod = self._by_id[snap.pod_id]
        rec.pod_id, rec.pool = pod.pod_id, pod.pool
        uncached = round(view.prompt_tokens * (1.0 - snap.prefix_cache_score))
        d = _Dispatch(item, pod, snap.features(view, 1), uncached, rec)
        self.in_flight.dispatch(pod.pod_id, uncached)
        self.prefix.record(pod.pod_id, view.block_hashes)
        pod.dispatched += 1
        seq = EngineSeq(view.request_id, view.prompt_tokens, item.output_tokens, view.block_hashes, payload=d)
        pod.engine.add(seq, t)

    def _complete(self, seq: EngineSeq, d: _Dispatch, when: float) -> None:
        self.in_flight.complete(d.pod.pod_id)
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
                    p.pod_id, p.pool, p.dispatched, st.busy_s, st.steps, st.preemptions,
                    st.kv_usage_integral / elapsed, st.max_kv_usage, hit_rate,
                )
            )
        return ReplayResult(self.records, self.samples, pods, elapsed)
