"""The router's side of pool tuning: feeds :class:`~router_client.pool_tuning.PoolTuner` from decisions,
completions and the scraped endpoint snapshot, applies its threshold to the classifier when
``tuning.apply`` is set, and exports it as metrics (read at scrape time) and as a status document.

Metrics (router registry): ``router_tuning_threshold_tokens{kind="in_force"|"recommended"}``,
``router_tuning_recommended_pods{pool}``, ``router_tuning_pressure{pool}``,
``router_tuning_short_share`` (requests that would go short at the recommended threshold) and
``router_tuning_updates_total``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from router_client.classifier import Budget, PoolClassifier
from router_client.config import RouterConfig
from router_client.endpoints import EndpointState
from router_client.pool_tuning import PoolTuner

LOAD_SAMPLE_INTERVAL_S = 0.5
"""Pool load (queue depth, preemption counters) is sampled from the snapshot at most this often."""


class RouterTuning:
    def __init__(self, config: RouterConfig, classifier: PoolClassifier, state: EndpointState, now: float,
                 pods: Callable[[str], tuple[str, ...]] | None = None) -> None:
        short, long = config.tuning_pools()
        static = {p.name: tuple(p.pods) for p in config.pools}
        self._pods_of = pods or static.__getitem__
        """The pool's pods now (discovery changes them; the split is recommended for the pods there are)."""
        self._pools = (short, long)
        self.tuner = PoolTuner(config.tuning, short, long, {p: max(len(static[p]), 1) for p in self._pools},
                               config.pool(short).max_context, config.classifier.output_threshold_tokens,
                               config.classifier.total_threshold_tokens, now)
        self._classifier = classifier
        self._state = state
        self._next_sample = now

    def on_decision(self, budget: Budget, max_tokens: int | None, predicted_ttft_ms: float | None,
                    slo_ttft_ms: float | None, now: float) -> None:
        t = self.tuner
        t.observe_budget(budget.prompt_tokens, budget.expected_output, max_tokens)
        t.observe_headroom(budget.pool, predicted_ttft_ms, slo_ttft_ms)
        if now >= self._next_sample:
            self._next_sample = now + LOAD_SAMPLE_INTERVAL_S
            snap = self._state.snapshot
            for pool in self._pools:
                metrics = [m for m in (snap.get(p) for p in self._pods_of(pool)) if m is not None]
                if not metrics:
                    continue
                t.pods[pool] = len(metrics)
                waiting = sum(m.waiting for m in metrics)
                t.observe_load(pool, waiting / len(metrics), sum(m.preemptions for m in metrics))
        if t.due(now) and t.update(now) is not None and t.cfg.apply:
            self._classifier.set_total_threshold(t.threshold)

    def on_complete(self, pool: str) -> None:
        self.tuner.observe_completion(pool)

    def status(self) -> dict[str, Any]:
        return self.tuner.status()

    def register(self, registry: CollectorRegistry) -> None:
        registry.register(_TuningCollector(self.tuner))


class _TuningCollector(Collector):
    def __init__(self, tuner: PoolTuner) -> None:
        self._tuner = tuner

    def collect(self) -> Iterator[Metric]:
        t, rec = self._tuner, self._tuner.last
        threshold = GaugeMetricFamily("router_tuning_threshold_tokens", "Total-token threshold of the pool "
                                      "classifier: in force, and as last recommended.", labels=["kind"])
        threshold.add_metric(["in_force"], t.threshold)
        updates = CounterMetricFamily("router_tuning_updates", "Tuning recommendations made.")
        updates.add_metric([], t.updates)
        pods = GaugeMetricFamily("router_tuning_recommended_pods", "Recommended pods per pool.", labels=["pool"])
        pressure = GaugeMetricFamily("router_tuning_pressure", "Pool pressure over the last interval "
                                     "(>= 1: pressured).", labels=["pool"])
        share = GaugeMetricFamily("router_tuning_short_share", "Share of recent requests that go short at the "
                                  "recommended threshold.")
        if rec is not None:
            threshold.add_metric(["recommended"], rec.threshold_tokens)
            for pool, n in rec.split.items():
                pods.add_metric([pool], n)
                pressure.add_metric([pool], rec.pressure.get(pool, 0.0))
            share.add_metric([], rec.short_share)
        yield from (threshold, updates, pods, pressure, share)
