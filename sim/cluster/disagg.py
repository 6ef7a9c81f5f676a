"""Prefill/decode disaggregation in the cluster replay, as llm-d runs it.

A policy that returns ``Decision.route(decode_pod, prefill_pod_id=prefill_pod)`` on a cluster with
``prefill``-role pods makes the request disaggregated:

1. the **prefill leg**: the request is queued on the prefill pod with ``max_tokens`` 1 (llm-d's sidecar asks
   the prefill engine for one token); the pod schedules it like any request (chunked prefill, prefix cache);
2. when that token is out, the request reaches the **decode pod** (``Engine.add_remote``): it waits there
   for KV blocks like any waiting request, then pulls the prompt's KV — minus what its own prefix cache holds —
   over its ingress link (``bytes / bandwidth + latency``, one transfer at a time: :mod:`sim.engine.kv_transfer`);
3. its first decode step recomputes the last prompt token and samples the **first token**, which is the one
   the client sees: the prefill pod's token is dropped by the sidecar. **TTFT = arrival → that token**: prefill
   queue + prefill + block wait + transfer + the first decode step. TPOT is the decode pod's.

A decision without a prefill pod runs the whole request on the chosen pod (the decider kept it local).
Prefill-role pods are sources only (they never receive KV) and are advanced first up to each instant, then
every handoff up to it is delivered to its decode pod in time order, so no decode pod runs a step past a
request that should have reached it. (llm-d may also use a ``both`` pod as a remote prefiller; here a ``both``
pod serves whole requests and decode legs.)

Per request the record gets ``prefill_pod``, ``decode_pod``, ``disaggregated``, ``kv_transfer_ms`` and
``kv_block_wait_ms``; training rows: the prefill leg (``pod_type`` ``prefill``, TTFT = arrival → the prefill
pod's token, TPOT 0) and the decode leg (``pod_type`` ``decode``, TTFT = reaching the decode pod → first
token, its TPOT); a request served whole on a decode pod gives one row with ``pod_type`` ``""`` (the pod did
both phases). Router-side, the prefill pod counts the request in flight (with its uncached prompt) until its
token, the decode pod from dispatch to completion (no prefill tokens); both record the prompt in the prefix
index (the decode pod caches the blocks it receives).
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass, replace

from sim.cluster.config import PREFILL, ClusterConfig
from sim.cluster.policy import Completion, Decision, PodSnapshot, Policy, PrefillLeg
from sim.cluster.simulation import (
    ClusterSimulation,
    Controller,
    ReplayItem,
    RequestRecord,
    SimPod,
    _Dispatch,
)
from sim.engine import FINISHED, SimError
from sim.engine import Sequence as EngineSeq
from sim.engine.kv_transfer import IngressLink, RemoteKV
from sim.scenario import Scenario


@dataclass
class _Legs:
    """Simulator-side state of one disaggregated request."""

    prefill_pod: SimPod
    features: dict[str, float | int | str]
    """The prefill pod's feature row at dispatch."""
    uncached: int
    """Prompt tokens the prefill pod computes (router-side estimate, as for any dispatch)."""
    prefill_seq: EngineSeq
    remote: RemoteKV
    prefill_done_s: float | None = None
    decode_seq: EngineSeq | None = None


def has_prefill_pods(cfg: ClusterConfig) -> bool:
    return any(p.role == PREFILL for p in cfg.pods())


def make_simulation(cfg: ClusterConfig, policy: Policy, seed: int = 0, scenario: Scenario | None = None,
                    controller: Controller | None = None) -> ClusterSimulation:
    """The replay for ``cfg``: :class:`DisaggSimulation` when it has prefill pods."""
    cls = DisaggSimulation if has_prefill_pods(cfg) else ClusterSimulation
    return cls(cfg, policy, seed=seed, scenario=scenario, controller=controller)


