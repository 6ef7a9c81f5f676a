"""Quarantine and prequential error through the real app: poisoned rows are stored but never trained on,
survive a restart as quarantined, and are released only by a sustained majority from several clients."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

import numpy as np
import orjson
import pytest
from fastapi.testclient import TestClient

from shared.columns import to_columns

PROBE = {"kv_cache_percentage": 0.3, "input_token_length": 1500, "num_request_waiting": 0,
         "num_request_running": 10, "num_tokens_generated": 0, "prefix_cache_score": 0.0}


def svc(client: TestClient) -> Any:
    return client.app.state.service  # type: ignore[attr-defined]


def post(client: TestClient, entries: list[dict[str, Any]]) -> None:
    resp = client.post("/add_training_data_bulk", content=json.dumps({"entries": entries}),
                       headers={"content-type": "application/json"})
    assert resp.status_code == 202, resp.text


def served_ttft(client: TestClient) -> float:
    return float(svc(client).live.get().predict("ttft", to_columns([PROBE], ["probe"]))[0])


def scaled(rows: list[dict[str, Any]], factor: float) -> list[dict[str, Any]]:
    return [{**r, "actual_ttft_ms": r["actual_ttft_ms"] * factor, "actual_tpot_ms": r["actual_tpot_ms"] * factor}
            for r in rows]


def trained(client_factory: Callable[..., TestClient], rows_of: Callable[..., list], **settings: Any) -> TestClient:
    client = client_factory(**settings)
    post(client, rows_of(3000))
    assert svc(client).loop.run_cycle() is not None
    return client


def test_a_burst_of_600x_rows_from_one_client_is_quarantined(client_factory: Callable[..., TestClient],
                                                             rows_of: Callable[..., list]) -> None:
    client = trained(client_factory, rows_of)
    before = served_ttft(client)
    window_before = svc(client).window.counts()["ttft"]
    burst = scaled(rows_of(10_000, seed=7), 600.0)
    for i in range(0, len(burst), 2500):
        post(client, burst[i:i + 2500])
    assert svc(client).quarantine.held == 10_000
    assert svc(client).window.counts()["ttft"] == window_before
    post(client, rows_of(300, seed=8))  # normal traffic goes on
    for _ in range(3):
        svc(client).loop.run_cycle()
        assert served_ttft(client) < 2 * before
    text = client.get("/metrics").text
    assert "trainer_samples_quarantined_total 10000.0" in text and "trainer_quarantine_rows 10000.0" in text


def test_quarantined_rows_stay_quarantined_after_a_restart(client_factory: Callable[..., TestClient],
                                                           rows_of: Callable[..., list]) -> None:
    client = trained(client_factory, rows_of)
    post(client, scaled(rows_of(500, seed=3), 600.0))
    counts = svc(client).window.counts()
    client.__exit__(None, None, None)
    again = client_factory()
    assert svc(again).quarantine.held == 500
    assert svc(again).window.counts() == counts
    assert svc(again).log.rows == 3000 + 500


def test_a_sustained_majority_from_two_clients_is_released(client_factory: Callable[..., TestClient],
                                                           rows_of: Callable[..., list],
                                                           caplog: pytest.LogCaptureFixture) -> None:
    client = trained(client_factory, rows_of, quarantine_sustain_intervals=2, quarantine_interval_sec=0.0)
    service = svc(client)
    slow = scaled(rows_of(400, seed=5), 300.0)
    body = orjson.dumps({"entries": slow[:200]})
    service.ingestor.ingest(body, False, source="10.0.0.1")
    assert service.quarantine.held == 200
    with caplog.at_level(logging.WARNING, logger="trainer.ingest"):
        service.ingestor.ingest(orjson.dumps({"entries": slow[200:]}), False, source="10.0.0.2")
    assert service.quarantine.held == 0 and any("quarantine released 400 rows" in r.getMessage()
                                                for r in caplog.records)
    assert "trainer_samples_released_total 400.0" in client.get("/metrics").text
    client.__exit__(None, None, None)
    again = client_factory(quarantine_sustain_intervals=2, quarantine_interval_sec=0.0)
    assert svc(again).quarantine.held == 0  # the release record is replayed too


def test_one_client_alone_is_never_released(client_factory: Callable[..., TestClient],
                                            rows_of: Callable[..., list]) -> None:
    client = trained(client_factory, rows_of, quarantine_sustain_intervals=2, quarantine_interval_sec=0.0)
    service = svc(client)
    slow = scaled(rows_of(600, seed=5), 300.0)
    for i in range(0, 600, 100):
        service.ingestor.ingest(orjson.dumps({"entries": slow[i:i + 100]}), False, source="10.0.0.9")
    assert service.quarantine.held == 600


def test_prequential_coverage_and_drift_alarm(client_factory: Callable[..., TestClient],
                                              rows_of: Callable[..., list],
                                              caplog: pytest.LogCaptureFixture) -> None:
    client = trained(client_factory, rows_of, drift_hold_sec=0.0)
    post(client, rows_of(1000, seed=11))
    state = svc(client).prequential.state()["ttft"]
    assert state["rows"] == 500 and 0.75 <= float(state["coverage"]) <= 1.0 and not state["alarm"]
    with caplog.at_level(logging.INFO, logger="trainer.drift"):
        post(client, scaled(rows_of(4000, seed=12), 3.0))
        assert svc(client).prequential.state()["ttft"]["alarm"]
        post(client, rows_of(6000, seed=13))
    messages = [r.getMessage() for r in caplog.records]
    assert sum("TTFT drift alarm:" in m for m in messages) == 1
    assert sum("TTFT drift alarm cleared" in m for m in messages) == 1
    text = client.get("/metrics").text
    assert 'trainer_live_coverage{model="ttft"}' in text and 'trainer_drift_alarm{model="ttft"} 0.0' in text
    assert np.isfinite(float(svc(client).prequential.state()["tpot"]["pinball"]))


def coverage_on(client: TestClient, rows: list[dict[str, Any]]) -> float:
    cols = to_columns(rows, ["rows"], targets=True)
    pred = svc(client).live.get().predict("ttft", cols)
    return float(np.mean(cols["actual_ttft_ms"] <= pred))


def test_a_real_2x_slowdown_of_the_pool_is_learned_within_two_cycles(client_factory: Callable[..., TestClient],
                                                                      rows_of: Callable[..., list]) -> None:
    client = trained(client_factory, rows_of)
    slow = scaled(rows_of(6000, seed=21, kind="ttft"), 2.0)
    assert coverage_on(client, slow[4000:]) < 0.7  # the live model does not know yet
    published = []
    for part in (slow[:2000], slow[2000:4000]):
        post(client, part)
        published.append(svc(client).loop.run_cycle())
    assert any(v is not None for v in published), published
    assert coverage_on(client, slow[4000:]) >= 0.85


def test_a_one_off_burst_that_moves_the_probe_grid_is_held(client_factory: Callable[..., TestClient],
                                                           rows_of: Callable[..., list],
                                                           caplog: pytest.LogCaptureFixture) -> None:
    """8× rows (below the quarantine line) once, then normal traffic: the shift never persists, so the
    served model does not move by the burst's factor."""
    client = trained(client_factory, rows_of)
    before = served_ttft(client)
    post(client, scaled(rows_of(3000, seed=31, kind="ttft"), 8.0))
    with caplog.at_level(logging.INFO, logger="trainer.retrain"):
        svc(client).loop.run_cycle()
        post(client, rows_of(1500, seed=32))
        svc(client).loop.run_cycle()
    assert served_ttft(client) < 2 * before
    assert any("held until it persists" in r.getMessage() for r in caplog.records)
