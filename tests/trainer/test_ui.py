"""The trainer's status page data (``/ui/data``) and page (``/ui``), in-process with the retrain loop off, and
the bounded history behind them (``trainer.history``)."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import numpy as np
from fastapi.testclient import TestClient

from shared.bundle import BaseEntry, ModelEntry
from shared.charts.coefficients import term_label
from tests.trainer.conftest import service_of
from trainer.evaluate import Scores
from trainer.fitted import FittedModel
from trainer.history import IngestRate, LiveSeries, RetrainHistory, TrainerHistory


class FakeClock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def _fill(client: TestClient, rows_of: Callable[..., list[dict[str, Any]]], cycles: int) -> None:
    for k in range(cycles):
        assert client.post("/add_training_data_bulk", json={"entries": rows_of(400, seed=k)}).status_code == 202
        service_of(client).loop.run_cycle()


def test_ui_data_holds_the_retrain_history_live_error_and_recent_predictions(
        client_factory: Callable[..., TestClient], rows_of: Callable[..., list[dict[str, Any]]]) -> None:
    client = client_factory(min_samples_for_retrain=50)
    _fill(client, rows_of, 3)
    doc = client.get("/ui/data", params={"recent": 50}).json()
    status = client.get("/data/status").json()
    assert doc["durable"] == status["durable"] and doc["ingest"]["total"] == 1200
    ttft = doc["models"]["ttft"]
    assert len(ttft["retrains"]) == 3 and ttft["retrains"][0]["decision"] == "published"
    first = ttft["retrains"][0]
    assert first["reason"].startswith("published v") and first["version"] == 2 and first["rows"] > 0
    assert set(first["selection"]) == {"base", "depth6", "depth4-window"}
    assert first["candidate"] in first["selection"] and first["selection_metric"] == "mae_ms"
    assert ttft["window"]["train"] == status["training_data"]["ttft_samples"]
    recent = ttft["recent"]
    assert recent["n"] == 50 and set(recent["predicted"]) == {"0.5", "0.9", "0.99"} and recent["primary"] == "0.9"
    assert all(a <= b <= c for a, b, c in zip(*(recent["predicted"][q] for q in ("0.5", "0.9", "0.99")), strict=True))
    assert 0.0 <= recent["coverage"] <= 1.0
    assert ttft["live"]["rows"] > 0 and len(ttft["live_series"]) >= 1  # rows after the first publish were predicted
    assert ttft["live_entry"]["candidate"] == ttft["retrains"][-1]["candidate"] or ttft["retrains"][-1][
        "decision"] != "published"
    assert abs(sum(ttft["live_entry"]["importances"].values()) - 1.0) < 1e-6
    live_base = service_of(client).live.get().bundle.model_entry("ttft").base
    base = ttft["base"]
    assert base["live"] == {"version": doc["bundle"]["version"], "rows": live_base.rows, "source": live_base.source,
                            "coefficients": dict(zip(live_base.terms, live_base.coefficients, strict=True))}
    assert base["terms"][0] == "1" and set(base["terms"]) == set(live_base.terms) and ttft["live_entry"]["base"]
    assert [p["published"] for p in base["series"]] == [r["decision"] == "published" for r in ttft["retrains"]]
    assert [p["coefficients"] for p in base["series"]] == [r["base"]["coefficients"] for r in ttft["retrains"]]
    assert all(p["source"] == "fit" and p["rows"] > 0 and p["coefficients"]["1"] >= 0 for p in base["series"])


def test_ui_page_is_html_with_charts_and_the_json_numbers(
        client_factory: Callable[..., TestClient], rows_of: Callable[..., list[dict[str, Any]]]) -> None:
    client = client_factory(min_samples_for_retrain=50)
    _fill(client, rows_of, 2)
    page = client.get("/ui")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    html = page.text
    assert '<meta http-equiv="refresh" content="5">' in html and html.count('<svg class="chart') >= 9
    durable = client.get("/data/status").json()["durable"]["rows"]
    assert f'data-key="durable.rows" data-value="{durable}"' in html
    assert re.search(r'data-key="models.ttft.retrains.1.pinball" data-value="[0-9.]+"', html)
    doc = client.get("/ui/data").json()
    for name in ("ttft", "tpot"):
        base = doc["models"][name]["base"]
        for term, value in base["live"]["coefficients"].items():
            assert f'data-key="models.{name}.base.live.coefficients.{term}" data-value="{value!r}"' in html
            assert f'aria-label="{name.upper()} base: {term_label(term)}"' in html
        last = len(base["series"]) - 1
        assert f'data-key="models.{name}.base.series.{last}.coefficients.1"' in html
    assert all(f'<td class="l">{unit}</td>' in html for unit in ("ms", "ms/token", "ms/request", "ms/token²"))
    assert "src=" not in html and "<script" not in html  # nothing to load: works offline
    assert '<meta http-equiv="refresh"' not in client.get("/ui", params={"refresh": 0}).text


def test_ui_before_any_data_renders_empty_charts(client: TestClient) -> None:
    html = client.get("/ui").text
    assert "No retrain yet" in html and 'class="chart empty"' in html
    assert client.get("/ui/data").json()["models"]["tpot"]["recent"]["n"] == 0


def test_ui_query_parameters_are_validated(client: TestClient) -> None:
    for params in ({"recent": -1}, {"recent": 5001}, {"refresh": "x"}):
        resp = client.get("/ui", params=params)
        assert resp.status_code == 422 and resp.json()["detail"][0]["loc"][0] == "query", params


def test_retrain_history_is_bounded_per_model() -> None:
    clock = FakeClock()
    history = RetrainHistory(size=3, clock=clock)
    for k in range(5):
        scores = Scores(10, 1.0 + k, 2.0, 0.9, 0.5)
        entry = ModelEntry(file="ttft.ubj", candidate="depth6", location_rounds=7, quantile_rounds=k,
                           selection={"depth6": 0.2}, holdout_rows=10,
                           base=BaseEntry(terms=("1", "num_request_waiting"), coefficients=(20.0 + k, 0.5), rows=90,
                                          source="fit") if k else None)
        fitted = FittedModel("ttft", {}, entry, scores, Scores(5, 1.0, 1.0, 0.8, 0.4), 0.25, np.zeros(1))
        history.record("ttft", 100 * k, fitted, "published", k + 2, f"published v{k + 2}", None)
        clock.now += 1
    records = history.records("ttft")
    assert [r.quantile_rounds for r in records] == [2, 3, 4] and records[-1].mae == 5.0
    assert records[-1].reference_metrics["coverage"] == 0.8 and records[-1].at == 1004.0
    assert records[-1].as_dict()["base"] == {"coefficients": {"1": 24.0, "num_request_waiting": 0.5}, "rows": 90,
                                             "source": "fit"}
    assert history.records("tpot") == [] and TrainerHistory().retrains.records("tpot") == []


def test_live_series_keeps_one_point_per_interval_and_every_alarm_change() -> None:
    clock = FakeClock()
    series = LiveSeries(every_s=2.0, size=3, clock=clock)
    for step in range(14):
        series.observe("ttft", 0.9, 1.0, 100 * step, False)
        clock.now += 0.5
    points = series.points("ttft")
    assert len(points) == 3 and [p.rows for p in points] == [400, 800, 1200]  # every 4th batch, newest 3 kept
    series.alarm("ttft", True, 0.5)
    assert [(e.model, e.raised) for e in series.events()] == [("ttft", True)] and series.points("tpot") == []


def test_ingest_rate_bins_rows_and_fills_quiet_bins_with_zero() -> None:
    clock = FakeClock(100.0)
    rate = IngestRate(bin_s=5.0, bins=4, clock=clock)
    assert rate.series() == []
    rate.add(50)
    clock.now = 112.0
    rate.add(20)
    clock.now = 115.0  # a new, empty bin started
    assert rate.total == 70
    assert rate.series() == [(100.0, 10.0), (105.0, 0.0), (110.0, 4.0), (115.0, 0.0)]
    clock.now = 117.0
    rate.add(10)
    assert rate.series()[-1] == (115.0, 5.0)  # the current bin is still filling: 10 rows over 2 s
