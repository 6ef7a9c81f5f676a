"""Real tiny XGBoost fits in tmp_path, calibration, scores, the prior, and bundle integrity."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import xgboost as xgb

from shared.bundle import MANIFEST, base_score, encode_model, read_bundle, read_current, version_dir
from shared.errors import BundleError
from shared.features import FeatureSpec
from shared.model import load_bundle
from trainer.calibrate import Calibration, calibrate, conformal_scale, cross_calibrated
from trainer.cycle import bundle_meta
from trainer.evaluate import pinball, score
from trainer.fit import FitParams, fit_booster, training_columns
from trainer.prior import fit_prior, grid_columns
from trainer.publisher import Publisher
from trainer.store import STORED_FIELDS
from trainer.window import COL, Rows, bucket_ids

SPEC = FeatureSpec()


def window_rows(n: int, seed: int = 0) -> Rows:
    rng = np.random.default_rng(seed)
    m = np.zeros((n, len(STORED_FIELDS)))
    m[:, COL["input_token_length"]] = rng.integers(10, 4000, n)
    m[:, COL["kv_cache_percentage"]] = rng.uniform(0, 1, n)
    m[:, COL["num_request_running"]] = rng.integers(1, 40, n)
    m[:, COL["actual_ttft_ms"]] = (20 + 0.05 * m[:, COL["input_token_length"]]) * np.exp(0.2 * rng.standard_normal(n))
    m[:, COL["actual_tpot_ms"]] = (5 + 0.3 * m[:, COL["num_request_running"]]) * np.exp(0.2 * rng.standard_normal(n))
    return Rows(m, np.arange(n), bucket_ids(m))


def test_tiny_real_quantile_fit_is_calibrated(tmp_path: Path) -> None:
    params = FitParams(rounds=30, nthread=1)
    train, hold = window_rows(3000, 1), window_rows(2000, 2)
    booster = fit_booster(SPEC, "ttft", train, params)
    data, entry = encode_model(booster, "ttft", SPEC.columns("ttft"), {})
    assert entry["file"] == "ttft.ubj" and entry["features"] == list(SPEC.columns("ttft"))
    assert data and entry["base_score"] > 0 and base_score(booster) == [entry["base_score"]]
    x = SPEC.matrix("ttft", training_columns("ttft", hold, True))
    raw = np.asarray(booster.inplace_predict(x))
    y = hold.column("actual_ttft_ms")
    pred = cross_calibrated(raw, y, 0.9, "quantile")
    assert abs(score(pred, y, 0.9).coverage - 0.9) < 0.03
    assert booster.feature_names == list(SPEC.columns("ttft"))


def test_tpot_training_zeroes_tokens_generated() -> None:
    rows = window_rows(10)
    rows.data[:, COL["num_tokens_generated"]] = 7
    assert training_columns("tpot", rows, True)["num_tokens_generated"].sum() == 0
    assert training_columns("tpot", rows, False)["num_tokens_generated"].sum() == 70
    assert training_columns("ttft", rows, True)["num_tokens_generated"].sum() == 70


@pytest.mark.parametrize(("y", "pred", "expected"), [([10.0], [8.0], 1.8), ([10.0], [12.0], 0.2), ([5.0], [5.0], 0.0)])
def test_pinball_values(y: list[float], pred: list[float], expected: float) -> None:
    assert pinball(np.array(pred), np.array(y), 0.9) == pytest.approx(expected)


def test_scores_table() -> None:
    s = score(np.array([10.0, 20.0, 30.0, 40.0]), np.array([12.0, 18.0, 30.0, 35.0]), 0.9)
    assert (s.n, s.mae, s.coverage) == (4, pytest.approx(2.25), 0.75)
    assert s.rmse == pytest.approx(np.sqrt((4 + 4 + 0 + 25) / 4))


def test_conformal_scale_hits_target_coverage() -> None:
    rng = np.random.default_rng(3)
    raw = rng.uniform(10, 1000, 5000)
    y = raw * np.exp(0.3 * rng.standard_normal(5000))
    s = conformal_scale(raw, y, 0.9)
    assert np.mean(y <= raw * s) == pytest.approx(0.9, abs=0.005)
    assert calibrate(raw, y, 0.9, "mean") == Calibration()
    assert conformal_scale(raw[:3], y[:3], 0.9) == 1.0


def test_prior_predicts_positive_everywhere() -> None:
    models = fit_prior(SPEC)
    assert set(models) == {"ttft", "tpot"}
    cols = grid_columns(2000, seed=9)
    cols["input_token_length"] = cols["input_token_length"] * 10  # also beyond the grid
    for name, (data, entry) in models.items():
        booster = xgb.Booster(model_file=bytearray(data))
        out = booster.inplace_predict(SPEC.matrix(name, cols))
        assert np.all(out > 0), name
        assert entry["prior"] is True and entry["features"] == list(SPEC.columns(name))


def publish_prior(root: Path, key: bytes | None = None) -> Publisher:
    publisher = Publisher(root, key, keep=3)
    publisher.publish(fit_prior(SPEC), bundle_meta(SPEC, FitParams(), prior=True))
    return publisher


def test_bundle_round_trip_and_load(tmp_path: Path) -> None:
    publisher = publish_prior(tmp_path / "b", key=b"k")
    bundle = read_current(tmp_path / "b", b"k")
    assert bundle is not None and bundle.version == 1 and set(bundle.files) == {"ttft.ubj", "tpot.ubj"}
    loaded = load_bundle(bundle, SPEC)
    assert loaded.version == 1 and publisher.live_version() == 1


@pytest.mark.parametrize("victim", [MANIFEST, "ttft.ubj", "tpot.ubj"])
def test_flipped_byte_in_any_file_is_rejected(tmp_path: Path, victim: str) -> None:
    publish_prior(tmp_path)
    path = version_dir(tmp_path, 1) / victim
    data = bytearray(path.read_bytes())
    offset = data.index(b'"sha256"') + 13 if victim == MANIFEST else len(data) // 2
    data[offset] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(BundleError):
        read_bundle(version_dir(tmp_path, 1), None)


def test_hmac_mismatch_is_rejected(tmp_path: Path) -> None:
    publish_prior(tmp_path, key=b"right")
    with pytest.raises(BundleError):
        read_bundle(version_dir(tmp_path, 1), b"wrong")
    read_bundle(version_dir(tmp_path, 1), b"right")


def test_publisher_prunes_but_keeps_live(tmp_path: Path) -> None:
    publisher = publish_prior(tmp_path)
    for _ in range(4):
        publisher.publish(fit_prior(SPEC), bundle_meta(SPEC, FitParams(), prior=True))
    assert publisher.versions() == [3, 4, 5] and publisher.live_version() == 5
    assert publisher.path_of(5, "ttft.ubj") is not None
    assert publisher.path_of(5, "../CURRENT") is None and publisher.path_of(1, "ttft.ubj") is None


def test_monotone_constraints_hold() -> None:
    """Contract §8: TTFT non-decreasing in input tokens and prefill tokens in flight; TPOT in decode tokens."""
    rows = window_rows(3000, 5)
    params = FitParams(rounds=40, nthread=1)
    grid = np.linspace(0, 8000, 60)
    for name, field in (("ttft", "input_token_length"), ("ttft", "prefill_tokens_in_flight"),
                        ("tpot", "decode_tokens_in_flight"), ("tpot", "num_request_running")):
        booster = fit_booster(SPEC, name, rows, params)
        base = training_columns(name, rows.take(slice(0, 1)), True)
        cols = {k: np.repeat(v, len(grid)) for k, v in base.items()}
        cols[field] = grid
        out = np.asarray(booster.inplace_predict(SPEC.matrix(name, cols)))
        assert np.all(np.diff(out) >= -1e-6), (name, field)
