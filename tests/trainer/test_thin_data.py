"""From the prior to learned models without a dip: what a fit on a few dozen rows may serve and replace.

Exact finite-sample conformal ranks, a calibration set that is large enough while data is thin, the prior's spread
as a floor that fades with data, and a challenger that covers worse than the live model on the newest rows never
replacing it."""

from __future__ import annotations

import dataclasses
import logging
import os
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient
from pydantic import ValidationError

from shared.features import TARGET_OF, FeatureSpec
from shared.model import quantile_key
from shared.trainer_settings import TrainerSettings
from tests.trainer.conftest import make_rows, service_of
from tests.trainer.test_fit_bundle import fitted_bundle, window_rows
from tests.trainer.test_poisoning import post, scaled
from trainer import cycle
from trainer.adaptive import AdaptiveLevel
from trainer.calibrate import conformal_rank, log_offset, spread_floor, spread_floors
from trainer.fit import FitParams, training_columns
from trainer.fitted import MIN_NEWEST, fit_model, newest_split
from trainer.loop import lower_priority
from trainer.window import COL, Rows, bucket_ids

SPEC = FeatureSpec()
PARAMS = FitParams(rounds=60, nthread=1)


@pytest.mark.parametrize(("n", "rank"), [(1, 1), (8, 8), (9, 9), (19, 18), (99, 90), (1999, 1800)])
def test_the_conformal_rank_is_the_finite_sample_one(n: int, rank: int) -> None:
    assert conformal_rank(n, 0.9) == rank


def test_the_conformal_offset_covers_a_new_row_with_probability_alpha() -> None:
    """19 exchangeable residuals: the 18th smallest covers a 20th with probability exactly 18/20."""
    rng = np.random.default_rng(0)
    resid = 0.3 * rng.standard_normal((20_000, 20))  # inside the scale clamp
    covered = [resid[i, 19] <= log_offset(np.zeros(19), np.expm1(resid[i, :19]), 0.9) for i in range(20_000)]
    assert np.mean(covered) == pytest.approx(0.9, abs=0.006)


def test_the_empirical_rule_takes_the_quantile_only_while_the_conformal_rank_is_the_largest() -> None:
    resid = np.r_[np.linspace(0.0, 0.3, 11), 2.0]  # 12 rows: the conformal rank (12) is the outlier
    y = np.expm1(resid)
    assert log_offset(np.zeros(12), y, 0.9) == pytest.approx(1.386, abs=1e-3)  # clamped to the scale bound 4
    assert log_offset(np.zeros(12), y, 0.9, rule="empirical") == pytest.approx(np.quantile(resid, 0.9))
    many = np.r_[np.linspace(0.0, 0.3, 29), 2.0]  # 30 rows: rank 28 < 30, both rules agree
    assert log_offset(np.zeros(30), np.expm1(many), 0.9, rule="empirical") == log_offset(
        np.zeros(30), np.expm1(many), 0.9)


def test_the_thin_empirical_setting_lists_known_models_and_refuses_others() -> None:
    assert TrainerSettings().thin_empirical == ("tpot",)
    assert TrainerSettings(thin_empirical_quantile=" TTFT, tpot").thin_empirical == ("ttft", "tpot")
    assert TrainerSettings(thin_empirical_quantile="").thin_empirical == ()
    with pytest.raises(ValidationError, match="thin_empirical_quantile[\\s\\S]*unknown model 'e2e'"):
        TrainerSettings(thin_empirical_quantile="ttft,e2e")


