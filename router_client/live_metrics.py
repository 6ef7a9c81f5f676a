"""Prometheus metrics of the router client, on the router's own ``CollectorRegistry``.

Counters and histograms are updated on the hot path; the per-pod correction factors and the drift
series (coverage, pinball, MAPE, alarm) are read from their owners at scrape time by
:class:`AdaptiveCollector` (a correction factor decays with time, so it is computed when asked).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from router_client.correction import PodCorrection
from router_client.drift import POOL_WIDE, DriftMonitor
from router_client.membership import STATES, Membership

_DECISION_BUCKETS = (5e-5, 1e-4, 2e-4, 5e-4, 1e-3, 2e-3, 5e-3, 1e-2, 2.5e-2, 5e-2, 0.1, 0.25, 1.0)
_SERIES = ("pool", "pod", "target")


class RouterMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
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
        self.slo_checked = Counter("router_slo_requests_total", "Completed requests carrying an SLO.",
                                   ["pool", "slo"], registry=r)
        self.slo_violations = Counter("router_slo_violations_total", "Completed requests that missed their SLO.",
                                      ["pool", "slo"], registry=r)
        self.discovery_refreshes = Counter("router_discovery_refreshes_total", "Name resolutions of discovered "
                                           "pools by outcome (ok: same pods, changed, error / empty: the last "
                                           "pods kept).", ["pool", "outcome"], registry=r)
        self._fallback_counts: dict[tuple[str, str], float] = {}
        self._decision_series: dict[tuple[str, bool, str], tuple[Counter, Histogram]] = {}
        """The labelled children ``decided`` updates (looked up once per pool, outcome and reason code)."""
        self._shed_counts: dict[tuple[str, str], float] = {}

    def decided(self, pool: str, shed: bool, reason: str, seconds: float) -> None:
        code = reason.split(";", 1)[0].split(" ", 1)[0]
        series = self._decision_series.get((pool, shed, code))
        if series is None:
            outcome = "shed" if shed else "routed"
            series = (self.decisions.labels(pool, outcome, code), self.decision_seconds.labels(pool))
            self._decision_series[(pool, shed, code)] = series
        series[0].inc()
        series[1].observe(seconds)
        if shed:
            key = (pool, code)
            self._shed_counts[key] = self._shed_counts.get(key, 0.0) + 1.0

    def fallback(self, pool: str, reason: str) -> None:
        self.fallbacks.labels(pool, reason).inc()
        key = (pool, reason)
        self._fallback_counts[key] = self._fallback_counts.get(key, 0.0) + 1.0

    def fallback_counts(self) -> dict[tuple[str, str], float]:
        return dict(self._fallback_counts)

    def shed_counts(self) -> dict[tuple[str, str], float]:
        """Decisions without a pod so far by (pool, reason code)."""
        return dict(self._shed_counts)

    def scrape_error(self, pod: str, reason: str) -> None:
        self.scrape_errors.labels(pod, reason).inc()

    def staleness(self, pod: str, seconds: float) -> None:
        self.stale.labels(pod).set(min(seconds, 1e9))

    def discovery_refresh(self, pool: str, outcome: str) -> None:
        self.discovery_refreshes.labels(pool, outcome).inc()

    def forget_pod(self, pod: str) -> None:
        """Drop the per-pod series of a pod that left its pool."""
        self.stale.remove(pod)
        for reason in ("error", "status"):
            self.scrape_errors.remove(pod, reason)

    def sample(self, pool: str, outcome: str, n: int = 1) -> None:
        self.samples.labels(pool, outcome).inc(n)

    def _slo(self, pool: str, kind: str, slo: float | None, actual: float | None) -> None:
        if slo is None or actual is None:
            return
        self.slo_checked.labels(pool, kind).inc()
        if actual > slo:
            self.slo_violations.labels(pool, kind).inc()

    def slo(self, pool: str, ttft: float | None, tpot: float | None, slo_ttft: float | None,
            slo_tpot: float | None) -> None:
        self._slo(pool, "ttft", slo_ttft, ttft)
        self._slo(pool, "tpot", slo_tpot, tpot)


class MembershipCollector(Collector):
    """``router_pool_pods{pool, state}``: each pool's pods by state (serving, joining, leaving), at scrape time."""

    def __init__(self, members: Membership) -> None:
        self._members = members

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        family = GaugeMetricFamily("router_pool_pods", "Pods of the pool by state (serving: candidates; joining: "
                                   "resolved, not scraped yet; leaving: gone, requests in flight).",
                                   labels=["pool", "state"])
        for pool in self._members:
            counts = pool.counts()
            for state in STATES:
                family.add_metric([pool.name, state], counts[state])
        yield family


class AdaptiveCollector(Collector):
    """Correction factors and drift series, per (pool, pod, target), computed at scrape time. Only pods that are
    members of a pool now (``pool_of`` not None) are exported: a pod that left takes its series with it."""

    def __init__(self, correction: PodCorrection, drift: DriftMonitor, pool_of: Callable[[str], str | None],
                 clock: Callable[[], float]) -> None:
        self._correction = correction
        self._drift = drift
        self._pool_of = pool_of
        self._clock = clock

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        now = self._clock()
        factor = GaugeMetricFamily("router_pod_correction", "Per-pod factor applied to the model's predictions.",
                                   labels=_SERIES)
        for pod, target in self._correction.keys():
            pool = self._pool_of(pod)
            if pool is not None:
                factor.add_metric([pool, pod, target], self._correction.factor(pod, target, now))
        yield factor
        families: dict[str, GaugeMetricFamily | CounterMetricFamily] = {
            "pairs": CounterMetricFamily("router_prediction_pairs", "Served (prediction, actual) pairs.",
                                         labels=_SERIES),
            "coverage": GaugeMetricFamily("router_prediction_coverage", "Recent share of actuals <= the prediction "
                                          "the router acted on (time-weighted; pod=\"all\": the pool).",
                                          labels=_SERIES),
            "model_coverage": GaugeMetricFamily("router_model_coverage", "Recent share of actuals <= the raw model "
                                                "prediction (before the per-pod correction).", labels=_SERIES),
            "pinball_ms": GaugeMetricFamily("router_prediction_pinball", "Recent pinball loss (ms) of the prediction "
                                            "the router acted on.", labels=_SERIES),
            "model_pinball_ms": GaugeMetricFamily("router_model_pinball", "Recent pinball loss (ms) of the raw model "
                                                  "prediction.", labels=_SERIES),
            "mape": GaugeMetricFamily("router_prediction_mape", "Recent mean absolute percentage error.",
                                      labels=_SERIES),
            "alarm": GaugeMetricFamily("router_drift_alarm", "1 while coverage has been out of band for "
                                       "drift.alarm_after_s.", labels=_SERIES),
        }
        for key in self._drift.keys():
            state = self._drift.state(*key)
            if state is None or (key[1] != POOL_WIDE and self._pool_of(key[1]) != key[0]):
                continue
            for name, family in families.items():
                family.add_metric(list(key), float(getattr(state, name)))
        yield from families.values()
