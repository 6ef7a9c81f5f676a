"""While the live model is a prior, the prior rescaled to the pool's first rows challenges alongside the fit."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient

from shared.bundle import Calibration, ModelEntry
from tests.trainer.conftest import make_rows, service_of
from tests.trainer.test_poisoning import post
from trainer.rescaled_prior import conformal_factor, rescaled_entry, scale_limits
from trainer.window import STORED_FIELDS


def columns(rows: list[dict[str, Any]]) -> dict[str, np.ndarray]:
    return {k: np.array([float(r.get(k, 0.0)) for r in rows]) for k in STORED_FIELDS}


def test_the_factor_is_the_conformal_order_statistic() -> None:
    assert conformal_factor(np.arange(1.0, 21.0), 0.9) == 19.0  # rank ceil(0.9 x 21) = 19 of 20
    assert conformal_factor(np.arange(1.0, 6.0), 0.9) == 5.0  # too few rows for the rank: the largest
    assert conformal_factor(np.array([np.nan, -1.0, 0.0]), 0.9) == 1.0


def test_a_rescaled_entry_serves_every_quantile_that_many_times_higher(
        client_factory: Callable[..., TestClient]) -> None:
    live = service_of(client_factory()).live.get()
    entry = live.bundle.model_entry("ttft")
    scaled = rescaled_entry(entry, 2.5, 40)
    assert scaled.prior and scaled.training_rows == 40 and scaled.candidate == "prior x2.5"
    for key, cal in (entry.calibrations or {}).items():
        assert scaled.calibrations is not None
        assert scaled.calibrations[key] == Calibration(scale=cal.scale * 2.5, offset=cal.offset * 2.5)
    low, high = scale_limits(entry, 0.9)
    assert 0 < low < 1 < high
    top = rescaled_entry(entry, 15.0, 40)  # x15 puts the higher quantiles past the bound of 16
    assert top.calibrations is not None and max(c.scale for c in top.calibrations.values()) <= 16.0


def _prior_shaped(client: TestClient, n: int, seed: int, level: float) -> list[dict[str, Any]]:
    """TTFT rows ``level`` × the live prior's median with lognormal noise (the prior's shape, another level)."""
    rows = make_rows(n, seed)
    live = service_of(client).live.get()
    median = live.predict_all("ttft", columns(rows))[:, 0]
    noise = np.exp(0.25 * np.random.default_rng(seed).standard_normal(n))
    for r, m, e in zip(rows, median, noise, strict=True):
        r["actual_ttft_ms"] = float(level * m * e)
    return rows


def test_a_pool_three_times_slower_than_the_prior_is_covered_after_twenty_rows(
        client_factory: Callable[..., TestClient]) -> None:
    """20 rows of a pool 3× slower than the prior's level: the fit on 20 rows and the rescaled prior compete on
    the newest rows; the rescaled prior covers and wins, and its p90 covers ~90 % of 2,000 fresh rows (the
    prior covered none: its p90 is 1.3× its median)."""
    client = client_factory(min_samples_for_retrain=20)
    fresh = _prior_shaped(client, 2000, 11, 3.0)
    cols = columns(fresh)
    y = np.array([r["actual_ttft_ms"] for r in fresh])
    before = service_of(client).live.get().predict("ttft", cols)
    post(client, _prior_shaped(client, 20, 12, 3.0))
    assert service_of(client).loop.run_cycle() == 2
    live = service_of(client).live.get()
    assert live.bundle.model_entry("ttft").candidate.startswith("prior x")
    assert np.mean(y <= before) < 0.05
    assert np.mean(y <= live.predict("ttft", cols)) == pytest.approx(0.9, abs=0.07)


def test_the_factor_is_bounded_by_the_primary_quantile_not_the_tail() -> None:
    """A seed whose p99 is calibrated 14x up can still be rescaled x3 at its p90 (the live run that found it:
    after one rescale the p99 reached the bound and every later factor was stuck at 1)."""
    cals = {"0.5": Calibration(scale=1.0), "0.9": Calibration(scale=1.2, offset=0.2),
            "0.99": Calibration(scale=14.0, offset=13.0)}
    entry = ModelEntry(file="ttft.ubj", quantiles=(0.5, 0.9, 0.99), primary_quantile=0.9, calibrations=cals)
    low, high = scale_limits(entry, 0.9)
    assert high == pytest.approx(16.0 / 1.2) and low == pytest.approx(1 / 16 / 1.2)
    scaled = rescaled_entry(entry, 3.0, 10)
    assert scaled.calibrations is not None
    p90 = scaled.calibrations["0.9"]
    assert (p90.scale, p90.offset) == (pytest.approx(3.6), pytest.approx(0.6))
    assert scaled.calibrations["0.99"].scale == 16.0
