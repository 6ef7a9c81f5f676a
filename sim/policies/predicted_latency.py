"""``predicted-latency`` and ``dual-pool`` replay policies: the router's decision core in virtual time.

Per request: (dual-pool) the pool classifier picks short or long by token budget (the client's
``max_tokens`` capped by the history percentile of completed outputs, see :mod:`sim.policies.pools`,
optionally with the pool tuner); then the pool's latency models (in-process, retrained every
``retrain_interval_s`` of virtual time from the samples of completed requests) predict TTFT/TPOT
for every candidate pod, and the same :class:`~router_client.pipeline.DecisionCore` as the live
router filters, scores, picks or sheds. Before a pool's first fit the composite fallback scores.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from router_client.config import SloConfig
from router_client.pipeline import DecisionCore
from router_client.scheduling.contracts import Candidate, SchedulingRequest
from shared.columns import to_columns
from sim.cluster.policy import Completion, Decision, PodSnapshot, PolicyContext, RequestView
from sim.policies.options import ReplayOptions
from sim.policies.pools import PoolSelector
from sim.policies.retrainer import InProcessRetrainer, RetrainSettings

ALL = "all"
"""predicted-latency treats every pod of the cluster as one pool with one model."""


def feature_columns(request: RequestView, pods: Sequence[PodSnapshot]) -> dict[str, np.ndarray]:
    """The contract columns of every (request, pod) row, parsed exactly as a predictor parses them."""
    return to_columns([p.features(request) for p in pods], ["pods"])


class PredictedLatencyPolicy:
    """One latency model per pool; ``dual=True`` adds the pool classifier in front."""

    def __init__(self, ctx: PolicyContext, dual: bool) -> None:
        self.name = "dual-pool" if dual else "predicted-latency"
        self.opts = ReplayOptions.parse(ctx.options)
        pools: dict[str, list[str]] = {}
        for pod_id, pool in ctx.pods:
            pools.setdefault(pool if dual else ALL, []).append(pod_id)
        self.pools = pools
        self.core = DecisionCore(self.opts.scheduler(ctx.seed), SloConfig(), pools)
        settings = RetrainSettings(min_samples=self.opts.min_samples, bucket_cap=self.opts.bucket_cap,
                                   rounds=self.opts.rounds, alpha=self.opts.alpha)
        self.models = {pool: InProcessRetrainer(settings) for pool in pools}
        self.selector = PoolSelector(self.opts, pools) if dual else None
        self._next_retrain = self.opts.retrain_interval_s
        self.retrains = 0

    # -- policy protocol --------------------------------------------------------------------
    def choose(self, request: RequestView, pods: Sequence[PodSnapshot]) -> Decision:
        self._maybe_retrain(request.arrival_s)
        pool, cands = self.selector.select(request, pods) if self.selector is not None else (ALL, list(pods))
        model = self.models[pool].model
        ttft = tpot = None
        if model is not None:
            cols = feature_columns(request, cands)
            ttft, tpot = model.predict("ttft", cols), model.predict("tpot", cols)
        candidates = [
            Candidate(p.pod_id, p.metrics.kv_cache_usage, p.metrics.num_requests_waiting, p.in_flight,
                      p.prefill_tokens_in_flight, p.prefix_cache_score,
                      float(ttft[i]) if ttft is not None else None, float(tpot[i]) if tpot is not None else None, i)
            for i, p in enumerate(cands)
        ]
        sreq = SchedulingRequest(request.request_id, request.prompt_tokens, request.slo_ttft_ms,
                                 request.slo_tpot_ms, self.opts.sheddable)
        outcome = self.core.decide(pool, sreq, candidates)
        if self.selector is not None:
            pick = outcome.best if outcome.index is None else candidates[outcome.index]
            self.selector.decided(pool, pick.predicted_ttft_ms if pick else None, request)
        if outcome.index is None:
            best = outcome.best
            return Decision(None, outcome.reason.split(" ", 1)[0], best.predicted_ttft_ms if best else None,
                            best.predicted_tpot_ms if best else None)
        chosen = candidates[outcome.index]
        return Decision.route(chosen.pod, chosen.predicted_ttft_ms, chosen.predicted_tpot_ms)

    def on_complete(self, completion: Completion) -> None:
        self.models[completion.pool if self.selector is not None else ALL].add(completion.sample)
        if self.selector is not None:
            self.selector.on_complete(completion)

    def status(self) -> dict[str, object]:
        """Extra summary keys: retrains and (dual-pool with tuning) the tuner's state and recommendations."""
        tuning = self.selector.status() if self.selector is not None else None
        return {"retrains": self.retrains, **({"tuning": tuning} if tuning is not None else {})}

    # -- internals --------------------------------------------------------------------------
    def _maybe_retrain(self, now: float) -> None:
        if now < self._next_retrain:
            return
        for model in self.models.values():
            self.retrains += model.retrain()
        self._next_retrain = now + self.opts.retrain_interval_s


def predicted_latency(ctx: PolicyContext) -> PredictedLatencyPolicy:
    return PredictedLatencyPolicy(ctx, dual=False)


def dual_pool(ctx: PolicyContext) -> PredictedLatencyPolicy:
    return PredictedLatencyPolicy(ctx, dual=True)
