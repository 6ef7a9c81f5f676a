"""Real tiny XGBoost fits in tmp_path, calibration, scores, the prior, and bundle integrity."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from shared.bundle import MANIFEST, assemble, in_memory, read_bundle, read_current, version_dir
from shared.errors import BundleError
from shared.features import MODEL_NAMES, FeatureSpec, typical_columns
from shared.model import LoadedBundle, load_bundle, load_model
from trainer.calibrate import Calibration, calibrate, log_offset
from trainer.cycle import bundle_meta
from trainer.evaluate import pinball, score
from trainer.fit import Candidate, FitParams, training_columns
from trainer.fitted import fit_model
from trainer.monotone_check import drops
from trainer.prior import fit_prior
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
    return Rows(m, np.arange(n), bucket_ids(m), np.zeros(n))


def fitted_bundle(train: Rows, hold: Rows, params: FitParams) -> LoadedBundle:
    models = {name: fit_model(SPEC, name, train, hold, params) for name in MODEL_NAMES}
    manifest, files = assemble(1, "2026-12-01T00:00:00+00:00",
                               {n: (m.files, m.entry) for n, m in models.items()},
                               bundle_meta(SPEC, params, prior=False), None)
    return load_bundle(in_memory(manifest, files), SPEC)


def test_tiny_real_multi_quantile_fit_is_calibrated_and_never_crosses() -> None:
    params = FitParams(rounds=60, nthread=1, quantile_rows=3000)
    train, hold, test = window_rows(4000, 1), window_rows(1500, 2), window_rows(6000, 3)
    on_base = FitParams(rounds=60, nthread=1, quantile_rows=3000, candidates=(Candidate(6),))
    fitted = fit_model(SPEC, "tpot", train, hold, on_base)
    entry = fitted.entry
    assert entry.candidate in {"depth6", "base"}
    assert set(fitted.files) == {"tpot.ubj", "tpot-forest.json", *(["tpot-location.ubj"] * (entry.candidate != "base"))}
    assert entry.forest_file == "tpot-forest.json" and entry.quantiles == (0.5, 0.9, 0.99)
    assert entry.primary_quantile == 0.9 and entry.target_transform == "log1p"
    assert set(entry.calibrations or {}) == {"0.5", "0.9", "0.99"}
    assert entry.base is not None and entry.base.source == "fit" and entry.base.rows == entry.fit_rows
    assert entry.base_score == 0.0  # the trees start from the base's margin, not from an intercept
    loaded = fitted_bundle(train, hold, params)
    for name in MODEL_NAMES:
        table = loaded.predict_all(name, training_columns(name, test, True))
        y = test.column("actual_ttft_ms" if name == "ttft" else "actual_tpot_ms")
        assert np.all(np.diff(table, axis=1) >= 0), name  # p50 <= p90 <= p99 on every row
        coverage = [float(np.mean(y <= table[:, k])) for k in range(3)]
        assert abs(coverage[0] - 0.5) < 0.05 and abs(coverage[1] - 0.9) < 0.03 and coverage[2] >= 0.97, coverage
        np.testing.assert_array_equal(loaded.predict(name, training_columns(name, test, True)), table[:, 1])


def test_selection_picks_the_candidate_with_the_lowest_score() -> None:
    """The base alone and every tree candidate (on the base, and window mode) compete on the location's MAE in ms
    over the newest rows; a TTFT with a knee the base cannot draw (flat below 2,000 tokens, steep above) needs trees,
    and the entry says which won and by what."""
    rng = np.random.default_rng(4)

    def rows(n: int, seed: int) -> Rows:
        r = window_rows(n, seed)
        inp = r.column("input_token_length")
        knee = 20 + 0.2 * np.maximum(inp - 2000, 0)
        r.data[:, COL["actual_ttft_ms"]] = knee * np.exp(0.05 * rng.standard_normal(n))
        return r

    params = FitParams(rounds=80, nthread=1, quantile_rows=2000)
    fitted = fit_model(SPEC, "ttft", rows(3000, 5), rows(800, 6), params)
    scores = fitted.entry.selection
    assert set(scores) == {"base", "depth6", "depth4-window"}
    assert fitted.entry.candidate == min(scores, key=scores.__getitem__) != "base"
    assert fitted.entry.selection_metric == "mae_ms"
    only = FitParams(rounds=40, nthread=1, candidates=(Candidate(3),), quantile_rows=2000)
    assert set(fit_model(SPEC, "ttft", rows(3000, 5), rows(800, 6), only).entry.selection) == {
        "base", "depth3"}
    thin = FitParams(rounds=40, nthread=1, tree_min_rows=5000)
    assert fit_model(SPEC, "ttft", rows(3000, 5), rows(800, 6), thin).entry.selection.keys() == {"base"}


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


def test_conformal_log_offset_hits_target_coverage() -> None:
    rng = np.random.default_rng(3)
    raw = np.log1p(rng.uniform(10, 1000, 5000))
    y = np.expm1(raw) * np.exp(0.3 * rng.standard_normal(5000))
    cal = calibrate(raw, y, 0.9, "quantile")
    assert np.mean(y <= cal.apply_log(raw)) == pytest.approx(0.9, abs=0.005)
    assert cal.offset == pytest.approx(cal.scale - 1.0)  # expm1(raw + c) written as scale/offset
    assert calibrate(raw, y, 0.9, "mean") == Calibration()
    resid = np.log1p(y[:3]) - raw[:3]
    assert log_offset(raw[:3], y[:3], 0.9) == pytest.approx(resid.max())  # too few rows to certify 0.9: the largest
    assert log_offset(raw, y * 100, 0.9) == pytest.approx(np.log(4.0))  # clamped: scale <= 4


def test_prior_serves_every_quantile_positive_ordered_and_growing_past_any_range() -> None:
    """The prior is the default base alone with a log-normal spread: positive, p50 ≤ p90 ≤ p99, p90 ≈ 1.3 × p50,
    and still growing ten times past the typical range (no trees to flatten it)."""
    models = fit_prior(SPEC)
    assert set(models) == {"ttft", "tpot"}
    manifest, files = assemble(1, "2026-12-01T00:00:00+00:00", models, bundle_meta(SPEC, FitParams(), prior=True),
                               None)
    loaded = load_bundle(in_memory(manifest, files), SPEC)
    cols = typical_columns(2000, np.random.default_rng(9))
    far = {**cols, "prefill_tokens_in_flight": cols["prefill_tokens_in_flight"] * 10,
           "num_request_running": cols["num_request_running"] * 10}
    for name, (_, entry) in models.items():
        out, beyond = loaded.predict_all(name, cols), loaded.predict_all(name, far)
        assert out.shape == (2000, 3) and np.all(out > 0) and np.all(np.diff(out, axis=1) >= 0), name
        assert np.all(beyond >= out) and np.mean(beyond > 1.5 * out) > 0.5, name
        np.testing.assert_allclose(out[:, 1] + 1, 1.3 * (out[:, 0] + 1), rtol=1e-6)
        assert entry.prior is True and entry.features == SPEC.columns(name) and entry.candidate == "base"
        assert entry.quantiles == (0.5, 0.9, 0.99) and entry.base is not None and entry.base.source == "default"


def publish_prior(root: Path, key: bytes | None = None) -> Publisher:
    publisher = Publisher(root, key, keep=3)
    publisher.publish(fit_prior(SPEC), bundle_meta(SPEC, FitParams(), prior=True))
    return publisher


def test_bundle_round_trip_and_load(tmp_path: Path) -> None:
    publisher = publish_prior(tmp_path / "b", key=b"k")
    bundle = read_current(tmp_path / "b", b"k")
    assert bundle is not None and bundle.version == 1 and set(bundle.files) == {
        "ttft.ubj", "tpot.ubj", "ttft-forest.json", "tpot-forest.json"}
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


@pytest.mark.parametrize("depth", [3, 6])
def test_monotone_constraints_hold(depth: int) -> None:
    """Contract §8: TTFT non-decreasing in input tokens and prefill tokens in flight; TPOT in decode tokens and
    running requests — for every served quantile of every candidate (base + location + quantile trees)."""
    rows = window_rows(3000, 5)
    params = FitParams(rounds=40, nthread=1, candidates=(Candidate(depth),), quantile_rows=2000)
    loaded = fitted_bundle(rows, window_rows(500, 6), params)
    for name in MODEL_NAMES:
        assert drops(loaded.models[name], SPEC, rows.data, True) == [], name
    grid = np.linspace(0, 8000, 60)
    for name, field in (("ttft", "input_token_length"), ("ttft", "prefill_tokens_in_flight"),
                        ("tpot", "decode_tokens_in_flight"), ("tpot", "num_request_running")):
        base = training_columns(name, rows.take(slice(0, 1)), True)
        cols = {k: np.repeat(v, len(grid)) for k, v in base.items()}
        cols[field] = grid
        out = loaded.predict_all(name, cols)
        assert np.all(np.diff(out, axis=0) >= -1e-6), (name, field)


def test_a_fit_too_small_for_quantiles_serves_a_calibrated_location_in_milliseconds() -> None:
    """Below MIN_QUANTILE_ROWS fit rows no quantile booster is fitted: base + location (log1p) is served with each
    quantile's conformal correction, in milliseconds."""
    params = FitParams(rounds=30, nthread=1)
    train, hold = window_rows(45, 7), window_rows(30, 8)
    for name in MODEL_NAMES:
        fitted = fit_model(SPEC, name, train, hold, params)
        assert fitted.entry.target_transform == "log1p" and fitted.entry.quantiles == (0.5, 0.9, 0.99)
        assert fitted.entry.quantile_rounds == 0 and fitted.entry.calibration is not None
        cals = fitted.entry.calibrations or {}
        assert cals["0.5"].scale < cals["0.9"].scale < cals["0.99"].scale and cals["0.9"].scale > 1.0
    loaded = fitted_bundle(train, hold, params)
    test = window_rows(500, 9)
    served = loaded.predict("ttft", training_columns("ttft", test, True))
    actual = test.column("actual_ttft_ms")
    assert 0.8 < float(np.median(served)) / float(np.median(actual)) < 2.5


