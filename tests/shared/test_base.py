"""shared.base: the physical base's terms, evaluation and checks; bundles that carry one (format 2) and bundles that
do not (format 1) both load; a malformed base is refused at load, naming the model."""

from __future__ import annotations

import numpy as np
import orjson
import pytest

from shared.base import DEFAULT_COEFFICIENTS, TERMS, Base, check, model_terms, term_columns
from shared.bundle import BUNDLE_FORMAT_VERSION, assemble, in_memory, manifest_bytes, verify_bundle
from shared.errors import BundleError
from shared.features import MODEL_NAMES, FeatureSpec, smoke_columns
from shared.forest_loader import forest_loader
from shared.model import load_bundle
from trainer.cycle import bundle_meta
from trainer.fit import FitParams
from trainer.prior import fit_prior

SPEC = FeatureSpec()
FEATURES = SPEC.columns("ttft")


def test_terms_name_their_columns_and_follow_the_feature_spec() -> None:
    assert term_columns("1") == () and term_columns("prefill_tokens_in_flight") == ("prefill_tokens_in_flight",)
    assert term_columns("effective_input_tokens*input_token_length") == ("effective_input_tokens",
                                                                       "input_token_length")
    assert model_terms("ttft", FEATURES) == TERMS["ttft"]
    no_flight = FeatureSpec(token_in_flight=False)
    assert "prefill_tokens_in_flight" not in model_terms("ttft", no_flight.columns("ttft"))
    assert model_terms("tpot", no_flight.columns("tpot")) == ("1", "num_request_running", "kv_cache_percentage")
    for name in MODEL_NAMES:
        assert set(DEFAULT_COEFFICIENTS[name]) == set(TERMS[name]) and min(DEFAULT_COEFFICIENTS[name].values()) > 0


def test_the_base_is_its_terms_times_their_coefficients() -> None:
    base = Base(("1", "prefill_tokens_in_flight", "effective_input_tokens*input_token_length"), (10.0, 0.5, 0.001))
    cols = {**smoke_columns(), "prefill_tokens_in_flight": np.array([100.0]), "input_token_length": np.array([200.0]),
            "prefix_cache_score": np.array([0.5])}
    x = SPEC.matrix("ttft", cols)
    assert base.compiled(FEATURES)(x) == pytest.approx([10 + 50 + 0.001 * 100 * 200])
    evaluator = base.compiled(FEATURES)
    assert evaluator.margin(x, "log1p") == pytest.approx(np.log1p(evaluator(x)))
    assert evaluator.margin(x, "identity") == pytest.approx(evaluator(x))


def test_more_load_never_lowers_the_base() -> None:
    base = Base.default("ttft", FEATURES)
    rng = np.random.default_rng(0)
    x = np.abs(rng.normal(0, 1000, (200, len(FEATURES)))).astype(np.float32)
    more = x * rng.uniform(1.0, 8.0, x.shape).astype(np.float32)
    evaluator = base.compiled(FEATURES)
    assert np.all(evaluator(more) >= evaluator(x))


@pytest.mark.parametrize(("terms", "coefficients", "says"), [
    (("1", "prefill_tokens_in_flight"), (1.0, -0.1), ">= 0"),
    (("1", "prefill_tokens_in_flight"), (1.0, float("nan")), ">= 0"),
    (("1", "no_such_column"), (1.0, 0.1), "no_such_column"),
    (("1", "a*b*c"), (1.0, 0.1), "product of two"),
    (("1", "1"), (1.0, 1.0), "repeat"),
    (("1",), (1.0, 2.0), "1 terms and 2 coefficients"),
])
def test_a_malformed_base_is_refused(terms: tuple[str, ...], coefficients: tuple[float, ...], says: str) -> None:
    with pytest.raises(BundleError, match=says):
        check(Base(terms, coefficients), FEATURES)


def _prior_manifest() -> tuple[dict, dict[str, bytes]]:  # type: ignore[type-arg]
    params = FitParams()
    manifest, files = assemble(1, "2026-12-07T00:00:00+00:00", fit_prior(SPEC), bundle_meta(SPEC, params, True), None)
    return orjson.loads(manifest_bytes(manifest)), files