def test_one_outlier_does_not_set_a_thin_tpot_p90_but_still_sets_a_thin_ttft_one() -> None:
    """``FitParams.thin_empirical`` (TPOT by default): twelve rows, one 8× slower than the rest."""
    rows = window_rows(12, 3)
    for target in ("actual_ttft_ms", "actual_tpot_ms"):
        rows.data[5, COL[target]] *= 8.0
    params = FitParams(rounds=30, nthread=1, tree_min_rows=100)
    p90 = {}
    for name in ("ttft", "tpot"):
        fitted = fit_model(SPEC, name, rows.take(slice(0, 11)), rows.take(slice(11, None)), params)
        p90[name] = fitted.entry.calibrations[quantile_key(0.9)].scale
    assert p90["tpot"] < 2.0 < p90["ttft"], p90
    both = fit_model(SPEC, "ttft", rows.take(slice(0, 11)), rows.take(slice(11, None)),
                     dataclasses.replace(params, thin_empirical=("ttft", "tpot")))
    assert both.entry.calibrations[quantile_key(0.9)].scale < 2.0


def test_thin_data_grows_the_newest_rows_from_the_newest_train_rows() -> None:
    rows = window_rows(60)
    train, newest = newest_split(rows.take(slice(0, 54)), rows.take(slice(54, None)))
    assert (len(train), len(newest)) == (45, 15) and newest.seq.tolist() == list(range(45, 60))
    big = window_rows(5000)
    train, newest = newest_split(big.take(slice(0, 4500)), big.take(slice(4500, None)))
    assert (len(train), len(newest)) == (4500, 500)
    train, newest = newest_split(big.take(slice(0, 4950)), big.take(slice(4950, None)))
    assert len(newest) == MIN_NEWEST and newest.seq[0] == 5000 - MIN_NEWEST


def test_the_prior_spread_floor_fades_with_data() -> None:
    raw = location = np.zeros(10)
    p90 = np.log(1.3)
    assert spread_floor(raw, location, 0.9, 0, 200) == pytest.approx(p90)
    assert spread_floor(raw, location, 0.9, 200, 200) == pytest.approx(p90 / 2)
    assert spread_floor(raw, location, 0.9, 100_000, 200) < 0.001
    assert spread_floor(raw + 0.1, location, 0.9, 200, 200) == pytest.approx(p90 / 2 - 0.1)
    assert spread_floor(raw, location, 0.5, 0, 200) == -np.inf  # a median is what the rows say it is
    assert spread_floor(raw, location, 0.9, 0, 0) == -np.inf


def test_the_floor_is_above_the_calibrated_median_so_the_median_stays_free() -> None:
    """A base alone (every quantile's raw = the base) that over-predicts the median by 10 %: the p50 offset goes
    down to the rows' median and the p90 floor sits above that median, not above the base."""
    rng = np.random.default_rng(0)
    raw = np.zeros(500)
    y = np.expm1(np.log(0.9) + 0.05 * rng.standard_normal(500) + 0.0)
    floors = spread_floors(np.column_stack([raw, raw]), y, (0.5, 0.9), 500, 200)
    median = float(np.median(np.log1p(y)))
    assert floors[0] == -np.inf
    assert floors[1] == pytest.approx(median + np.log(1.3) * 200 / 700, abs=0.01)


def _coverage(fitted_rows: Rows, hold: Rows, fresh: Rows, name: str, params: FitParams = PARAMS) -> float:
    loaded = fitted_bundle(fitted_rows, hold, params)
    served = loaded.predict(name, training_columns(name, fresh, True))
    return float(np.mean(fresh.column(TARGET_OF[name]) <= served))


@pytest.mark.parametrize("n", [40, 60, 150])
def test_a_thin_data_fit_covers_fresh_rows_from_the_same_distribution(n: int) -> None:
    """Averaged over seeds (one fit on a few dozen rows may be unlucky, the rule must not be), the served p90 of
    a fit on ``n`` rows covers ≥ 0.85 of fresh rows."""
    cover = []
    for seed in range(6):
        rows = window_rows(n, seed)
        split = n - n // 10
        cover.append(_coverage(rows.take(slice(0, split)), rows.take(slice(split, None)), window_rows(3000, 99),
                               "ttft"))
    assert np.mean(cover) >= 0.85 and min(cover) >= 0.7, cover


