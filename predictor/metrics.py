"""Prometheus metrics of the prediction server (own registry, exposed on ``GET /metrics``)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.metrics import MetricWrapperBase

from predictor.holder import ModelHolder

LATENCY_BUCKETS = (0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0, 5.0)
ENDPOINTS = ("predict", "predict_bulk", "predict_bulk_strict", "status", "reload", "healthz", "readyz", "root",
             "metrics")


class PredictorMetrics:
    """All series; request children are pre-bound per endpoint so the hot path only observes."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.requests = Counter("predictor_requests_total", "HTTP requests by endpoint and status code",
                                ["endpoint", "status"], registry=r)
        self.latency = Histogram("predictor_request_duration_seconds", "Server-side request latency",
                                 ["endpoint"], buckets=LATENCY_BUCKETS, registry=r)
        self.rows = Counter("predictor_rows_predicted_total", "Rows predicted (TTFT and TPOT each)",
                            ["endpoint"], registry=r)
        self.sync_failures = Counter("predictor_sync_failures_total",
                                     "Polls of the bundle source that could not reach it", registry=r)
        self.refused = Counter("predictor_bundles_refused_total",
                               "Bundles refused (hash, HMAC, spec, load or smoke failure)", registry=r)
        self.swaps = Counter("predictor_bundle_swaps_total", "Bundles installed", registry=r)
        self.bundle_version = Gauge("predictor_bundle_version", "Version of the live bundle (-1: none)",
                                    registry=r)
        self.bundle_prior = Gauge("predictor_bundle_prior", "1 while the live bundle is the trainer's prior",
                                  registry=r)
        self.last_load = Gauge("predictor_last_model_load_timestamp_seconds",
                               "Unix time the live bundle was loaded (0: none)", registry=r)
        self.sync_age = Gauge("predictor_seconds_since_last_sync",
                              "Seconds since the bundle source last answered (staleness)", registry=r)
        self.auth = Counter("predictor_auth_total", "Guarded requests by endpoint and outcome (ok, open: no token "
                            "configured, missing: 401, invalid: 403)", ["endpoint", "outcome"], registry=r)
        self.unknown_fields = Counter("predictor_unknown_fields_total", "Unknown request fields seen, per name "
                                      "(first 100 names; then <other>)", ["field"], registry=r)
        self._latency_child = {e: self.latency.labels(e) for e in ENDPOINTS}
        self._rows_child = {e: self.rows.labels(e) for e in ENDPOINTS}
        self._request_child: dict[tuple[str, int], MetricWrapperBase] = {}

    def bind(self, holder: ModelHolder) -> None:
        """Gauges read the holder at scrape time."""
        def version() -> float:
            serving = holder.serving
            return -1.0 if serving is None else float(serving.version)

        def prior() -> float:
            serving = holder.serving
            return float(serving is not None and serving.prior)

        def loaded_at() -> float:
            serving = holder.serving
            return 0.0 if serving is None else serving.loaded_at

        self.bundle_version.set_function(version)
        self.bundle_prior.set_function(prior)
        self.last_load.set_function(loaded_at)
        self.sync_age.set_function(holder.seconds_since_sync)

    def observe(self, endpoint: str, status: int, seconds: float, rows: int = 0) -> None:
        key = (endpoint, status)
        child = self._request_child.get(key)
        if child is None:
            child = self._request_child.setdefault(key, self.requests.labels(endpoint, str(status)))
        child.inc()  # type: ignore[attr-defined]
        self._latency_child[endpoint].observe(seconds)
        if rows:
            self._rows_child[endpoint].inc(rows)

    def count_auth(self, endpoint: str, outcome: str) -> None:
        self.auth.labels(endpoint, outcome).inc()

    def count_unknown(self, name: str, n: int) -> None:
        self.unknown_fields.labels(name).inc(n)

    def render(self) -> bytes:
        return generate_latest(self.registry)