def test_a_bundle_with_a_base_is_format_2_and_both_evaluators_add_it() -> None:
    doc, files = _prior_manifest()
    assert doc["format_version"] == BUNDLE_FORMAT_VERSION == 2 and doc["models"]["ttft"]["base"]["source"] == "default"
    bundle = in_memory(doc, files)
    xgb_side, numpy_side = load_bundle(bundle, SPEC), load_bundle(bundle, SPEC, loader=forest_loader)
    cols = smoke_columns()
    for name in MODEL_NAMES:
        base = Base.default(name, SPEC.columns(name)).compiled(SPEC.columns(name))(SPEC.matrix(name, cols))
        assert xgb_side.predict_all(name, cols)[0, 0] == pytest.approx(base[0])  # p50 = the base (no trees)
        np.testing.assert_array_equal(xgb_side.predict_all(name, cols), numpy_side.predict_all(name, cols))


def test_a_bad_base_in_a_manifest_is_refused_at_load_naming_the_model() -> None:
    doc, files = _prior_manifest()
    doc["models"]["tpot"]["base"]["coefficients"][1] = -1.0
    with pytest.raises(BundleError, match="^tpot: base coefficient"):
        load_bundle(in_memory(doc, files), SPEC)


def test_format_1_bundles_still_load_and_an_unknown_format_is_refused() -> None:
    doc, files = _prior_manifest()
    for entry in doc["models"].values():
        del entry["base"]  # what a format-1 trainer wrote: the boosters alone
    doc["format_version"] = 1
    loaded = load_bundle(in_memory(doc, files), SPEC)
    assert all(m.base is None for m in loaded.models.values())
    doc["format_version"] = 3
    with pytest.raises(BundleError, match="format_version 3"):
        verify_bundle(orjson.dumps(doc), files.__getitem__, None)


def test_window_mode_adds_only_the_growth_past_the_window_in_ms() -> None:
    """A windowed base leaves the trees alone inside the window and adds base(x) − base(min(x, window)) past it —
    non-decreasing in every load column wherever the others are, inside or outside."""
    base = Base(("1", "prefill_tokens_in_flight", "num_request_running"), (10.0, 0.5, 2.0),
                window=(("prefill_tokens_in_flight", 1000.0), ("num_request_running", 8.0)))
    evaluator = base.compiled(FEATURES)
    cols = {**smoke_columns(), "prefill_tokens_in_flight": np.array([500.0, 1000.0, 3000.0, 3000.0]),
            "num_request_running": np.array([4.0, 4.0, 4.0, 20.0]), "input_token_length": np.full(4, 100.0)}
    cols = {k: np.broadcast_to(v, (4,)).copy() for k, v in cols.items()}
    x = SPEC.matrix("ttft", cols)
    assert evaluator.growth(x) == pytest.approx([0.0, 0.0, 0.5 * 2000, 0.5 * 2000 + 2.0 * 12])
    trees = np.log1p(np.full((4, 1), 100.0))
    assert np.expm1(evaluator.apply(trees, x, "log1p"))[:, 0] == pytest.approx([100.0, 100.0, 1100.0, 1124.0])
    assert evaluator.apply(trees, x, "identity")[:, 0] == pytest.approx(trees[:, 0] + evaluator.growth(x))
    rng = np.random.default_rng(1)
    a = np.abs(rng.normal(0, 3000, (300, len(FEATURES)))).astype(np.float32)
    b = a * rng.uniform(1.0, 4.0, a.shape).astype(np.float32)
    assert np.all(evaluator.growth(b) >= evaluator.growth(a) - 1e-9)
    assert base.as_dict()["window"] == {"prefill_tokens_in_flight": 1000.0, "num_request_running": 8.0}
    with pytest.raises(BundleError, match="window"):
        check(Base(base.terms, base.coefficients, window=(("no_such_column", 1.0),)), FEATURES)