def _tight_tpot(n: int, seed: int, level: float = 1.0) -> Rows:
    """TPOT of a quiet pool: 3.2 ms, ±1 %, whatever the features say."""
    rows = window_rows(n, seed)
    data = rows.data.copy()
    data[:, COL["actual_tpot_ms"]] = level * 3.2 * np.exp(0.01 * np.random.default_rng(seed).standard_normal(n))
    return Rows(data, rows.seq, bucket_ids(data), rows.wall)


def test_a_thin_fit_keeps_the_prior_spread_so_a_small_drift_does_not_collapse_coverage() -> None:
    """The demo's dip: 30 rows of a quiet pool say p90 = median + 1 %; 10 s later the pool is 8 % slower. Without
    the floor the served p90 covers none of the new rows; with it (the prior's spread, faded by the row count)
    it covers most of them."""
    rows, fresh = _tight_tpot(30, 1), _tight_tpot(2000, 2, level=1.08)
    train, hold = rows.take(slice(0, 27)), rows.take(slice(27, None))
    assert _coverage(train, hold, fresh, "tpot") >= 0.9
    assert _coverage(train, hold, fresh, "tpot", FitParams(rounds=60, nthread=1, prior_spread_rows=0)) < 0.8


def test_a_challenger_on_fifty_rows_that_covers_worse_does_not_replace_the_prior(
        client_factory: Callable[..., TestClient], caplog: pytest.LogCaptureFixture) -> None:
    """A fast engine (latency far below the prior's roofline) slows down 6× — more than one calibration may
    correct (×4) — for the last 30 of 100 rows: a challenger fitted mostly on the fast rows would win on pinball
    (the prior over-predicts several-fold) but covers a fraction of the newest rows the prior covers,
    so the prior stays (it over-covers: it is not rescaled either, a rescaled prior only raises)."""
    client = client_factory(min_samples_for_retrain=30)
    post(client, scaled(make_rows(70, seed=3), 0.02) + scaled(make_rows(30, seed=4), 0.12))
    with caplog.at_level(logging.INFO, logger="trainer.retrain"):
        assert service_of(client).loop.run_cycle() is None
    line = next(r.getMessage() for r in caplog.records if r.getMessage().startswith("TTFT model trained"))
    assert "kept v1: coverage" in line and "below the live model's 100.0%" in line, line
    assert service_of(client).live.get().bundle.manifest.prior is True


@pytest.mark.parametrize(("min_rows", "published"), [(1000, True), (0, False)])
def test_the_shift_bound_does_not_hold_back_a_challenger_against_a_young_live_model(
        client_factory: Callable[..., TestClient], min_rows: int, published: bool) -> None:
    """First contact with a new engine: the first trained model (a few hundred rows) is 3× off; a challenger that
    scores and covers better on the newest rows replaces it at once — the shift bound guards an established model
    (``LATENCY_PUBLISH_SHIFT_MIN_ROWS``), not one that extrapolates over most of the probe grid."""
    client = client_factory(min_samples_for_retrain=30, publish_shift_min_rows=min_rows)
    post(client, make_rows(200, seed=5))
    assert service_of(client).loop.run_cycle() == 2
    post(client, scaled(make_rows(600, seed=6), 3.0))
    assert (service_of(client).loop.run_cycle() == 3) is published


def test_the_calibration_level_follows_the_live_models_fresh_coverage() -> None:
    level = AdaptiveLevel(0.9, 0.2, min_rows=20)
    level.observe("ttft", 0.5, 100)  # the live model under-covered: calibrate the next one higher
    assert level.level("ttft") == pytest.approx(0.98) and level.level("tpot") == 0.9
    level.observe("ttft", 0.0, 100)
    assert level.level("ttft") == pytest.approx(0.99)  # at most α + 0.9 (1 − α)
    for _ in range(20):
        level.observe("ttft", 1.0, 100)  # over-covering: back down, at least α − 0.1
    assert level.level("ttft") == pytest.approx(0.8)
    level.observe("ttft", 0.0, 19)
    level.observe("ttft", None, 0)
    assert level.level("ttft") == pytest.approx(0.8)  # too few fresh rows, or none (the prior is live): no step
    still = AdaptiveLevel(0.9, 0.0)
    still.observe("ttft", 0.0, 1000)
    assert still.level("ttft") == 0.9


