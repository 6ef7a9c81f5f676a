"""Prometheus metrics of the router client, on the router's own ``CollectorRegistry``.

Live prediction error: over the last ``window`` served (prediction, actual) pairs per pool and
model, ``coverage`` = share with actual ≤ predicted (the quantile target, e.g. 0.9) and ``mape``
= mean |predicted − actual| / actual.
"""

from __future__ import annotations

from collections import deque

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

_DECISION_BUCKETS = (5e-5, 1e-4, 2e-4, 5e-4, 1e-3, 2e-3, 5e-3, 1e-2, 2.5e-2, 5e-2, 0.1, 0.25, 1.0)


class RollingError:
    """Coverage and MAPE over the last ``size`` pairs, maintained incrementally."""

    def __init__(self, size: int) -> None:
        self._pairs: deque[tuple[bool, float]] = deque(maxlen=size)
        self._covered = 0
        self._ape = 0.0

    def add(self, predicted: float, actual: float) -> None:
        if len(self._pairs) == self._pairs.maxlen:
            old_cov, old_ape = self._pairs[0]
            self._covered -= old_cov
            self._ape -= old_ape
        covered = actual <= predicted
        ape = abs(predicted - actual) / actual if actual > 0 else 0.0
        self._pairs.append((covered, ape))
        self._covered += covered
        self._ape += ape

    @property
    def count(self) -> int:
        return len(self._pairs)

    @property
    def coverage(self) -> float:
        return self._covered / len(self._pairs) if self._pairs else 0.0

    @property
    def mape(self) -> float:
        return self._ape / len(self._pairs) if self._pairs else 0.0


class RouterMetrics:
    def __init__(self, registry: CollectorRegistry, window: int) -> None:
        r = registry
        self.decisions = Counter("router_decisions_total", "Routing decisions.", ["pool", "outcome", "reason"],
                                 registry=r)
        self.decision_seconds = Histogram("router_decision_seconds", "Time to decide (incl. predictor wait).",
                                          ["pool"], buckets=_DECISION_BUCKETS, registry=r)
        self.fallbacks = Counter("router_prediction_fallbacks_total", "Decisions made without predictions.",
                                 ["pool", "reason"], registry=r)
        self.scrape_errors = Counter("router_scrape_errors_total", "Failed /metrics scrapes.", ["pod", "reason"],
                                     registry=r)
        self.stale = Gauge("router_endpoint_staleness_seconds", "Age of the pod's scraped metrics.", ["pod"],
                           registry=r)
        self.samples = Counter("router_training_samples_total", "Training rows by outcome (queued, sent, "
                               "dropped_buffer_full, rejected, no_trainer).", ["pool", "outcome"], registry=r)
        self.pairs = Counter("router_prediction_pairs_total", "Served (prediction, actual) pairs.",
                             ["pool", "model"], registry=r)
        self.coverage = Gauge("router_prediction_coverage", "Share of recent actuals ≤ prediction.",
                              ["pool", "model"], registry=r)
        self.mape = Gauge("router_prediction_mape", "Recent mean absolute percentage error.", ["pool", "model"],
                          registry=r)
        self.slo_checked = Counter("router_slo_requests_total", "Completed requests carrying an SLO.",
                                   ["pool", "slo"], registry=r)
        self.slo_violations = Counter("router_slo_violations_total", "Completed requests that missed their SLO.",
                                      ["pool", "slo"], registry=r)
        self._window = window
        self._errors: dict[tuple[str, str], RollingError] = {}
        self._fallback_counts: dict[tuple[str, str], float] = {}

    def decided(self, pool: str, shed: bool, reason: str, seconds: float) -> None:
        code = reason.split(";", 1)[0].split(" ", 1)[0]
        self.decisions.labels(pool, "shed" if shed else "routed", code).inc()
        self.decision_seconds.labels(pool).observe(seconds)

    def fallback(self, pool: str, reason: str) -> None:
        self.fallbacks.labels(pool, reason).inc()
        key = (pool, reason)
        self._fallback_counts[key] = self._fallback_counts.get(key, 0.0) + 1.0

    def fallback_counts(self) -> dict[tuple[str, str], float]:
        return dict(self._fallback_counts)

    def scrape_error(self, pod: str, reason: str) -> None:
        self.scrape_errors.labels(pod, reason).inc()

    def staleness(self, pod: str, seconds: float) -> None:
        self.stale.labels(pod).set(min(seconds, 1e9))

    def sample(self, pool: str, outcome: str, n: int = 1) -> None:
        self.samples.labels(pool, outcome).inc(n)

    def error_of(self, pool: str, model: str) -> RollingError:
        key = (pool, model)
        err = self._errors.get(key)
        if err is None:
            err = self._errors[key] = RollingError(self._window)
        return err

    def _pair(self, pool: str, model: str, predicted: float | None, actual: float | None) -> None:
        if predicted is None or actual is None or actual <= 0:
            return
        err = self.error_of(pool, model)
        err.add(predicted, actual)
        self.pairs.labels(pool, model).inc()
        self.coverage.labels(pool, model).set(err.coverage)
        self.mape.labels(pool, model).set(err.mape)

    def _slo(self, pool: str, kind: str, slo: float | None, actual: float | None) -> None:
        if slo is None or actual is None:
            return
        self.slo_checked.labels(pool, kind).inc()
        if actual > slo:
            self.slo_violations.labels(pool, kind).inc()

    def observed(self, pool: str, pred_ttft: float | None, pred_tpot: float | None, ttft: float,
                 tpot: float | None, slo_ttft: float | None, slo_tpot: float | None) -> None:
        self._pair(pool, "ttft", pred_ttft, ttft)
        self._pair(pool, "tpot", pred_tpot, tpot)
        self._slo(pool, "ttft", slo_ttft, ttft)
        self._slo(pool, "tpot", slo_tpot, tpot)
