"""trainer.base_fit: the physical base's coefficients from rows — the truth from many, the level from ten, the
prior's shape where the rows say nothing, and a robust loss that a burst of slow rows pulls less."""

from __future__ import annotations

import numpy as np
import pytest

from shared.base import Base
from shared.features import FeatureSpec, typical_columns
from trainer.base_fit import BaseFitParams, fit_base, level

SPEC = FeatureSpec()
FEATURES = SPEC.columns("ttft")
TRUTH = Base(("1", "effective_input_tokens", "prefill_tokens_in_flight", "num_request_waiting", "num_request_running",
              "effective_input_tokens*input_token_length"), (40.0, 0.2, 0.027, 5.0, 0.1, 0.0))


def rows(n: int, seed: int, waiting: bool = True, sigma: float = 0.2) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    cols = typical_columns(n, rng)
    cols["prefill_tokens_in_flight"] = rng.uniform(0, 20_000, n)
    cols["input_token_length"] = rng.integers(10, 4000, n).astype(float)
    cols["num_request_waiting"] = rng.integers(0, 4, n).astype(float) if waiting else np.zeros(n)
    x = SPEC.matrix("ttft", cols)
    return x, TRUTH.compiled(FEATURES)(x) * np.exp(sigma * rng.standard_normal(n))


def test_many_rows_recover_the_coefficients() -> None:
    x, y = rows(5000, 1)
    fitted = fit_base("ttft", FEATURES, x, y, None, None, BaseFitParams())
    assert fitted.terms == TRUTH.terms and fitted.rows == 5000 and fitted.source == "fit"
    got, want = fitted.named(), TRUTH.named()
    for term in ("1", "effective_input_tokens", "prefill_tokens_in_flight"):
        assert got[term] == pytest.approx(want[term], rel=0.1), term
    assert got["num_request_waiting"] == pytest.approx(want["num_request_waiting"], rel=0.5)  # ~2 % of the latency
    assert min(fitted.coefficients) >= 0.0


def test_ten_rows_set_the_level_however_far_the_prior_is_off() -> None:
    """An engine 10× slower than the default roofline everywhere: ten rows move the whole base there."""
    x, y = rows(2000, 2)
    slow = y * 10.0
    fitted = fit_base("ttft", FEATURES, x[:10], slow[:10], None, None, BaseFitParams())
    ratio = fitted.compiled(FEATURES)(x) / TRUTH.compiled(FEATURES)(x) / 10.0
    assert 0.6 < float(np.median(ratio)) < 1.6


def test_where_the_rows_say_nothing_the_prior_keeps_the_term() -> None:
    """No row ever waits: the waiting coefficient stays the prior's (times the level), not 0."""
    x, y = rows(400, 3, waiting=False)
    prior = Base.default("ttft", FEATURES)
    fitted = fit_base("ttft", FEATURES, x, y, None, prior, BaseFitParams())
    s = level(y, prior.compiled(FEATURES)(x), np.ones(len(y)))
    assert fitted.named()["num_request_waiting"] == pytest.approx(s * prior.named()["num_request_waiting"], rel=0.3)
    none = fit_base("ttft", FEATURES, x, y, None, prior, BaseFitParams(prior_rows=0.0))
    assert none.named()["num_request_waiting"] < 1e-6  # without shrinkage nothing holds it


def test_with_many_rows_the_prior_no_longer_matters() -> None:
    x, y = rows(5000, 4)
    a = fit_base("ttft", FEATURES, x, y, None, None, BaseFitParams())
    factors = (5.0, 0.2, 5.0, 0.2, 5.0, 1.0)  # a prior 5× off the truth in every term, up or down
    far = Base(TRUTH.terms, tuple(f * (c or 1e-6) for f, c in zip(factors, TRUTH.coefficients, strict=True)))
    b = fit_base("ttft", FEATURES, x, y, None, far, BaseFitParams())
    pa, pb = a.compiled(FEATURES)(x), b.compiled(FEATURES)(x)
    assert float(np.median(np.abs(np.log(pa / pb)))) < 0.05


def test_the_l1_loss_is_pulled_less_by_a_burst_of_slow_rows() -> None:
    x, y = rows(3000, 5, sigma=0.1)
    burst = y.copy()
    burst[::10] *= 20.0  # 10 % of the rows 20× slower (a stall)
    truth = TRUTH.compiled(FEATURES)(x)
    error = {}
    for loss in ("l2", "l1"):
        fitted = fit_base("ttft", FEATURES, x, burst, None, None, BaseFitParams(loss=loss))
        error[loss] = float(np.median(np.abs(np.log(fitted.compiled(FEATURES)(x) / truth))))
    assert error["l1"] < 0.1 < error["l2"], error


def test_other_terms_or_no_rows_fall_back_to_the_prior() -> None:
    x, y = rows(50, 6)
    stale = Base(("1", "prefill_tokens_in_flight"), (1.0, 1.0))  # a base of another feature spec: ignored
    assert fit_base("ttft", FEATURES, x, y, None, stale, BaseFitParams()).terms == TRUTH.terms
    assert fit_base("ttft", FEATURES, x[:0], y[:0], None, None, BaseFitParams()) == Base.default("ttft", FEATURES)