def test_a_window_candidate_serves_its_trees_inside_the_window_and_the_base_growth_past_it() -> None:
    """TPOT with a knee in the batch size (flat, then a step, then flat): trees on the whole latency follow it inside
    the window; the entry's base carries the window's largest values, and past them the base's growth is added."""
    rng = np.random.default_rng(8)

    def rows(n: int, seed: int) -> Rows:
        r = window_rows(n, seed)
        running = r.column("num_request_running")
        r.data[:, COL["actual_tpot_ms"]] = (6 + 0.1 * running + 20 / (1 + np.exp(-(running - 20) / 2))) * np.exp(
            0.05 * rng.standard_normal(n))
        return r

    params = FitParams(rounds=60, nthread=1, quantile_rows=2000, candidates=(Candidate(3, True),))
    train, hold = rows(3000, 1), rows(500, 2)
    fitted = fit_model(SPEC, "tpot", train, hold, params)
    entry = fitted.entry
    assert entry.candidate == "depth3-window" and entry.base is not None and entry.base.window is not None
    assert entry.base.window["num_request_running"] == 39.0  # window_rows draws 1..39
    manifest, files = assemble(1, "2026-12-07T00:00:00+00:00", {"tpot": (fitted.files, entry)},
                               bundle_meta(SPEC, params, prior=False), None)
    model = load_model(in_memory(manifest, files), "tpot", SPEC, 1)
    cols = training_columns("tpot", train.take(slice(0, 1)), True)
    grid = {k: np.repeat(v, 4) for k, v in cols.items()}
    grid["num_request_running"] = np.array([10.0, 39.0, 80.0, 160.0])
    served = model.calibrate(model.raw(SPEC.matrix("tpot", grid)))[:, 1]
    truth_in = 6 + 0.1 * 10
    assert 0.8 < served[0] / truth_in < 1.6 and np.all(np.diff(served) > 0)  # the knee, then the base's growth
    assert drops(model, SPEC, train.data, True) == []