def test_the_level_holds_while_the_live_model_was_calibrated_at_another_one() -> None:
    """Anti-windup: after a step the level waits for a model calibrated at it before it moves again (a refused
    challenger leaves an older model serving, whose coverage says nothing about the new level)."""
    level = AdaptiveLevel(0.9, 0.2, min_rows=20)
    level.observe("ttft", 0.5, 100, served_level=0.9)
    assert level.level("ttft") == pytest.approx(0.98)
    for _ in range(5):
        level.observe("ttft", 0.5, 100, served_level=0.9)  # the challenger at 0.98 was refused: hold
    assert level.level("ttft") == pytest.approx(0.98)
    level.observe("ttft", 1.0, 100, served_level=0.98)  # a model at 0.98 serves and over-covers: down
    assert level.level("ttft") == pytest.approx(0.96)


def test_a_fit_is_calibrated_at_the_level_it_is_given() -> None:
    rows, hold = window_rows(3000, 1), window_rows(1000, 2)
    fresh = window_rows(4000, 3)
    low = _coverage(rows, hold, fresh, "ttft", FitParams(rounds=60, nthread=1, calibration_level=0.8))
    high = _coverage(rows, hold, fresh, "ttft", FitParams(rounds=60, nthread=1, calibration_level=0.97))
    assert low == pytest.approx(0.8, abs=0.04) and high == pytest.approx(0.97, abs=0.02)
    fitted = fit_model(SPEC, "ttft", rows, hold, FitParams(rounds=60, nthread=1, calibration_level=0.97))
    assert fitted.entry.calibration_level == 0.97


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-thread nice values are a Linux feature")
def test_the_retrain_loop_and_the_threads_it_starts_run_nicer() -> None:
    seen: dict[str, int] = {}

    def nice() -> int:
        return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())

    def loop() -> None:
        before = nice()
        lower_priority(5)
        child = threading.Thread(target=lambda: seen.update(child=nice()))
        child.start()
        child.join()
        seen.update(before=before, loop=nice())

    thread = threading.Thread(target=loop)
    thread.start()
    thread.join()
    assert seen["loop"] == seen["child"] == min(19, seen["before"] + 5)


def test_a_slow_engine_gets_its_base_refitted_from_the_first_five_rows(
        client_factory: Callable[..., TestClient], tmp_path: Path) -> None:
    """5 rows (a CPU engine's first ~15 s) are enough to refit the physical base
    (LATENCY_MIN_SAMPLES_FOR_RETRAIN_FRESH, 5 here): the base alone is cross-validated on every row, so no holdout
    row (10 % of the window: none below 10 rows) is waited for. Below LATENCY_MIN_SAMPLES_FOR_RETRAIN only the base
    is fitted (candidate ``base``, no trees); its level follows the rows whether the engine is 30× slower than the
    prior's roofline or as fast."""
    for slower in (30.0, 1.0):
        client = client_factory(min_samples_for_retrain=100, data_dir=str(tmp_path / f"data-{slower}"))
        post(client, scaled(make_rows(4, seed=7), slower))
        assert service_of(client).loop.run_cycle() is None
        post(client, scaled(make_rows(1, seed=8), slower))
        assert service_of(client).loop.run_cycle() == 2
        live = service_of(client).live.get()
        entry = live.bundle.model_entry("ttft")
        assert live.bundle.manifest.prior is False and entry.candidate == "base" and entry.quantile_rounds == 0
        assert entry.base is not None and entry.base.rows > 0
        rows = make_rows(400, seed=9)
        y = np.array([r["actual_ttft_ms"] for r in rows]) * slower
        served = live.predict("ttft", training_columns("ttft", _rows(rows), True))
        assert 0.4 < float(np.median(served / y)) < 3.0, slower


