"""The Grafana dashboard queries only what the services really export.

Every panel's PromQL is reduced to the metric names it selects; each must be among the series that the
running trainer, predictor and router proxy (``observed``: real subprocesses on loopback) expose on
``/metrics``. The committed JSON is the generator's output, and it covers every area an operator needs.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from demo.stack import Stack

REPO = Path(__file__).resolve().parents[2]
DASHBOARD = REPO / "deploy" / "grafana" / "latency-router.json"
PROMQL_WORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless", "bool",
                "offset", "le", "inf", "nan"}
SUFFIXES = {"counter": ("_total", "_created"), "histogram": ("_bucket", "_sum", "_count", "_created"),
            "summary": ("_sum", "_count", "_created"), "gauge": ("",), "untyped": ("",), "info": ("_info",)}
AREAS = {
    "coverage": {"router_prediction_coverage", "trainer_live_coverage", "trainer_model_coverage"},
    "pinball": {"router_prediction_pinball", "trainer_live_pinball", "trainer_model_pinball"},
    "retrain cadence": {"trainer_retrain_decisions_total", "trainer_last_retrain_timestamp_seconds"},
    "ingest": {"trainer_samples_ingested_total", "trainer_durable_rows"},
    "prediction latency": {"predictor_request_duration_seconds_bucket", "router_decision_seconds_bucket"},
    "per-pod traffic": {"latency_router_proxy_decisions_total"},
    "sheds": {"router_decisions_total"},
    "drift": {"router_drift_alarm", "trainer_drift_alarm"},
    "quarantine": {"trainer_quarantine_rows", "trainer_samples_quarantined_total"},
}


def metric_names(expr: str) -> set[str]:
    """Metric names selected by a PromQL expression (functions, keywords, labels and durations removed)."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', "", expr)
    text = re.sub(r"\{[^}]*\}", "", text)
    text = re.sub(r"\[[^\]]*\]", "", text)
    text = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", text)
    names = set()
    for match in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", text):
        word, rest = match.group(), text[match.end():].lstrip()
        if rest.startswith("(") or word.lower() in PROMQL_WORDS:
            continue
        names.add(word)
    return names


def exported(text: str) -> set[str]:
    """Every series name in an exposition, including those of families without samples yet."""
    out = set()
    for family in text_string_to_metric_families(text):
        out.update(sample.name for sample in family.samples)
        out.update(family.name + suffix for suffix in SUFFIXES.get(family.type, ("",)))
    return out


def _queries(dashboard: dict[str, Any]) -> list[tuple[str, str]]:
    return [(panel["title"], target["expr"]) for panel in dashboard["panels"] if panel["type"] != "row"
            for target in panel["targets"]]


@pytest.mark.parametrize(("expr", "names"), [
    ('histogram_quantile(0.9, sum by (le, pool) (rate(a_seconds_bucket{x="y"}[5m])))', {"a_seconds_bucket"}),
    ("time() - b_timestamp_seconds", {"b_timestamp_seconds"}),
    ('sum by (pool) (rate(c_total{outcome="shed"}[1m])) * 60 + d', {"c_total", "d"}),
])
def test_metric_names_are_read_from_promql(expr: str, names: set[str]) -> None:
    assert metric_names(expr) == names


def test_the_committed_dashboard_is_the_generators_output() -> None:
    sys.path.insert(0, str(DASHBOARD.parent))
    try:
        import build_dashboard  # type: ignore[import-not-found]
    finally:
        sys.path.pop(0)
    assert json.loads(DASHBOARD.read_text()) == build_dashboard.build(), "run deploy/grafana/build_dashboard.py"


def test_every_panel_queries_metrics_the_services_export(observed: Stack) -> None:
    urls = [observed.trainer_urls["short"], observed.predictor_urls["short"], observed.router_url]
    with httpx.Client(timeout=30) as client:
        texts = [client.get(url + "/metrics").text for url in urls]
    available = set().union(*(exported(t) for t in texts))
    assert {"trainer_durable_rows", "predictor_bundle_version", "router_decisions_total"} <= available
    dashboard = json.loads(DASHBOARD.read_text())
    queries = _queries(dashboard)
    assert len(queries) >= 30
    used: set[str] = set()
    for title, expr in queries:
        names = metric_names(expr)
        assert names, (title, expr)
        assert names <= available, f"panel {title!r} queries {sorted(names - available)}, not exported"
        used |= names
    for area, metrics in AREAS.items():
        assert metrics <= used, f"no panel for {area}: {sorted(metrics - used)}"
