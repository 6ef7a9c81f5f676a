"""Prometheus metrics of one trainer app (own registry, never the global one)."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from shared.bundle import ModelEntry
from shared.features import MODEL_NAMES
from trainer.evaluate import Scores

HISTORY = 5


class TrainerMetrics:
    def __init__(self) -> None:
        self.registry = r = CollectorRegistry(auto_describe=True)
        self.ingested = Counter("trainer_samples_ingested", "Rows acknowledged (durable), per model fed.",
                                ["model"], registry=r)
        self.discarded = Counter("trainer_samples_discarded", "Valid rows with both targets 0 (not stored).",
                                 registry=r)
        self.rejected = Counter("trainer_samples_rejected", "Invalid rows, by reason (validation error type).",
                                ["reason"], registry=r)
        self.requests = Counter("trainer_ingest_requests", "Ingest calls by outcome.", ["outcome"], registry=r)
        self.window_rows = Gauge("trainer_window_rows", "Rows in the training window.", ["model", "part"],
                                 registry=r)
        self.bucket_rows = Gauge("trainer_window_bucket_rows", "Training rows per non-empty bucket.",
                                 ["model", "queue_bucket", "cache_bucket", "prefix_bucket"], registry=r)
        self.durable_rows = Gauge("trainer_durable_rows", "Rows held in the durable log.", registry=r)
        self.durable_bytes = Gauge("trainer_durable_bytes", "Bytes of the durable log.", registry=r)
        self.retrain_seconds = Histogram("trainer_retrain_duration_seconds", "Wall time of a retrain cycle.",
                                         buckets=(0.1, 0.25, 0.5, 1, 2, 3, 5, 10, 20, 60), registry=r)
        self.fit_seconds = Histogram("trainer_fit_duration_seconds", "XGBoost fit time per model.", ["model"],
                                     buckets=(0.05, 0.1, 0.25, 0.5, 1, 2, 3, 5, 10), registry=r)
        self.last_retrain = Gauge("trainer_last_retrain_timestamp_seconds", "End of the last successful "
                                  "retrain cycle (unix time).", registry=r)
        self.failures = Counter("trainer_retrain_failures", "Retrain cycles that failed.", registry=r)
        self.decisions = Counter("trainer_retrain_decisions", "Per-model outcome of champion/challenger.",
                                 ["model", "decision"], registry=r)
        self.live_version = Gauge("trainer_live_bundle_version", "Version of the live bundle.", registry=r)
        self.quarantined = Counter("trainer_samples_quarantined", "Rows stored but kept out of training: a target "
                                   "above LATENCY_QUARANTINE_FACTOR × the live p99 for the row.", registry=r)
        self.released = Counter("trainer_samples_released", "Quarantined rows released into the window (a sustained "
                                "majority from several clients).", registry=r)
        self.quarantine_held = Gauge("trainer_quarantine_rows", "Quarantined rows held now.", registry=r)
        self.live_coverage = Gauge("trainer_live_coverage", "Prequential coverage: share of incoming rows at or "
                                   "below the live model's prediction (rolling window).", ["model"], registry=r)
        self.live_pinball = Gauge("trainer_live_pinball", "Prequential pinball loss of the live model (rolling "
                                  "window).", ["model"], registry=r)
        self.drift_alarm = Gauge("trainer_drift_alarm", "1 while prequential coverage has been outside the band for "
                                 "LATENCY_DRIFT_HOLD_SEC.", ["model"], registry=r)
        self.auth = Counter("trainer_auth", "Guarded requests by endpoint and outcome (ok, open: no token "
                            "configured, missing: 401, invalid: 403).", ["endpoint", "outcome"], registry=r)
        self.unknown_fields = Counter("trainer_unknown_fields", "Unknown request fields seen, per name (first 100 "
                                      "names; then <other>).", ["field"], registry=r)
        self.score = {k: Gauge(f"trainer_model_{k}", f"Holdout {k} of the last fitted model.", ["model"],
                               registry=r) for k in ("coverage", "mae", "rmse", "pinball")}
        self.base = Gauge("trainer_model_base_coefficient", "Coefficient of each physical-base term of the last "
                          "fitted model (ms per unit; term 1 is the constant).", ["model", "term"], registry=r)
        self.history: dict[str, deque[Scores]] = {name: deque(maxlen=HISTORY) for name in MODEL_NAMES}

    def count_auth(self, endpoint: str, outcome: str) -> None:
        self.auth.labels(endpoint=endpoint, outcome=outcome).inc()

    def count_unknown(self, name: str, n: int) -> None:
        self.unknown_fields.labels(field=name).inc(n)

    def count_rejected(self, reasons_per_row: Iterable[set[str]]) -> None:
        for reasons in reasons_per_row:
            for reason in reasons:
                self.rejected.labels(reason=reason).inc()

    def record_scores(self, name: str, scores: Scores) -> None:
        self.history[name].append(scores)
        for key, gauge in self.score.items():
            gauge.labels(model=name).set(getattr(scores, key))

    def record_base(self, name: str, entry: ModelEntry) -> None:
        if entry.base is not None:
            for term, coefficient in zip(entry.base.terms, entry.base.coefficients, strict=True):
                self.base.labels(model=name, term=term).set(coefficient)

    def clear_history(self) -> None:
        for history in self.history.values():
            history.clear()

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
