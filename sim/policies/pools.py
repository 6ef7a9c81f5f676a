"""Pool choice for the dual-pool replay policies: the router's :class:`PoolClassifier` in front of the
pods, optionally with its :class:`PoolTuner` (``--policy-opt tuning=true``) moving the total-token
threshold in virtual time exactly as ``router_client/tuning_hook.py`` does in a live router.

Per request: expected output = the client's ``max_tokens`` capped by the history percentile of
completed outputs (the generated length only with the ``--expose-output-length`` oracle); the short
pool's context is what its pods report (``max_model_len``). The tuner sees every decision's budget,
the pools' scraped queue depth and preemption counters (sampled at most every 0.5 virtual seconds)
and the predicted TTFT of the chosen pod against the request's SLO.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from router_client.classifier import PoolClassifier
from router_client.config import PoolConfig, TuningConfig
from router_client.pool_tuning import PoolTuner
from sim.cluster.policy import Completion, PodSnapshot, RequestView
from sim.policies.options import ReplayOptions

ROUTE = "/v1/completions"
LOAD_SAMPLE_INTERVAL_S = 0.5
LOG_LIMIT = 500


class PoolSelector:
    def __init__(self, opts: ReplayOptions, pools: dict[str, list[str]]) -> None:
        cfg = opts.classifier()
        missing = {cfg.short_pool, cfg.long_pool} - set(pools)
        if missing and len(pools) > 1:
            raise ValueError(f"dual-pool: pools {sorted(missing)} not in the cluster {sorted(pools)}")
        self.classifier = PoolClassifier(cfg, [PoolConfig(name=p, pods=ids) for p, ids in pools.items()])
        self.pool_sizes = {p: len(ids) for p, ids in pools.items()}
        self.tuning: TuningConfig | None = opts.tuning_config() if len(pools) > 1 else None
        self.tuner: PoolTuner | None = None
        self.log: list[dict[str, Any]] = []
        self._next_sample = 0.0

    def select(self, request: RequestView, pods: Sequence[PodSnapshot]) -> tuple[str, list[PodSnapshot]]:
        """The pool for ``request`` and its candidate pods."""
        c = self.classifier
        if c.single is not None:
            return c.single, list(pods)
        short = [p for p in pods if p.pool == c.short]
        long = [p for p in pods if p.pool == c.long]
        if not short:
            return c.long, long
        max_tokens = request.max_output_tokens or request.expected_output_tokens
        expected = c.expected_output(ROUTE, None, max_tokens)
        pool, _ = c.classify_tokens(request.prompt_tokens, expected, max_tokens, short[0].max_model_len)
        if self.tuning is not None:
            self._observe(request, expected, max_tokens, pods, short[0].max_model_len)
        if pool == c.short or not long:
            return c.short, short
        return c.long, long

    def decided(self, pool: str, predicted_ttft_ms: float | None, request: RequestView) -> None:
        if self.tuner is not None:
            self.tuner.observe_headroom(pool, predicted_ttft_ms, request.slo_ttft_ms)

    def on_complete(self, completion: Completion) -> None:
        self.classifier.history.observe("route:" + ROUTE, completion.output_tokens)
        if self.tuner is not None:
            self.tuner.observe_completion(completion.pool)

    def status(self) -> dict[str, Any] | None:
        if self.tuner is None:
            return None
        return {**self.tuner.status(), "recommendations": self.log}

    def _observe(self, request: RequestView, expected: int, max_tokens: int | None, pods: Sequence[PodSnapshot],
                 short_context: int) -> None:
        now = request.arrival_s
        c = self.classifier
        if self.tuner is None and self.tuning is not None:
            self.tuner = PoolTuner(self.tuning, c.short, c.long, self.pool_sizes, short_context,
                                   c.cfg.output_threshold_tokens, c.total_threshold, now)
        tuner = self.tuner
        if tuner is None:
            return
        tuner.observe_budget(request.prompt_tokens, expected, max_tokens)
        if now >= self._next_sample:
            self._next_sample = now + LOAD_SAMPLE_INTERVAL_S
            for pool in (c.short, c.long):
                mine = [p for p in pods if p.pool == pool]
                if mine:
                    waiting = sum(p.metrics.num_requests_waiting for p in mine) / len(mine)
                    tuner.observe_load(pool, waiting, sum(p.metrics.num_preemptions_total for p in mine))
        rec = tuner.update(now) if tuner.due(now) else None
        if rec is None:
            return
        if len(self.log) < LOG_LIMIT:
            self.log.append(rec.as_dict())
        if tuner.cfg.apply:
            c.set_total_threshold(tuner.threshold)
