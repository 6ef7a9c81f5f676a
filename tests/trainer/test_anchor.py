"""Thin fits anchored to the prior (``trainer.anchor``): the prior's shape where the rows say nothing, the
published booster served alike by XGBoost and the predictor's forest, anchors built once and only while thin."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
import xgboost as xgb
from fastapi.testclient import TestClient

from shared.bundle import assemble, in_memory
from shared.features import MODEL_NAMES, FeatureSpec
from shared.forest_loader import forest_loader
from shared.model import LoadedBundle, load_bundle
from tests.trainer.conftest import make_rows, service_of
from tests.trainer.prior_cache import fit_prior_once
from tests.trainer.test_fit_bundle import fitted_bundle, window_rows
from tests.trainer.test_poisoning import post, scaled
from trainer.anchor import Anchors, anchors_of
from trainer.cycle import bundle_meta
from trainer.fit import FitParams, margin, training_columns
from trainer.fitted import fit_model
from trainer.prior import grid_columns
from trainer.window import COL, Rows

SPEC = FeatureSpec()
PARAMS = FitParams(rounds=60, nthread=1)
ANCHORED = FitParams(rounds=60, nthread=1, anchored_only=True)


def _prior() -> LoadedBundle:
    manifest, files = assemble(1, "2026-12-01T00:00:00+00:00", fit_prior_once(SPEC), bundle_meta(SPEC, PARAMS, True),
                               None)
    return load_bundle(in_memory(manifest, files), SPEC)


def _short_prompts(n: int, seed: int) -> Rows:
    """Rows whose prompts are all 10–300 tokens, TTFT 3× the roofline prior's median law (a slower engine)."""
    rows = window_rows(n, seed)
    m = rows.data
    rng = np.random.default_rng(seed)
    m[:, COL["input_token_length"]] = rng.integers(10, 300, n)
    m[:, COL["actual_ttft_ms"]] = 3 * (25 + 0.08 * m[:, COL["input_token_length"]]) * np.exp(
        0.1 * rng.standard_normal(n))
    return rows


def _served_ttft(rows: Rows, anchor: xgb.Booster | None, prompts: list[int]) -> np.ndarray:
    train, hold = rows.take(slice(0, len(rows) - 4)), rows.take(slice(len(rows) - 4, None))
    fitted = fit_model(SPEC, "ttft", train, hold, ANCHORED, anchor=anchor)
    other = fit_model(SPEC, "tpot", train, hold, PARAMS)
    manifest, files = assemble(2, "2026-12-01T00:00:00+00:00", {"ttft": (fitted.files, fitted.entry),
                                                                "tpot": (other.files, other.entry)},
                               bundle_meta(SPEC, PARAMS, False), None)
    loaded = load_bundle(in_memory(manifest, files), SPEC)
    probe = rows.take(np.zeros(len(prompts), dtype=np.int64))
    probe.data[:, COL["input_token_length"]] = prompts
    return loaded.predict("ttft", training_columns("ttft", probe, True))


def test_a_thin_fit_keeps_the_priors_shape_where_its_rows_say_nothing() -> None:
    """40 rows of 10–300-token prompts: the plain fit serves a 3,000-token prompt like a 150-token one (trees
    cannot extrapolate), the fit anchored to the roofline prior serves it over twice as high (its TTFT law
    grows 0.08 ms per token), and both serve the rows' own range at the rows' level."""
    rows = _short_prompts(40, 1)
    anchor = anchors_of(_prior(), SPEC)["ttft"]
    plain, anchored = _served_ttft(rows, None, [150, 3000]), _served_ttft(rows, anchor, [150, 3000])
    assert plain[1] / plain[0] < 1.5, plain
    assert anchored[1] / anchored[0] > 2.0, anchored
    level = 3 * (25 + 0.08 * 150)
    assert 0.7 * level < anchored[0] < 2.5 * level and 0.7 * level < plain[0] < 2.5 * level, (plain, anchored)


def test_the_built_in_prior_is_distilled_and_a_fitted_prior_lends_its_own_location() -> None:
    prior = _prior()
    grid = grid_columns(500, seed=3)
    for name in MODEL_NAMES:
        anchor = anchors_of(prior, SPEC)[name]
        p50 = prior.predict_all(name, grid)[:, prior.models[name].quantiles.index(0.5)]
        err = margin(anchor, SPEC.matrix(name, grid)) - np.log1p(p50)
        assert float(np.sqrt(np.mean(err ** 2))) < 0.05, name
    seed = fitted_bundle(window_rows(3000, 1), window_rows(500, 2), PARAMS)
    x = SPEC.matrix("ttft", grid)
    entry = seed.bundle.model_entry("ttft")
    assert entry.location_file is not None
    own = anchors_of(seed, SPEC)["ttft"]
    location = xgb.Booster()
    location.load_model(bytearray(seed.bundle.model_files("ttft")[entry.location_file]))
    assert np.array_equal(margin(own, x), margin(location, x))


def test_an_anchored_bundle_is_served_alike_by_xgboost_and_the_predictors_forest() -> None:
    anchors = anchors_of(_prior(), SPEC)
    rows = window_rows(120, 4)
    train, hold = rows.take(slice(0, 100)), rows.take(slice(100, None))
    models = {}
    for name in MODEL_NAMES:
        f = fit_model(SPEC, name, train, hold, ANCHORED, anchor=anchors[name])
        assert f.entry.candidate.startswith("prior+"), f.entry.candidate
        models[name] = (f.files, f.entry)
    manifest, files = assemble(2, "2026-12-01T00:00:00+00:00", models, bundle_meta(SPEC, PARAMS, False), None)
    bundle = in_memory(manifest, files)
    by_xgboost, by_forest = load_bundle(bundle, SPEC), load_bundle(bundle, SPEC, loader=forest_loader)
    fresh = window_rows(300, 5)
    for name in MODEL_NAMES:
        cols = training_columns(name, fresh, True)
        np.testing.assert_allclose(by_forest.predict_all(name, cols), by_xgboost.predict_all(name, cols),
                                   rtol=1e-5)


def test_anchors_are_built_once_and_only_for_thin_fits() -> None:
    calls = []

    def source() -> LoadedBundle:
        calls.append(1)
        return _prior()

    anchors = Anchors(source, SPEC, rows=100)
    assert anchors.for_fit("ttft", 100) is None and not calls
    assert anchors.for_fit("ttft", 99) is not None and anchors.for_fit("tpot", 8) is not None
    assert len(calls) == 1
    assert Anchors(lambda: None, SPEC, rows=100).for_fit("ttft", 10) is None


@pytest.mark.parametrize(("anchor_rows", "anchored"), [(200, True), (0, False)])
def test_the_trainer_anchors_its_first_fits_to_its_prior(client_factory: Callable[..., TestClient],
                                                         anchor_rows: int, anchored: bool) -> None:
    """Below ``LATENCY_PRIOR_ANCHOR_ROWS`` rows the cycle's candidates continued from the prior (``prior+…``) compete
    with the plain ones; at 0 there are none."""
    client = client_factory(min_samples_for_retrain=30, prior_min_fit_rows=0, prior_anchor_rows=anchor_rows)
    post(client, scaled(make_rows(60, seed=11), 3.0) + scaled(make_rows(60, seed=12, kind="tpot"), 3.0))
    service_of(client).loop.run_cycle()
    fits = service_of(client).retrainer.last_entries
    for name in MODEL_NAMES:
        names = set(fits[name].selection_log_rmse or {})
        assert ({"prior+depth6", "prior+depth3-monotone"} <= names) is anchored, names
        assert {"depth6", "depth3-monotone"} <= names
