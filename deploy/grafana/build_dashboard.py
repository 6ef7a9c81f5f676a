"""Writes ``latency-router.json``: the Grafana dashboard for the trainer's, predictors' and router's metrics.

``python deploy/grafana/build_dashboard.py`` regenerates the JSON (the test ``tests/observe/test_grafana.py``
checks that the committed file is this script's output and that every metric a panel queries is one the
running services export). Import it in Grafana (Dashboards → Import) and pick the Prometheus data source.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

OUT = Path(__file__).with_name("latency-router.json")
Q = "histogram_quantile({q}, sum by (le, {by}) (rate({m}_bucket[5m])))"

# (title, unit, [(expr, legend)], extra defaults) per panel; rows of two panels.
ROWS: list[tuple[str, list[tuple[str, str, list[tuple[str, str]], dict[str, Any]]]]] = [
    ("Predictions as the router sees them (served pairs)", [
        ("Coverage of the p90 the router acted on (target 0.9)", "percentunit",
         [('router_prediction_coverage{pod="all"}', "{{pool}} {{target}}"),
          ('router_model_coverage{pod="all"}', "{{pool}} {{target}} raw model")], {"min": 0, "max": 1}),
        ("Pinball loss (ms)", "ms",
         [('router_prediction_pinball{pod="all"}', "{{pool}} {{target}}"),
          ('router_model_pinball{pod="all"}', "{{pool}} {{target}} raw model")], {}),
        ("TTFT p90: predicted at dispatch vs measured", "s",
         [(Q.format(q=0.9, by="pool", m="inference_objective_request_predicted_ttft_seconds"), "{{pool}} predicted"),
          (Q.format(q=0.9, by="pool", m="inference_objective_request_ttft_seconds"), "{{pool}} measured")], {}),
        ("TPOT p90: predicted at dispatch vs measured", "s",
         [(Q.format(q=0.9, by="pool", m="inference_objective_request_predicted_tpot_seconds"), "{{pool}} predicted"),
          (Q.format(q=0.9, by="pool", m="inference_objective_request_tpot_seconds"), "{{pool}} measured")], {}),
        ("Per-pod correction factor", "none", [("router_pod_correction", "{{pod}} {{target}}")], {}),
        ("Drift alarms (1 = coverage out of band)", "none",
         [("router_drift_alarm", "router {{pool}} {{pod}} {{target}}"), ("trainer_drift_alarm", "trainer {{model}}")],
         {"min": 0, "max": 1}),
    ]),
    ("Traffic", [
        ("Requests per second per pod", "reqps",
         [("sum by (pool, pod) (rate(latency_router_proxy_decisions_total[1m]))", "{{pool}} {{pod}}")], {}),
        ("Sheds (429) and fallback decisions per second", "reqps",
         [('sum by (pool, reason) (rate(router_decisions_total{outcome="shed"}[5m]))', "shed {{pool}} {{reason}}"),
          ("sum by (pool, reason) (rate(router_prediction_fallbacks_total[5m]))", "fallback {{pool}} {{reason}}")],
         {}),
        ("Routing decision time p99 (incl. predictor wait)", "s",
         [(Q.format(q=0.99, by="pool", m="router_decision_seconds"), "{{pool}}"),
          ("histogram_quantile(0.99, sum by (le) (rate(latency_router_proxy_overhead_seconds_bucket[5m])))",
           "proxy overhead")], {}),
        ("Training samples reported by the router", "rowsps",
         [("sum by (pool, outcome) (rate(router_training_samples_total[1m]))", "{{pool}} {{outcome}}")], {}),
    ]),
    ("Trainer", [
        ("Coverage: live (prequential) and last retrain's holdout", "percentunit",
         [("trainer_live_coverage", "{{instance}} {{model}} live"),
          ("trainer_model_coverage", "{{instance}} {{model}} holdout")], {"min": 0, "max": 1}),
        ("Pinball loss (ms): live and holdout", "ms",
         [("trainer_live_pinball", "{{instance}} {{model}} live"),
          ("trainer_model_pinball", "{{instance}} {{model}} holdout")], {}),
        ("Retrain cadence (per minute) and seconds since the last retrain", "none",
         [("sum by (instance, decision) (rate(trainer_retrain_decisions_total[5m])) * 60", "{{instance}} {{decision}}"),
          ("time() - trainer_last_retrain_timestamp_seconds", "{{instance}} s since last"),
          ("rate(trainer_retrain_failures_total[5m]) * 60", "{{instance}} failures")], {}),
        ("Retrain cycle duration p90", "s",
         [(Q.format(q=0.9, by="instance", m="trainer_retrain_duration_seconds"), "{{instance}}")], {}),
        ("Ingest: rows per second and durable rows", "rowsps",
         [("sum by (instance, model) (rate(trainer_samples_ingested_total[1m]))", "{{instance}} {{model}}"),
          ("trainer_durable_rows", "{{instance}} durable rows")], {}),
        ("Quarantine: rows held and quarantined per second", "none",
         [("trainer_quarantine_rows", "{{instance}} held"),
          ("rate(trainer_samples_quarantined_total[5m])", "{{instance}} quarantined/s"),
          ("rate(trainer_samples_released_total[5m])", "{{instance}} released/s")], {}),
    ]),
    ("Predictors", [
        ("Prediction latency p50 / p99 (server side)", "s",
         [(Q.format(q=0.5, by="instance, endpoint", m="predictor_request_duration_seconds"),
           "{{instance}} {{endpoint}} p50"),
          (Q.format(q=0.99, by="instance, endpoint", m="predictor_request_duration_seconds"),
           "{{instance}} {{endpoint}} p99")], {}),
        ("Bundle version: trainer live vs predictors", "none",
         [("trainer_live_bundle_version", "trainer {{instance}}"),
          ("predictor_bundle_version", "predictor {{instance}}"),
          ("predictor_bundle_prior", "predictor {{instance}} prior")], {}),
        ("Rows predicted per second", "rowsps",
         [("sum by (instance, endpoint) (rate(predictor_rows_predicted_total[1m]))", "{{instance}} {{endpoint}}")], {}),
        ("Bundle sync: failures and refusals per minute", "none",
         [("rate(predictor_sync_failures_total[5m]) * 60", "{{instance}} sync failures"),
          ("rate(predictor_bundles_refused_total[5m]) * 60", "{{instance}} refused")], {}),
    ]),
]


def _panel(ident: int, title: str, unit: str, queries: list[tuple[str, str]], extra: dict[str, Any], x: int,
           y: int) -> dict[str, Any]:
    return {"id": ident, "type": "timeseries", "title": title, "datasource": {"type": "prometheus",
                                                                            "uid": "${datasource}"},
            "gridPos": {"h": 8, "w": 12, "x": x, "y": y},
            "fieldConfig": {"defaults": {"unit": unit, **extra}, "overrides": []},
            "options": {"legend": {"displayMode": "list", "placement": "bottom"}, "tooltip": {"mode": "multi"}},
            "targets": [{"refId": chr(65 + i), "expr": expr, "legendFormat": legend,
                         "datasource": {"type": "prometheus", "uid": "${datasource}"}}
                        for i, (expr, legend) in enumerate(queries)]}


def build() -> dict[str, Any]:
    panels: list[dict[str, Any]] = []
    y, ident = 0, 1
    for row_title, row_panels in ROWS:
        panels.append({"id": ident, "type": "row", "title": row_title, "collapsed": False, "panels": [],
                       "gridPos": {"h": 1, "w": 24, "x": 0, "y": y}})
        ident, y = ident + 1, y + 1
        for i, (title, unit, queries, extra) in enumerate(row_panels):
            panels.append(_panel(ident, title, unit, queries, extra, 12 * (i % 2), y + 8 * (i // 2)))
            ident += 1
        y += 8 * ((len(row_panels) + 1) // 2)
    return {
        "title": "latency-router", "uid": "latency-router", "tags": ["latency-router", "llm-d"],
        "description": "Trainer, predictors and router of latency-router (metric names: trainer/, predictor/, "
                       "router_client/ READMEs).",
        "schemaVersion": 39, "version": 1, "editable": True, "refresh": "10s", "timezone": "utc",
        "time": {"from": "now-1h", "to": "now"},
        "templating": {"list": [{"name": "datasource", "label": "Prometheus", "type": "datasource",
                                 "query": "prometheus", "current": {}, "hide": 0}]},
        "annotations": {"list": []}, "panels": panels,
    }


if __name__ == "__main__":
    OUT.write_text(json.dumps(build(), indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"wrote {OUT}")
