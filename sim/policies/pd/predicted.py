"""``pd-predicted-latency``: the decode pod by predicted TPOT, the decider, the prefill pod by predicted TTFT.

Per request, on the in-process retrained models (:mod:`sim.policies.pd.models`):

1. the decode pods' rows (``pod_type`` ``decode``) are predicted and the router's decision core picks one with
   ``slo-headroom`` (TPOT SLO) and ``latency-headroom`` weighted ``decode_ttft_weight`` on the decode leg's
   TTFT (default 0: TPOT only; no prefix affinity — the cache that matters lives on the prefill side);
2. the decider (``decider``: ``prefix`` as llm-d, ``always``, ``never``, or ``predicted``: disaggregate iff the
   best prefill pod's TTFT + the decode leg's beats the decode pod's TTFT serving the request whole);
3. the prefill pods' rows (``pod_type`` ``prefill``) are predicted and the core picks one with
   ``prefix-affinity``, ``slo-headroom`` and ``latency-headroom`` on TTFT alone.

Before a role's first fit its pick falls back to the composite scorer (as ``predicted-latency``). The predicted
TTFT of a disaggregated request is prefill TTFT + decode-leg TTFT. No per-pod correction.
"""

from __future__ import annotations

from collections.abc import Sequence

from router_client.candidates import candidates as build_candidates
from router_client.config import SloConfig
from router_client.pipeline import DecisionCore
from router_client.scheduling.contracts import Candidate, SchedulingRequest
from sim.cluster.policy import Completion, Decision, PodSnapshot, PolicyContext, RequestView
from sim.policies.pd.models import RoleModels
from sim.policies.pd.options import PdOptions
from sim.policies.pd.roles import DECODE, PREFILL, WHOLE, role_row, split, uncached_tokens
from sim.policies.retrainer import RetrainSettings


def settings_of(opts: PdOptions) -> RetrainSettings:
    return RetrainSettings(min_samples=opts.min_samples, bucket_cap=opts.bucket_cap, rounds=opts.rounds,
                           alpha=opts.alpha)


class PdPredictedLatency:
    name = "pd-predicted-latency"

    def __init__(self, ctx: PolicyContext) -> None:
        self.opts = PdOptions.parse(ctx.options)
        roles = ctx.pod_roles
        pools = {PREFILL: [p for p, _ in ctx.pods if roles.get(p) == PREFILL],
                 DECODE: [p for p, _ in ctx.pods if roles.get(p) != PREFILL]}
        self.cores = {PREFILL: DecisionCore(self.opts.role_scheduler(ctx.seed, 1.0, self.opts.prefix_affinity),
                                            SloConfig(), pools),
                      DECODE: DecisionCore(self.opts.role_scheduler(ctx.seed + 1, self.opts.decode_ttft_weight, False),
                                           SloConfig(), pools)}
        self.models = RoleModels(settings_of(self.opts), self.opts.trainers == "split")
        self._next_retrain = self.opts.retrain_interval_s

    def choose(self, request: RequestView, pods: Sequence[PodSnapshot]) -> Decision:
        self._maybe_retrain(request.arrival_s)
        prefill, decode = split(pods)
        slo_tpot = SchedulingRequest(request.request_id, request.prompt_tokens, None, request.slo_tpot_ms)
        d = self._pick(DECODE, request, decode, DECODE, slo_tpot)
        if prefill and self._disaggregate(request, decode[d.row], d, prefill):
            slo_ttft = SchedulingRequest(request.request_id, request.prompt_tokens, request.slo_ttft_ms, None)
            p = self._pick(PREFILL, request, prefill, PREFILL, slo_ttft)
            ttft = None if p.predicted_ttft_ms is None or d.predicted_ttft_ms is None \
                else p.predicted_ttft_ms + d.predicted_ttft_ms
            return Decision.route(d.pod, ttft, d.predicted_tpot_ms, prefill_pod_id=p.pod)
        whole = self.models.predict(WHOLE, [role_row(request, decode[d.row], WHOLE)])
        return Decision.route(d.pod, *(whole[0] if whole else (None, None)))

    def on_complete(self, completion: Completion) -> None:
        self.models.observe(completion)

    def status(self) -> dict[str, object]:
        return {"retrains": self.models.retrains, "trainers": self.opts.trainers, "decider": self.opts.decider}

    # -- internals --------------------------------------------------------------------------
    def _pick(self, core: str, request: RequestView, pods: Sequence[PodSnapshot], pod_type: str,
              sreq: SchedulingRequest) -> Candidate:
        rows = [role_row(request, p, pod_type) for p in pods]
        cands = build_candidates([p.pod_id for p in pods], rows, self.models.predict(pod_type, rows))
        outcome = self.cores[core].decide(core, sreq, cands)
        return cands[0 if outcome.index is None else outcome.index]

    def _disaggregate(self, request: RequestView, pod: PodSnapshot, d: Candidate,
                      prefill: Sequence[PodSnapshot]) -> bool:
        mode = self.opts.decider
        if mode == "prefix":
            return uncached_tokens(request, pod) >= self.opts.pd_threshold
        if mode != "predicted":
            return mode == "always"
        whole = self.models.predict(WHOLE, [role_row(request, pod, WHOLE)])
        pre = self.models.predict(PREFILL, [role_row(request, p, PREFILL) for p in prefill])
        if whole is None or pre is None or d.predicted_ttft_ms is None:
            return uncached_tokens(request, pod) >= self.opts.pd_threshold
        return min(t for t, _ in pre) + d.predicted_ttft_ms < whole[0][0]

    def _maybe_retrain(self, now: float) -> None:
        if now >= self._next_retrain:
            self.models.retrain(now)
            self._next_retrain = now + self.opts.retrain_interval_s


def pd_predicted_latency(ctx: PolicyContext) -> PdPredictedLatency:
    return PdPredictedLatency(ctx)
