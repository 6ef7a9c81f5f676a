"""Monotone by construction, checked at publish: a property test over random data sets and fits (every served
quantile of every candidate non-decreasing in the load features, swept to 8× the window's largest value), the
sweep catches a model that falls, and the retrain cycle refuses to publish one, naming the feature and the drop."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import xgboost as xgb
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shared.bundle import assemble, encode_model, in_memory
from shared.features import MODEL_NAMES, FeatureSpec
from shared.model import load_model
from tests.trainer.conftest import make_rows, service_of
from tests.trainer.test_poisoning import post
from trainer import cycle
from trainer.cycle import bundle_meta
from trainer.fit import Candidate, FitParams
from trainer.fitted import fit_model
from trainer.monotone_check import drops, sweep_values
from trainer.store import STORED_FIELDS
from trainer.window import COL, Rows, bucket_ids

SPEC = FeatureSpec()


def random_rows(n: int, seed: int, shape: str) -> Rows:
    """Rows whose latencies follow ``shape`` — including truths that *fall* with load (a router's selection
    effects can make the busiest pods look fast): the served model must stay monotone all the same."""
    rng = np.random.default_rng(seed)
    m = np.zeros((n, len(STORED_FIELDS)))
    for field, high in (("input_token_length", 8000), ("prefill_tokens_in_flight", 30_000), ("num_request_waiting", 12),
                        ("num_request_running", 64), ("decode_tokens_in_flight", 50_000)):
        m[:, COL[field]] = rng.integers(0, high, n)
    m[:, COL["kv_cache_percentage"]] = rng.uniform(0, 1, n)
    m[:, COL["prefix_cache_score"]] = rng.choice([0.0, 0.5, 0.9], n)
    load = m[:, COL["prefill_tokens_in_flight"]] / 30_000
    decode = m[:, COL["decode_tokens_in_flight"]] / 50_000
    ttft, tpot = {"linear": (1 + 3 * load, 1 + 2 * decode), "falling": (3 - 2 * load, 2 - decode),
                  "bumpy": (2 + np.sin(12 * load), 2 + np.cos(9 * decode))}[shape]
    noise = np.exp(0.3 * rng.standard_normal((2, n)))
    m[:, COL["actual_ttft_ms"]] = 50 * ttft * (1 + m[:, COL["input_token_length"]] / 4000) * noise[0]
    m[:, COL["actual_tpot_ms"]] = 8 * tpot * noise[1]
    return Rows(m, np.arange(n), bucket_ids(m), np.zeros(n))


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n=st.integers(12, 900), seed=st.integers(0, 10_000), shape=st.sampled_from(["linear", "falling", "bumpy"]),
       depth=st.integers(1, 6), window=st.booleans(), tree_min_rows=st.sampled_from([0, 100]))
def test_every_fit_is_monotone_along_the_publish_sweep(n: int, seed: int, shape: str, depth: int, window: bool,
                                                       tree_min_rows: int) -> None:
    rows = random_rows(n, seed, shape)
    cut = n - max(2, n // 10)
    params = FitParams(rounds=25, nthread=1, candidates=(Candidate(depth, window),), quantile_rows=2000,
                       tree_min_rows=tree_min_rows, seed=seed)
    for name in MODEL_NAMES:
        fitted = fit_model(SPEC, name, rows.take(slice(0, cut)), rows.take(slice(cut, None)), params)
        model = _load(fitted.name, fitted.files, fitted.entry)
        assert drops(model, SPEC, rows.data, True) == [], (name, fitted.entry.candidate)


def _load(name: str, files: dict[str, bytes], entry: Any) -> Any:
    manifest, all_files = assemble(1, "2026-12-07T00:00:00+00:00", {name: (files, entry)},
                                   bundle_meta(SPEC, FitParams(), prior=False), None)
    return load_model(in_memory(manifest, all_files), name, SPEC, 1)


def falling_ttft(rows: Rows) -> tuple[dict[str, bytes], Any]:
    """A TTFT model no trainer would publish: an unconstrained booster fitted to a latency that falls with the
    prefill tokens in flight, served on its own (no base)."""
    x = SPEC.matrix("ttft", {f: rows.data[:, j] for j, f in enumerate(STORED_FIELDS)})
    y = 500.0 - 0.01 * rows.column("prefill_tokens_in_flight")
    booster = xgb.train({"max_depth": 3, "nthread": 1, "objective": "reg:squarederror"},
                        xgb.DMatrix(x, y, feature_names=list(SPEC.columns("ttft"))), 20)
    identity = {"scale": 1.0, "offset": 0.0}
    return encode_model(booster, "ttft", SPEC.columns("ttft"), {
        "quantiles": [0.9], "primary_quantile": 0.9, "calibration": identity, "calibrations": {"0.9": identity},
        "candidate": "depth3"})


def test_the_sweep_finds_a_model_that_falls_and_names_the_feature() -> None:
    rows = random_rows(400, 1, "linear")
    files, entry = falling_ttft(rows)
    found = drops(_load("ttft", files, entry), SPEC, rows.data, True)
    by_field = {d.field: d for d in found}
    assert "prefill_tokens_in_flight" in by_field
    drop = by_field["prefill_tokens_in_flight"]
    assert drop.after_ms < drop.before_ms and drop.to > drop.at and drop.quantile == 0.9
    assert "TTFT p90 falls from" in drop.describe() and "prefill_tokens_in_flight" in drop.describe()
    assert drop.before_ms - drop.after_ms > 10.0  # the fall is the model's, not float noise


def test_the_sweep_reaches_eight_times_the_window_and_stops_at_a_fields_bound() -> None:
    values = sweep_values(20_000.0, None)
    assert values[0] == 0.0 and values[-1] == pytest.approx(160_000.0) and np.all(np.diff(values) > 0)
    assert sweep_values(0.6, 1.0)[-1] == 1.0  # KV use never past 100 %


def test_the_cycle_refuses_a_model_that_falls_and_logs_the_feature_and_the_drop(
        client_factory: Callable[..., TestClient], caplog: pytest.LogCaptureFixture,
        monkeypatch: pytest.MonkeyPatch) -> None:
    real = cycle.fit_model

    def falling(*args: Any, **kwargs: Any) -> Any:
        fitted = real(*args, **kwargs)
        if fitted.name != "ttft":
            return fitted
        files, entry = falling_ttft(args[2])
        return dataclasses.replace(fitted, files=files, entry=entry)

    monkeypatch.setattr(cycle, "fit_model", falling)
    client = client_factory(min_samples_for_retrain=30)
    post(client, make_rows(300, seed=3) + make_rows(300, seed=4, kind="tpot"))
    with caplog.at_level(logging.INFO, logger="trainer.retrain"):
        version = service_of(client).loop.run_cycle()
    line = next(r.getMessage() for r in caplog.records if r.getMessage().startswith("TTFT model trained"))
    assert "not monotone: TTFT p90 falls from" in line and "prefill_tokens_in_flight" in line, line
    live = service_of(client).live.get()
    assert version == 2 and live.bundle.model_entry("ttft").prior  # TPOT published, TTFT kept the prior's
    assert not live.bundle.model_entry("tpot").prior
    assert service_of(client).metrics.decisions.labels(model="ttft", decision="refused")._value.get() == 1
