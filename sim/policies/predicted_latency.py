"""``predicted-latency`` and ``dual-pool`` replay policies: the router's decision core in virtual time.

Per request: (dual-pool) the pool classifier picks short or long by token budget (the client's
``max_tokens`` capped by the history percentile of completed outputs, see :mod:`sim.policies.pools`,
optionally with the pool tuner); then the pool's latency models (in-process, retrained every
``retrain_interval_s`` of virtual time from the samples of completed requests) predict TTFT/TPOT
for every candidate pod, and the same :class:`~router_client.pipeline.DecisionCore` as the live
router filters, scores, picks or sheds. Before a pool's first fit the composite fallback scores.
Predictions are multiplied by the router's per-pod correction factors (``router_client.correction``,
learned from actual / raw prediction of completed requests, in virtual time) unless ``correction=false``.
"""

from __future__ import annotations

from collections.abc import Sequence

from router_client.candidates import candidates as build_candidates
from router_client.config import SloConfig
from router_client.correction import PodCorrection
from router_client.pipeline import DecisionCore
from router_client.scheduling.contracts import SchedulingRequest
from shared.columns import to_columns
from shared.features import FeatureRow
from sim.cluster.policy import Completion, Decision, PodSnapshot, PolicyContext, RequestView
from sim.policies.options import ReplayOptions
from sim.policies.pools import PoolSelector
from sim.policies.retrainer import InProcessRetrainer, RetrainSettings

ALL = "all"
"""predicted-latency treats every pod of the cluster as one pool with one model."""


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
        settings = RetrainSettings(min_samples=self.opts.min_samples, min_fresh=self.opts.min_fresh,
                                   bucket_cap=self.opts.bucket_cap, rounds=self.opts.rounds, alpha=self.opts.alpha,
                                   adapt_rate=self.opts.adapt_rate)
        self.models = {pool: InProcessRetrainer(settings) for pool in pools}
        self.selector = PoolSelector(self.opts, pools) if dual else None
        self._next_retrain = self.opts.retrain_interval_s
        self.retrains = 0
        peers = {pod: tuple(ids) for ids in pools.values() for pod in ids}
        self.correction = PodCorrection(self.opts.correction_config(), self.opts.alpha,
                                        lambda pod: peers.get(pod, (pod,)))
        self._raw: dict[str, tuple[float, float]] = {}
        """request id → the model's uncorrected (TTFT, TPOT) for the chosen pod, until it completes."""

    # -- policy protocol --------------------------------------------------------------------
    def choose(self, request: RequestView, pods: Sequence[PodSnapshot]) -> Decision:
        self._maybe_retrain(request.arrival_s)
        pool, cands = self.selector.select(request, pods) if self.selector is not None else (ALL, list(pods))
        ids, rows = [p.pod_id for p in cands], [p.features(request) for p in cands]
        raw = self._predict(pool, rows)
        predicted = None if raw is None else self.correction.apply(ids, raw, request.arrival_s)
        candidates = build_candidates(ids, rows, predicted)
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
        if raw is not None:
            self._raw[request.request_id] = raw[chosen.row]
        return Decision.route(chosen.pod, chosen.predicted_ttft_ms, chosen.predicted_tpot_ms)

    def on_complete(self, completion: Completion) -> None:
        self.models[completion.pool if self.selector is not None else ALL].add(completion.sample)
        if self.selector is not None:
            self.selector.on_complete(completion)
        raw = self._raw.pop(completion.request.request_id, None)
        if raw is not None:
            now = completion.finished_at_s
            self.correction.observe(completion.pod_id, "ttft", raw[0], completion.ttft_ms, now)
            if completion.output_tokens > 1:
                self.correction.observe(completion.pod_id, "tpot", raw[1], completion.tpot_ms, now)

    def status(self) -> dict[str, object]:
        """Extra summary keys: retrains and (dual-pool with tuning) the tuner's state and recommendations."""
        tuning = self.selector.status() if self.selector is not None else None
        checked = sum(m.checked for m in self.models.values())
        refused = [d.describe() for m in self.models.values() for d in m.refused]
        return {"retrains": self.retrains, "monotone": {"checked": checked, "refused": len(refused),
                                                        "falls": refused[:20]},
                **({"tuning": tuning} if tuning is not None else {})}

    # -- internals --------------------------------------------------------------------------
    def _predict(self, pool: str, rows: Sequence[FeatureRow]) -> list[tuple[float, float]] | None:
        model = self.models[pool].model
        if model is None:
            return None
        cols = to_columns(rows, ["pods"])
        return list(zip(model.predict("ttft", cols).tolist(), model.predict("tpot", cols).tolist(), strict=True))

    def _maybe_retrain(self, now: float) -> None:
        if now < self._next_retrain:
            return
        for model in self.models.values():
            self.retrains += model.retrain(now)
        self._next_retrain = now + self.opts.retrain_interval_s


def predicted_latency(ctx: PolicyContext) -> PredictedLatencyPolicy:
    return PredictedLatencyPolicy(ctx, dual=False)


def dual_pool(ctx: PolicyContext) -> PredictedLatencyPolicy:
    return PredictedLatencyPolicy(ctx, dual=True)