class DisaggSimulation(ClusterSimulation):
    def __init__(self, cfg: ClusterConfig, policy: Policy, seed: int = 0, scenario: Scenario | None = None,
                 controller: Controller | None = None) -> None:
        super().__init__(cfg, policy, seed=seed, scenario=scenario, controller=controller)
        self._sources = [p for p in self.pods if p.role == PREFILL]
        self._sinks = [p for p in self.pods if p.role != PREFILL]
        for pod in self._sinks:
            pod.engine.kv_ingress = IngressLink(cfg.kv_link)
        self._legs: dict[str, _Legs] = {}
        self._handoffs: list[tuple[float, int, _Dispatch]] = []

    # -- time --------------------------------------------------------------------------------
    def _advance_all(self, t: float) -> None:
        for pod in self._sources:
            self._advance_pod(pod, t)
        handoffs = self._handoffs
        while handoffs and handoffs[0][0] <= t:
            when, _, d = heapq.heappop(handoffs)
            if not d.aborted:
                self._hand_over(d, when)
        for pod in self._sinks:
            self._advance_pod(pod, t)

    def _advance_pod(self, pod: SimPod, t: float) -> None:
        if not pod.engine.has_work():
            return
        for when, kind, seq in pod.engine.advance_until(t, self.cfg.fast_forward):
            self._event_no += 1
            heapq.heappush(self._events, (when, self._event_no, kind, seq))
            legs = self._legs.get(seq.request_id) if kind == FINISHED else None
            if legs is not None and seq is legs.prefill_seq:
                heapq.heappush(self._handoffs, (when, self._event_no, seq.payload))

    def _hand_over(self, d: _Dispatch, when: float) -> None:
        """The prefill pod's token is out at ``when``: the request reaches its decode pod."""
        legs = self._legs[d.record.request_id]
        pod = d.pod
        self._advance_pod(pod, when)
        view = d.item.view
        seq = EngineSeq(view.request_id, view.prompt_tokens, d.item.output_tokens, view.block_hashes, payload=d)
        legs.decode_seq = seq
        pod.engine.add_remote(seq, when, legs.remote)

    # -- routing -----------------------------------------------------------------------------
    def _route(self, item: ReplayItem, decision: Decision, snaps: Sequence[PodSnapshot], snap: PodSnapshot,
               rec: RequestRecord, t: float) -> None:
        rec.decode_pod = snap.pod_id
        if decision.prefill_pod_id in (None, snap.pod_id):
            rec.prefill_pod, rec.disaggregated = snap.pod_id, False
            super()._route(item, decision, snaps, replace(snap, pod_type=""), rec, t)
            return
        pre = next((s for s in snaps if s.pod_id == decision.prefill_pod_id), None)
        if pre is None or self._by_id[pre.pod_id].role != PREFILL:
            raise SimError(f"policy {self.policy.name!r} chose {decision.prefill_pod_id!r} to prefill: "
                           "not a prefill-role candidate")
        decode = self._by_id[snap.pod_id]
        if decode.role == PREFILL:
            raise SimError(f"policy {self.policy.name!r} chose prefill pod {snap.pod_id!r} to decode")
        self._dispatch_pair(item, self._by_id[pre.pod_id], pre, decode, snap, rec, t)

    def _dispatch_pair(self, item: ReplayItem, prefill: SimPod, pre: PodSnapshot, decode: SimPod,
                       snap: PodSnapshot, rec: RequestRecord, t: float) -> None:
        view = item.view
        rec.pod_id, rec.pool, rec.pod_class = decode.pod_id, decode.pool, decode.pod_class
        rec.prefill_pod, rec.disaggregated = prefill.pod_id, True
        uncached = round(view.prompt_tokens * (1.0 - pre.prefix_cache_score))
        d = _Dispatch(item, decode, snap.features(view, 1), 0, rec)
        prefill_seq = EngineSeq(view.request_id, view.prompt_tokens, 1, view.block_hashes, payload=d)
        self._legs[view.request_id] = _Legs(prefill, pre.features(view, 1), uncached, prefill_seq,
                                            RemoteKV(lanes=min(prefill.tp, decode.tp)))
        for pod, tokens in ((prefill, uncached), (decode, 0)):
            self.in_flight.dispatch(pod.pod_id, tokens)
            self.prefix.record(pod.pod_id, view.block_hashes)
            pod.dispatched += 1
            pod.active[view.request_id] = d
        prefill.engine.add(prefill_seq, t)

    # -- events ------------------------------------------------------------------------------
    def _event(self, when: float, kind: int, seq: EngineSeq, d: _Dispatch) -> None:
        legs = self._legs.get(seq.request_id)
        if legs is None or seq is not legs.prefill_seq:
            super()._event(when, kind, seq, d)
        elif kind == FINISHED:
            legs.prefill_done_s = when
            pod = legs.prefill_pod
            self.in_flight.first_token(pod.pod_id, legs.uncached)
            self.in_flight.complete(pod.pod_id)
            del pod.active[seq.request_id]

    def _complete(self, seq: EngineSeq, d: _Dispatch, when: float) -> None:
        legs = self._legs.pop(seq.request_id, None)
        if legs is None:
            super()._complete(seq, d, when)
            return
        self.in_flight.complete(d.pod.pod_id)
        del d.pod.active[seq.request_id]
        rec = d.record
        first = seq.first_token_time or when
        done = legs.prefill_done_s if legs.prefill_done_s is not None else first
        ttft_ms, tpot_ms = (first - rec.arrival_s) * 1e3, seq.avg_tpot * 1e3
        rec.ttft_ms, rec.tpot_ms, rec.e2e_ms = ttft_ms, tpot_ms, (when - rec.arrival_s) * 1e3
        rec.output_tokens = seq.num_output
        rec.prefix_hit_fraction = legs.prefill_seq.prefix_hit_fraction
        rec.preemptions = legs.prefill_seq.preemptions + seq.preemptions
        rec.kv_transfer_ms = _ms(legs.remote.transfer_s)
        rec.kv_block_wait_ms = _ms(legs.remote.block_wait_s)
        prefill_ms = (done - rec.arrival_s) * 1e3
        prefill_row = _sample(legs.features, prefill_ms, 0.0)
        decode_row = _sample(d.features, (first - done) * 1e3, tpot_ms)
        self.samples += [prefill_row, decode_row]
        leg = PrefillLeg(legs.prefill_pod.pod_id, legs.prefill_pod.pool, legs.features, prefill_row, prefill_ms)
        self.policy.on_complete(
            Completion(d.item.view, d.pod.pod_id, d.pod.pool, d.features, decode_row, ttft_ms, tpot_ms,
                       rec.e2e_ms, seq.num_output, rec.prefix_hit_fraction, rec.preemptions, when, prefill=leg))

    # -- scenario ----------------------------------------------------------------------------
    def _abort_all(self, pod: SimPod) -> None:
        """A pod failed: every request with a leg on it is lost; the other leg of a disaggregated one is dropped
        from its pod too (its engine included)."""
        for rid, d in list(pod.active.items()):
            d.aborted = True
            d.record.aborted = "pod_failed"
            legs = self._legs.pop(rid, None)
            if legs is None:
                self._drop(pod, rid, None, 0 if d.first_token_seen else d.uncached, pod)
                continue
            if legs.prefill_done_s is None:
                self._drop(legs.prefill_pod, rid, legs.prefill_seq, legs.uncached, pod)
            self._drop(d.pod, rid, legs.decode_seq, 0, pod)
        pod.active.clear()

    def _drop(self, owner: SimPod, rid: str, seq: EngineSeq | None, uncached: int, failed: SimPod) -> None:
        self.in_flight.first_token(owner.pod_id, uncached)
        self.in_flight.complete(owner.pod_id)
        if owner is not failed:
            owner.active.pop(rid, None)
            if seq is not None:
                owner.engine.abort(seq)


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1e3


def _sample(features: dict[str, float | int | str], ttft_ms: float, tpot_ms: float) -> dict[str, float | int | str]:
    row = dict(features)
    row["num_tokens_generated"] = 0
    row["actual_ttft_ms"] = ttft_ms
    row["actual_tpot_ms"] = tpot_ms
    return row


__all__ = ["DisaggSimulation", "has_prefill_pods", "make_simulation"]
