"""``GET /metrics`` body: the llm-d compatibility lines, then our prometheus-client registry."""

from __future__ import annotations

from shared.features import MODEL_NAMES
from trainer.compat_metrics import bucket_lines, header_lines, importance_lines, prefix_lines, score_lines
from trainer.service import TrainerService
from trainer.window import bucket_triplet

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def _refresh_gauges(service: TrainerService) -> None:
    m, counts = service.metrics, service.window.counts()
    for name in MODEL_NAMES:
        m.window_rows.labels(model=name, part="train").set(counts[name]["train"])
        m.window_rows.labels(model=name, part="holdout").set(counts[name]["test"])
    m.bucket_rows.clear()
    for name in MODEL_NAMES:
        for bucket, n in enumerate(service.window.bucket_counts(name)):
            if n:
                q, c, p = bucket_triplet(bucket)
                m.bucket_rows.labels(model=name, queue_bucket=str(q), cache_bucket=str(c), prefix_bucket=str(p)).set(n)
    m.durable_rows.set(service.log.rows)
    m.durable_bytes.set(service.log.total_bytes)
    m.quarantine_held.set(service.quarantine.held)
    for name, state in service.prequential.state().items():
        if state["coverage"] is not None:
            m.live_coverage.labels(model=name).set(float(state["coverage"]))
            m.live_pinball.labels(model=name).set(float(state["pinball"] or 0.0))
        m.drift_alarm.labels(model=name).set(float(bool(state["alarm"])))


def render(service: TrainerService) -> bytes:
    s = service.settings
    _refresh_gauges(service)
    loaded = service.live.get()
    importances = {} if loaded is None else {
        name: dict(loaded.bundle.model_entry(name).importances
                   or dict.fromkeys(loaded.bundle.model_entry(name).features, 0.0))
        for name in MODEL_NAMES}
    ttft_train, _ = service.window.snapshot("ttft")
    lines = (header_lines(s.model_type, s.objective_type, s.quantile_alpha, s.ensemble_mode)
             + importance_lines(importances)
             + bucket_lines({name: service.window.bucket_counts(name) for name in MODEL_NAMES})
             + prefix_lines(ttft_train)
             + score_lines(s.objective_type, s.quantile_alpha, service.metrics.history))
    return ("\n".join(lines) + "\n").encode() + service.metrics.exposition()