def _rows(wire: list[dict[str, Any]]) -> Rows:
    from sim.policies.retrainer import sample_matrix

    data = sample_matrix(wire)
    return Rows(data, np.arange(len(data)), bucket_ids(data), np.zeros(len(data)))


def test_rows_already_fitted_are_not_refitted_every_cycle(
        client_factory: Callable[..., TestClient], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A cycle fits a model only when rows arrived since its last fit, published or not (a thin pool's trainer
    would otherwise refit its few rows every cycle: the shared test stack's long-pool trainer once spent 54 s of
    CPU in a 5-minute suite doing so); a new row is fitted again."""
    fits: list[str] = []
    real = cycle.fit_model

    def counting(*args: Any, **kwargs: Any) -> Any:
        fits.append(args[1])
        return real(*args, **kwargs)

    monkeypatch.setattr(cycle, "fit_model", counting)
    client = client_factory(min_samples_for_retrain=100, data_dir=str(tmp_path / "d"))
    post(client, make_rows(12, seed=7))
    service_of(client).loop.run_cycle()
    assert fits == ["ttft"]
    for _ in range(3):
        assert service_of(client).loop.run_cycle() is None
    assert fits == ["ttft"]
    post(client, make_rows(1, seed=8))
    service_of(client).loop.run_cycle()
    assert fits == ["ttft", "ttft"]


@pytest.mark.parametrize("n", [12, 40, 90])
def test_a_base_alone_on_few_rows_is_calibrated_on_every_row(n: int) -> None:
    """Below the trees' threshold the base alone is served, calibrated on cross-validated residuals of every row
    (not on a held-out quarter): averaged over seeds its p90 covers fresh rows of the same pool."""
    params = FitParams(rounds=30, nthread=1, tree_min_rows=100)
    cover = []
    for seed in range(6):
        rows = window_rows(n, seed)
        cut = n - max(1, n // 10)
        fitted = fit_model(SPEC, "ttft", rows.take(slice(0, cut)), rows.take(slice(cut, None)), params)
        assert fitted.entry.candidate == "base" and fitted.entry.holdout_rows == n == len(fitted.newest)
        assert fitted.fitted_through == n - 1 and fitted.entry.quantile_rounds == 0
        cover.append(_coverage(rows.take(slice(0, cut)), rows.take(slice(cut, None)), window_rows(3000, 99), "ttft",
                               params))
    assert 0.84 <= np.mean(cover) <= 0.97 and min(cover) >= 0.65, cover


def test_the_adaptive_level_pools_a_thin_pools_cycles_until_enough_rows_arrived() -> None:
    level = AdaptiveLevel(0.9, 0.2, min_rows=20)
    for _ in range(3):
        level.observe("ttft", 0.5, 6)  # 18 rows: not enough for a step yet
    assert level.level("ttft") == 0.9
    level.observe("ttft", 0.5, 2)  # 20 rows pooled at 0.5 coverage: one step up
    assert level.level("ttft") == pytest.approx(0.98)


def test_a_new_fit_is_judged_only_on_rows_the_live_model_was_not_fitted_on(
        client_factory: Callable[..., TestClient], caplog: pytest.LogCaptureFixture) -> None:
    """After a thin fit is published, the next one (fitted on two more rows) is not compared with the live model on
    the rows that model was fitted on (it would win on its own in-sample fit): fewer than MIN_COMPARE_ROWS unseen
    rows, so the newer fit is published."""
    client = client_factory(min_samples_for_retrain=100)
    post(client, make_rows(20, seed=11))
    assert service_of(client).loop.run_cycle() == 2
    post(client, make_rows(2, seed=12))
    with caplog.at_level(logging.INFO, logger="trainer.retrain"):
        assert service_of(client).loop.run_cycle() == 3
    assert cycle.MIN_COMPARE_ROWS > 2
